"""Key scopes through the API: what an inference key, an admin key and custom scopes may do,
that no key hands out more than it holds, and that a capped key cannot escape its cap."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway_kit.accounts.scopes import KeyScope
from tests.api.test_webhooks_api import PUBLIC, SECRET, guard
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio


def path(env: Env, suffix: str) -> str:
    return f"/api/v1/workspaces/{env.workspace_id}{suffix}"


async def make_key(env: Env, key: str | None = None, **body: Any) -> Any:
    return await env.recorder.request("POST", path(env, "/keys"), json=body, headers=env.auth(key))


async def test_a_new_key_is_an_inference_key_unless_asked_otherwise() -> None:
    async with provisioned() as env:
        plain = (await make_key(env, name="app")).json()
        assert (plain["role"], plain["scopes"]) == ("inference", ["inference"])
        admin = (await make_key(env, role="admin")).json()
        assert admin["role"] == "admin"
        assert admin["scopes"] == [s.value for s in KeyScope]
        custom = (await make_key(env, scopes=["inference", "budget:write"])).json()
        # budget:write brings budget:read along.
        assert custom["role"] == "custom"
        assert custom["scopes"] == ["inference", "budget:read", "budget:write"]
        listed = await env.recorder.request("GET", path(env, "/keys"), headers=env.auth())
        assert {k["key_id"]: k["role"] for k in listed.json()["data"]}[custom["key_id"]] == "custom"
        # The scopes hold where they are enforced: the custom key reads the budget...
        budget = await env.recorder.request(
            "GET", path(env, "/budget"), headers=env.auth(custom["key"])
        )
        assert budget.status == 200
        # ...and not the keys.
        keys = await env.recorder.request(
            "GET", path(env, "/keys"), headers=env.auth(custom["key"])
        )
        assert keys.status == 403
        assert "'keys:read'" in keys.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"role": "owner"}, "role"),
        ({"role": 1}, "role"),
        ({"scopes": ["inference", "everything"]}, "scopes"),
        ({"scopes": []}, "scopes"),
        ({"scopes": "inference"}, "scopes"),
        ({"role": "admin", "scopes": ["inference"]}, "scopes"),
    ],
)
async def test_bad_roles_and_scopes_are_refused_and_make_no_key(
    body: dict[str, Any], param: str
) -> None:
    async with provisioned() as env:
        answer = await make_key(env, **body)
        assert answer.status == 400
        assert answer.json()["error"]["param"] == param
        assert len(await env.gateway.keys.list(env.workspace_id)) == 1


async def test_no_key_hands_out_or_takes_over_more_than_it_holds() -> None:
    async with provisioned() as env:
        admin_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        keeper = (await make_key(env, scopes=["inference", "keys:write"])).json()
        # It may make keys with its own scopes, or fewer...
        assert (await make_key(env, keeper["key"], role="inference")).status == 201
        made = await make_key(env, keeper["key"], scopes=["keys:read"])
        assert made.status == 201
        # ...never more: not an admin key, not one with a scope it lacks.
        for body in ({"role": "admin"}, {"scopes": ["inference", "budget:read"]}):
            refused = await make_key(env, keeper["key"], **body)
            assert refused.status == 403
            assert refused.json()["error"]["code"] == "missing_scope"
        # Rotating the admin key would hand it the admin's new secret; revoking it, a coup.
        for suffix, method in (("/rotate", "POST"), ("", "DELETE")):
            answer = await env.recorder.request(
                method, path(env, f"/keys/{admin_id}{suffix}"), headers=env.auth(keeper["key"])
            )
            assert answer.status == 403
        assert (await env.chat()).status == 200  # the admin key still works, unrotated
        # Keys within its scopes it manages.
        lesser = made.json()["key_id"]
        rotated = await env.recorder.request(
            "POST", path(env, f"/keys/{lesser}/rotate"), headers=env.auth(keeper["key"])
        )
        assert rotated.status == 200


async def test_a_capped_inference_key_cannot_escape_its_cap() -> None:
    async with provisioned(
        ssrf_guard=guard(), plans={"tiny": {"included_requests": 100, "burst_limit_rpm": 600}}
    ) as env:
        app = (await make_key(env, name="app")).json()
        capped = await env.recorder.request(
            "PATCH",
            path(env, "/budget"),
            json={"key_caps": {app["key_id"]: 0.5}},
            headers=env.auth(),
        )
        assert capped.status == 200
        settings = await env.gateway.ledger.settings(env.workspace_id)
        attempts = [
            ("PATCH", "/budget", {"key_caps": {app["key_id"]: None}}),  # remove
            ("PATCH", "/budget", {"key_caps": {app["key_id"]: 1000}}),  # raise
            ("PATCH", "/budget", {"cap_usd": None}),
            ("POST", "/keys", {"role": "inference"}),  # a fresh, uncapped key
            ("POST", "/webhooks", {"name": "x", "url": PUBLIC, "secret": SECRET}),
            ("GET", "/webhooks", None),
        ]
        for method, suffix, body in attempts:
            answer = await env.recorder.request(
                method, path(env, suffix), json=body, headers=env.auth(app["key"])
            )
            assert answer.status == 403, (method, suffix)
            assert answer.json()["error"]["code"] == "missing_scope"
        assert await env.gateway.ledger.settings(env.workspace_id) == settings
        assert len(await env.gateway.keys.list(env.workspace_id)) == 2
        assert await env.gateway.webhooks.for_workspace(env.workspace_id) == []
        # What it may do: call models and read its workspace's status.
        assert (await env.chat(app["key"])).status == 200
        me = await env.recorder.request("GET", "/v1/me", headers=env.auth(app["key"]))
        assert me.status == 200


async def test_only_an_admin_key_changes_its_own_cap() -> None:
    async with provisioned() as env:
        treasurer = (await make_key(env, scopes=["budget:write"])).json()
        own = {"key_caps": {treasurer["key_id"]: 100}}
        refused = await env.recorder.request(
            "PATCH", path(env, "/budget"), json=own, headers=env.auth(treasurer["key"])
        )
        assert refused.status == 403
        assert "change its own cap" in refused.json()["error"]["message"]
        # Other keys' caps and the workspace's cap it may set: that is its job.
        app = (await make_key(env)).json()
        allowed = await env.recorder.request(
            "PATCH",
            path(env, "/budget"),
            json={"key_caps": {app["key_id"]: 2}, "cap_usd": 50},
            headers=env.auth(treasurer["key"]),
        )
        assert allowed.status == 200
        assert allowed.json()["key_caps"] == {app["key_id"]: 2.0}
        # An admin key may cap (and uncap) itself.
        admin_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        for cap in (5, None):
            answer = await env.recorder.request(
                "PATCH",
                path(env, "/budget"),
                json={"key_caps": {admin_id: cap}},
                headers=env.auth(),
            )
            assert answer.status == 200


async def test_keys_made_before_scopes_get_the_configured_default() -> None:
    async with provisioned() as env:
        legacy = await env.gateway.keys.create(env.workspace_id, name="old")
        # As an older version stored it: no scopes in the record or in the index entry.
        storage = env.gateway.storage
        record = json.loads(await storage.map_get(f"{env.workspace_id}:keys", legacy.key.key_id))
        del record["scopes"], record["role"]
        await storage.map_set(
            f"{env.workspace_id}:keys", legacy.key.key_id, json.dumps(record).encode()
        )
        [digest] = legacy.key.hashes
        entry = json.loads(await storage.get(f"gk:apikey:{digest}"))
        del entry["scopes"], entry["role"]
        await storage.set(f"gk:apikey:{digest}", json.dumps(entry).encode())

        assert (await env.chat(legacy.secret)).status == 200
        keys = await env.recorder.request(
            "GET", path(env, "/keys"), headers=env.auth(legacy.secret)
        )
        assert keys.status == 403
        listed = await env.recorder.request("GET", path(env, "/keys"), headers=env.auth())
        old = next(k for k in listed.json()["data"] if k["name"] == "old")
        assert old["role"] == "inference"

    async with provisioned(auth={"cache_ttl_s": 0, "unscoped_keys": "admin"}) as env:
        made = await env.gateway.keys.create(env.workspace_id)
        storage = env.gateway.storage
        [digest] = made.key.hashes
        entry = json.loads(await storage.get(f"gk:apikey:{digest}"))
        del entry["scopes"], entry["role"]
        await storage.set(f"gk:apikey:{digest}", json.dumps(entry).encode())
        keys = await env.recorder.request("GET", path(env, "/keys"), headers=env.auth(made.secret))
        assert keys.status == 200


async def test_a_suspended_workspace_is_refused_everywhere_until_resumed() -> None:
    async with provisioned() as env:
        await env.gateway.workspaces.update(env.workspace_id, status="suspended")
        for answer in (
            await env.chat(),
            await env.recorder.request("GET", "/v1/me", headers=env.auth()),
            await env.recorder.request("GET", path(env, "/keys"), headers=env.auth()),
        ):
            assert answer.status == 403
            assert answer.json()["error"]["code"] == "workspace_suspended"
        await env.gateway.workspaces.update(env.workspace_id, status="active")
        assert (await env.chat()).status == 200
        assert await env.used_requests() == 1  # the refused call held no quota
