"""AuthMiddleware: who is calling, through the app; bad keys change nothing and leak nothing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway_kit import MemoryStorage, StorageError
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio

UNKNOWN = "gk_" + "Z" * 43


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "code", "param"}
    error: dict[str, Any] = body["error"]
    return error


async def counters(env: Env) -> dict[str, bytes | None]:
    """Every quota and burst value of the workspace (what a bad request must not change)."""
    storage: MemoryStorage = env.storage
    keys = [f"{env.workspace_id}:quota:2026-11", f"{env.workspace_id}:burst"]
    return {key: await storage.get(key) for key in keys}


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        pytest.param({}, "missing_api_key", id="missing"),
        pytest.param({"authorization": ""}, "invalid_api_key", id="empty"),
        pytest.param({"authorization": "Bearer"}, "invalid_api_key", id="no-token"),
        pytest.param({"authorization": "Bearer "}, "invalid_api_key", id="blank-token"),
        pytest.param({"authorization": "Basic dXNlcjpwdw=="}, "invalid_api_key", id="basic"),
        pytest.param({"authorization": "Token " + "a" * 40}, "invalid_api_key", id="token"),
        pytest.param({"authorization": "Bearer a b"}, "invalid_api_key", id="two-tokens"),
        pytest.param({"authorization": "Bearer \xe9\xe9"}, "invalid_api_key", id="non-ascii"),
        pytest.param({"authorization": "Bearer sk-abc"}, "invalid_api_key", id="foreign-key"),
        pytest.param({"authorization": f"Bearer {UNKNOWN}"}, "invalid_api_key", id="unknown"),
    ],
)
async def test_bad_credentials_get_401_and_change_nothing(
    headers: dict[str, str], code: str
) -> None:
    async with provisioned() as env:
        before = await counters(env)
        response = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            json={"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}]},
            headers=headers,
        )
        assert response.status == 401
        assert error_of(response)["code"] == code
        assert error_of(response)["type"] == "authentication_error"
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert await counters(env) == before
        assert env.upstream.calls == 0


async def test_a_valid_key_reaches_the_upstream() -> None:
    async with provisioned() as env:
        response = await env.chat()
        assert response.status == 200
        assert env.upstream.calls == 1
        # The gateway's key is never forwarded upstream.
        assert env.key not in str(env.upstream.requests[0].headers)


async def test_revoked_and_rotated_keys_are_refused_and_change_nothing() -> None:
    async with provisioned() as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        rotated = await env.gateway.keys.rotate(env.workspace_id, key_id, grace=30)
        assert (await env.chat(env.key)).status == 200  # in its grace period
        env.clock.advance(31)
        before = await counters(env)
        response = await env.chat(env.key)
        assert response.status == 401
        assert error_of(response)["code"] == "invalid_api_key"
        assert await counters(env) == before
        await env.gateway.keys.revoke(env.workspace_id, key_id)
        assert (await env.chat(rotated.secret)).status == 401
        assert await counters(env) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/workspaces/{other}/keys"),
        ("POST", "/api/v1/workspaces/{other}/keys"),
        ("DELETE", "/api/v1/workspaces/{other}/keys/kid_abc"),
        ("GET", "/api/v1/workspaces/ws_doesnotexist/keys"),
        ("GET", "/api/v1/workspaces/not-even-an-id/keys"),
    ],
)
async def test_another_workspace_is_forbidden_and_reveals_nothing(method: str, path: str) -> None:
    async with provisioned() as env:
        other = await env.gateway.workspaces.create("other@example.com")
        await env.gateway.keys.create(other.id)
        response = await env.recorder.request(
            method, path.format(other=other.id), headers=env.auth(), json={}
        )
        assert response.status == 403
        error = error_of(response)
        assert error == {
            "message": "This API key cannot access that workspace.",
            "type": "permission_error",
            "code": "workspace_forbidden",
            "param": None,
        }
        assert len(await env.gateway.keys.list(other.id)) == 1  # nothing created there


async def test_health_is_public_and_models_need_a_key() -> None:
    async with provisioned() as env:
        assert (await env.recorder.request("GET", "/healthz")).status == 200
        assert (await env.recorder.request("GET", "/v1/models")).status == 401
        models = await env.recorder.request("GET", "/v1/models", headers=env.auth())
        assert models.status == 200


async def test_keys_never_appear_in_logs_or_error_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with provisioned() as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        rotated = await env.gateway.keys.rotate(env.workspace_id, key_id)
        secrets = [env.key, rotated.secret, UNKNOWN]
        bodies = []
        for secret in secrets:
            for path in ("/v1/chat/completions", "/v1/me", "/api/v1/workspaces/ws_x/keys"):
                response = await env.recorder.request(
                    "POST" if "chat" in path else "GET",
                    path,
                    json={"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}]},
                    headers={"authorization": f"Bearer {secret}"},
                )
                bodies.append(response.body.decode())
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in secrets:
        assert secret not in logged
        assert all(secret not in body for body in bodies)
        assert secret[8:20] not in logged  # not even a fragment past the visible prefix


async def test_auth_off_serves_without_a_key() -> None:
    async with provisioned(auth={"mode": "off"}) as env:
        response = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            json={"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}]},
        )
        assert response.status == 200


class UnreadableStorage(MemoryStorage):
    """Memory storage whose reads fail while ``broken`` is set."""

    broken = False

    async def get(self, key: str) -> bytes | None:
        if self.broken:
            raise StorageError("storage is down")
        return await super().get(key)


async def test_a_storage_failure_answers_503_whatever_the_other_layers_say() -> None:
    async with provisioned("scale", storage_class=UnreadableStorage) as env:
        env.storage.broken = True
        response = await env.chat()
        assert response.status == 503
        assert response.json()["error"]["code"] == "auth_unavailable"
        assert env.upstream.calls == 0
