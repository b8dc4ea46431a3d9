"""The keys management API: create, list, read, rotate, revoke; bad input answered clearly."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_kit import StorageError
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio


def keys_path(env: Env, suffix: str = "") -> str:
    return f"/api/v1/workspaces/{env.workspace_id}/keys{suffix}"


async def test_create_list_read_rotate_revoke() -> None:
    async with provisioned() as env:
        created = await env.recorder.request(
            "POST", keys_path(env), json={"name": "ci"}, headers=env.auth()
        )
        assert created.status == 201
        new = created.json()
        assert new["key"].startswith(new["prefix"])
        assert new["status"] == "active"
        assert new["created_at"].endswith("Z")
        assert (await env.chat(new["key"])).status == 200

        listed = await env.recorder.request("GET", keys_path(env), headers=env.auth())
        data = listed.json()["data"]
        assert [k["name"] for k in data] == ["default", "ci"]
        assert all("key" not in k for k in data)

        read = await env.recorder.request(
            "GET", keys_path(env, f"/{new['key_id']}"), headers=env.auth()
        )
        assert read.json()["prefix"] == new["prefix"]

        rotated = await env.recorder.request(
            "POST",
            keys_path(env, f"/{new['key_id']}/rotate"),
            json={"grace_period_s": 0},
            headers=env.auth(),
        )
        assert rotated.status == 200
        assert rotated.json()["key_id"] == new["key_id"]
        assert rotated.json()["rotated_at"].endswith("Z")
        assert (await env.chat(new["key"])).status == 401
        assert (await env.chat(rotated.json()["key"])).status == 200

        revoked = await env.recorder.request(
            "DELETE", keys_path(env, f"/{new['key_id']}"), headers=env.auth()
        )
        assert revoked.json()["status"] == "revoked"
        assert (await env.chat(rotated.json()["key"])).status == 401


async def test_a_key_can_revoke_itself() -> None:
    async with provisioned() as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        response = await env.recorder.request(
            "DELETE", keys_path(env, f"/{key_id}"), headers=env.auth()
        )
        assert response.status == 200
        assert (await env.chat()).status == 401


@pytest.mark.parametrize(
    ("method", "suffix", "request_args", "status", "code"),
    [
        ("POST", "", {"body": b"{nope"}, 400, "invalid_json"),
        ("POST", "", {"body": b"[]"}, 400, "invalid_type"),
        ("POST", "", {"json": {"name": 5}}, 400, "invalid_type"),
        ("POST", "", {"json": {"name": ""}}, 400, "invalid_type"),
        ("POST", "", {"json": {"name": "x" * 201}}, 400, "invalid_value"),
        ("POST", "", {"json": {"name": "a", "admin": True}}, 400, "unknown_parameter"),
        ("POST", "", {"body": b'{"name": "' + b"x" * 70_000 + b'"}'}, 413, "request_too_large"),
        (
            "POST",
            "",
            {"body": b'{"name": "a"}', "headers": {"content-type": "text/plain"}},
            415,
            "unsupported_media_type",
        ),
        ("GET", "/kid_nosuchkey", {}, 404, "key_not_found"),
        ("GET", "/not-a-key-id", {}, 404, "key_not_found"),
        ("DELETE", "/kid_nosuchkey", {}, 404, "key_not_found"),
        ("POST", "/kid_nosuchkey/rotate", {"json": {}}, 404, "key_not_found"),
        ("POST", "/{key_id}/rotate", {"json": {"grace_period_s": -1}}, 400, "invalid_value"),
        ("POST", "/{key_id}/rotate", {"json": {"grace_period_s": "1h"}}, 400, "invalid_value"),
        ("POST", "/{key_id}/rotate", {"json": {"grace_period_s": 10**9}}, 400, "invalid_value"),
    ],
)
async def test_bad_management_requests_get_clear_errors_and_change_nothing(
    method: str, suffix: str, request_args: dict[str, Any], status: int, code: str
) -> None:
    async with provisioned() as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        before = [k.public() for k in await env.gateway.keys.list(env.workspace_id)]
        headers = {**env.auth(), **request_args.pop("headers", {})}
        if "body" in request_args:
            headers.setdefault("content-type", "application/json")
        response = await env.recorder.request(
            method, keys_path(env, suffix.format(key_id=key_id)), headers=headers, **request_args
        )
        assert response.status == status
        error = response.json()["error"]
        assert error["code"] == code
        assert error["message"]
        after = [k.public() for k in await env.gateway.keys.list(env.workspace_id)]
        assert after == before
        assert (await env.chat()).status == 200  # the caller's key still works


async def test_a_storage_failure_is_a_503_to_retry_not_a_500(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with provisioned() as env:

        async def down(*args: Any, **kwargs: Any) -> Any:
            raise StorageError("storage is down")

        monkeypatch.setattr(env.gateway.storage, "map_items", down)
        listed = await env.recorder.request("GET", keys_path(env), headers=env.auth())
        assert listed.status == 503
        assert listed.headers["retry-after"] == "1"
        error = listed.json()["error"]
        assert (error["type"], error["code"]) == ("api_error", "storage_unavailable")


async def test_a_secret_in_its_grace_period_may_not_mint_or_rotate_keys() -> None:
    """After a leak the owner rotates with a grace period; the leaked secret rotated the key
    again (the owner's new secret died) and kept a secret that never expires."""
    async with provisioned() as env:
        me = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        rotated = await env.recorder.request(
            "POST", keys_path(env, f"/{me}/rotate"), json={"grace_period_s": 60}, headers=env.auth()
        )
        new_secret = rotated.json()["key"]
        old = env.auth()  # the leaked secret, in its grace period
        for method, suffix in (("POST", f"/{me}/rotate"), ("POST", "")):
            refused = await env.recorder.request(method, keys_path(env, suffix), headers=old)
            assert refused.status == 403, suffix
            assert refused.json()["error"]["code"] == "key_retiring"
        assert (await env.chat(new_secret)).status == 200  # the owner's new secret lives
        # Reading still works for the grace period, as inference does.
        assert (await env.recorder.request("GET", keys_path(env), headers=old)).status == 200


async def test_a_capped_key_may_not_mint_or_take_over_keys() -> None:
    """A capped key made a sibling with budget:write, and it lifted the cap."""
    from gateway_kit.accounts.spend import BudgetSettings

    async with provisioned() as env:
        me = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        sibling = await env.gateway.keys.create(env.workspace_id, name="other")
        await env.gateway.ledger.save_settings(env.workspace_id, BudgetSettings(key_caps={me: 1}))
        made = await env.recorder.request(
            "POST", keys_path(env), json={"scopes": ["budget:write"]}, headers=env.auth()
        )
        assert made.status == 403
        assert made.json()["error"]["code"] == "key_capped"
        taken = await env.recorder.request(
            "POST", keys_path(env, f"/{sibling.key.key_id}/rotate"), headers=env.auth()
        )
        assert taken.status == 403
        # Revoking takes nothing: still allowed.
        revoked = await env.recorder.request(
            "DELETE", keys_path(env, f"/{sibling.key.key_id}"), headers=env.auth()
        )
        assert revoked.status == 200


async def test_a_rotation_on_another_instance_stops_the_old_secret_making_keys_at_once() -> None:
    """The other instance's cache still took the old secret for the current one (for up to
    auth.cache_ttl_s): it made keys that never expire, a moment after the rotation."""
    from gateway_kit import Gateway

    async with provisioned(auth={"cache_ttl_s": 5}) as env:
        me = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        assert (await env.recorder.request("GET", keys_path(env), headers=env.auth())).status == 200
        other = Gateway(env.gateway.config, storage=env.gateway.storage, run_worker=False)
        async with other:  # another instance on the same storage rotates the key
            await other.keys.rotate(env.workspace_id, me, grace=3600)
        made = await env.recorder.request("POST", keys_path(env), headers=env.auth())
        assert made.status == 403
        assert made.json()["error"]["code"] == "key_retiring"
