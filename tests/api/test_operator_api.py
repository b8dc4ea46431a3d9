"""The operator API: workspaces listed, created, read, changed, suspended and deleted; budgets
and keys of any workspace; all behind the operator's token."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_kit.webhooks.emitter import QUEUE
from tests.api.test_webhooks_api import PUBLIC, SECRET, guard
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio

TOKEN = "operator-" + "t" * 32
ADMIN = {"authorization": f"Bearer {TOKEN}"}


async def op(env: Env, method: str, path: str, body: Any = None) -> Any:
    return await env.recorder.request(method, f"/api/v1/admin{path}", json=body, headers=ADMIN)


async def test_workspaces_are_listed_by_id_a_page_at_a_time_and_filtered() -> None:
    async with provisioned(admin={"token": TOKEN}) as env:
        made = [env.workspace_id]
        for i in range(6):
            created = await op(
                env, "POST", "/workspaces", {"email": f"t{i}@example.com", "plan": "scale"}
            )
            assert created.status == 201
            made.append(created.json()["workspace_id"])
        await op(env, "PATCH", f"/workspaces/{made[3]}", {"status": "suspended"})

        seen, after = [], None
        while True:
            query = "?limit=4" + (f"&after={after}" if after else "")
            page = (await op(env, "GET", f"/workspaces{query}")).json()
            assert len(page["data"]) <= 4
            seen += page["data"]
            assert page["has_more"] == (page["next_after"] is not None)
            if not page["has_more"]:
                break
            after = page["next_after"]
        assert [w["workspace_id"] for w in seen] == sorted(made)

        scale = (await op(env, "GET", "/workspaces?plan=scale")).json()["data"]
        assert sorted(w["workspace_id"] for w in scale) == sorted(made[1:])
        suspended = (await op(env, "GET", "/workspaces?status=suspended")).json()["data"]
        assert [w["workspace_id"] for w in suspended] == [made[3]]
        assert suspended[0]["status"] == "suspended"

        for query, param in (
            ("?limit=0", "limit"),
            ("?limit=501", "limit"),
            ("?after=nope", "after"),
            ("?plan=gold", "plan"),
            ("?status=gone", "status"),
            ("?sort=email", "sort"),
        ):
            answer = await op(env, "GET", f"/workspaces{query}")
            assert answer.status == 400, query
            assert answer.json()["error"]["param"] == param


async def test_one_workspace_with_its_usage_spend_budget_and_wallet() -> None:
    async with provisioned(
        admin={"token": TOKEN},
        plans={"tiny": {"included_requests": 5, "burst_limit_rpm": 3, "budget_usd": 12}},
    ) as env:
        assert (await env.chat()).status == 200
        view = (await op(env, "GET", f"/workspaces/{env.workspace_id}")).json()
        assert view["workspace_id"] == env.workspace_id
        assert (view["email"], view["plan"], view["status"]) == (
            "team@example.com",
            "tiny",
            "active",
        )
        assert view["created_at"].endswith("Z")
        assert view["usage"]["used_requests"] == 1
        assert view["usage"]["included_requests"] == 5
        assert view["budget"]["cap_usd"] == 12.0
        assert view["budget"]["wallet"]["balance_usd"] == 0.0
        assert view["keys"] == {"active": 1, "revoked": 0}
        assert view["webhooks"] == 0
        missing = await op(env, "GET", "/workspaces/ws_nosuch")
        assert (missing.status, missing.json()["error"]["code"]) == (404, "workspace_not_found")


async def test_plan_email_and_status_change_and_the_keys_follow_at_once() -> None:
    async with provisioned(admin={"token": TOKEN}) as env:
        path = f"/workspaces/{env.workspace_id}"
        changed = await op(env, "PATCH", path, {"plan": "scale", "email": "new@example.com"})
        assert changed.status == 200
        assert (changed.json()["plan"], changed.json()["email"]) == ("scale", "new@example.com")
        me = await env.recorder.request("GET", "/v1/me", headers=env.auth())
        assert me.json()["plan"] == "scale"
        assert me.json()["included_requests"] == 1000

        assert (await op(env, "PATCH", path, {"status": "suspended"})).status == 200
        refused = await env.chat()
        assert (refused.status, refused.json()["error"]["code"]) == (403, "workspace_suspended")
        assert (await op(env, "PATCH", path, {"status": "active"})).status == 200
        assert (await env.chat()).status == 200

        for body, param in (
            ({"plan": "gold"}, "plan"),
            ({"email": "not-an-email"}, "email"),
            ({"email": "a\x1b[31m@example.com"}, "email"),  # string_field: no controls
            ({"status": "deleted"}, "status"),
            ({"status": None}, "status"),  # once a 200 doing nothing, as plan and email are not
            ({"plan": None}, "plan"),
            ({"owner": "me"}, "owner"),
            ({}, None),
        ):
            answer = await op(env, "PATCH", path, body)
            assert answer.status == 400, body
            assert answer.json()["error"]["param"] == param
        after = (await op(env, "GET", path)).json()
        assert (after["plan"], after["email"]) == ("scale", "new@example.com")


async def test_the_operator_sets_any_cap_and_mints_keys_of_any_role() -> None:
    async with provisioned(admin={"token": TOKEN}) as env:
        own = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        path = f"/workspaces/{env.workspace_id}"
        capped = await op(env, "PATCH", f"{path}/budget", {"cap_usd": 20, "key_caps": {own: 3}})
        assert capped.status == 200
        assert (capped.json()["cap_usd"], capped.json()["key_caps"]) == (20.0, {own: 3.0})
        read = (await op(env, "GET", f"{path}/budget")).json()
        assert read["cap_source"] == "workspace"
        bad = await op(env, "PATCH", f"{path}/budget", {"key_caps": {"kid_nosuch": 1}})
        assert bad.status == 400

        made = await op(env, "POST", f"{path}/keys", {"name": "owner", "role": "admin"})
        assert made.status == 201
        assert made.json()["role"] == "admin"
        keys = await env.recorder.request(
            "GET", f"/api/v1{path}/keys", headers=env.auth(made.json()["key"])
        )
        assert keys.status == 200


async def test_a_new_workspace_with_its_first_admin_key() -> None:
    async with provisioned(admin={"token": TOKEN}) as env:
        created = await op(
            env, "POST", "/workspaces", {"email": "new@example.com", "with_key": True}
        )
        assert created.status == 201
        body = created.json()
        assert body["plan"] == "tiny"  # the default plan
        assert body["key"]["role"] == "admin"
        assert body["keys"] == {"active": 1, "revoked": 0}  # once 0 beside the key it made
        me = await env.recorder.request("GET", "/v1/me", headers=env.auth(body["key"]["key"]))
        assert me.json()["workspace_id"] == body["workspace_id"]
        again = await op(
            env,
            "POST",
            "/workspaces",
            {"email": "x@example.com", "workspace_id": body["workspace_id"]},
        )
        assert again.status == 409
        assert again.json()["error"]["param"] == "workspace_id"
        assert again.json()["error"]["code"] == "workspace_exists"
        for bad, param in (
            ({"email": "nope"}, "email"),
            ({"email": "a@b.co", "plan": "gold"}, "plan"),
            ({"email": 3}, "email"),
            ({}, "email"),
            ({"email": "a@b.co", "workspace_id": "not an id"}, "workspace_id"),
        ):
            answer = await op(env, "POST", "/workspaces", bad)
            assert answer.status == 400, bad
            assert answer.json()["error"]["param"] == param, bad


async def test_deleting_a_workspace_removes_its_keys_webhooks_deliveries_and_state() -> None:
    async with provisioned(admin={"token": TOKEN}, ssrf_guard=guard()) as env:
        gateway, ws = env.gateway, env.workspace_id
        hook = await env.recorder.request(
            "POST",
            f"/api/v1/workspaces/{ws}/webhooks",
            json={"name": "h", "url": PUBLIC, "secret": SECRET},
            headers=env.auth(),
        )
        hook_id = hook.json()["id"]
        assert (await env.chat()).status == 200
        # A delivery held for this webhook (as after it went stale).
        storage = gateway.storage
        await storage.enqueue(QUEUE, f"evt_1.{hook_id}", b"{}", due_at=0)
        [item] = await storage.claim(QUEUE, limit=1, lease=30)
        await storage.dead(QUEUE, item.token, reason="stale")
        await gateway.webhooks.index_dead(
            ws, hook_id, f"evt_1.{hook_id}", {"timestamp": "2026-11-18T00:00:00Z"}
        )
        other = await gateway.workspaces.create("other@example.com")
        await gateway.ledger.save_settings(other.id, await gateway.ledger.settings(other.id))
        await storage.set(f"{other.id}:marker", b"kept")

        topped = await op(env, "POST", f"/workspaces/{ws}/wallet/topups", {"amount_usd": 5})
        assert topped.status == 201
        refused = await op(env, "DELETE", f"/workspaces/{ws}")
        assert (refused.status, refused.json()["error"]["code"]) == (409, "wallet_not_empty")
        assert (await env.chat()).status == 200  # nothing was deleted

        deleted = await op(env, "DELETE", f"/workspaces/{ws}?force=true")
        assert deleted.status == 200
        summary = deleted.json()
        assert summary["keys_revoked"] == 1
        assert summary["webhooks_deleted"] == 1
        assert summary["held_deliveries_dropped"] == 1
        assert summary["wallet_discarded_usd"] == 5.0

        assert (await env.chat()).status == 401
        assert (await op(env, "GET", f"/workspaces/{ws}")).status == 404
        assert await storage.dead_items(QUEUE, limit=10) == []
        leftovers = [k for k in storage._tx._entries if k.startswith(f"{ws}:")]
        assert leftovers == []
        assert await storage.get(f"{other.id}:marker") == b"kept"
        listed = (await op(env, "GET", "/workspaces")).json()["data"]
        assert [w["workspace_id"] for w in listed] == [other.id]


async def test_without_a_token_configured_the_operator_api_is_not_there() -> None:
    async with provisioned() as env:
        answer = await env.recorder.request("GET", "/api/v1/admin/workspaces", headers=ADMIN)
        assert answer.status == 404
    async with provisioned(admin={"token": TOKEN}) as env:
        wrong = await env.recorder.request("GET", "/api/v1/admin/workspaces", headers=env.auth())
        assert (wrong.status, wrong.json()["error"]["code"]) == (401, "invalid_admin_token")
