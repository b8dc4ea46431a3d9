"""``GET`` and ``PATCH /api/v1/workspaces/{id}/budget``: the cap, spend, verdict; bad input."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import COMPLETION, Env, provisioned

pytestmark = pytest.mark.anyio

ONE_PER_TOKEN = {"input_usd_per_mtok": "1", "output_usd_per_mtok": "1"}
CONFIG: dict[str, Any] = {
    "models": [{"name": "gpt-fake", "provider": "up", "price": ONE_PER_TOKEN}],
    "plans": {"capped": {"included_requests": 1000, "burst_limit_rpm": 1000, "budget_usd": "0.01"}},
    "default_plan": "capped",
}


def path(env: Env, workspace_id: str | None = None) -> str:
    return f"/api/v1/workspaces/{workspace_id or env.workspace_id}/budget"


async def read(env: Env) -> Any:
    return (await env.recorder.request("GET", path(env), headers=env.auth())).json()


async def patch(env: Env, body: Any) -> Any:
    return await env.recorder.request("PATCH", path(env), json=body, headers=env.auth())


async def test_the_plan_cap_applies_until_the_workspace_sets_its_own() -> None:
    async with provisioned("capped", **CONFIG) as env:
        budget = await read(env)
        assert (budget["cap_usd"], budget["cap_source"]) == (0.01, "plan")
        assert (budget["spent_usd"], budget["reserved_usd"], budget["verdict"]) == (0.0, 0.0, "ok")
        assert budget["period"] == "2026-11"
        assert budget["period_reset_at"] == "2026-12-01T00:00:00Z"
        assert budget["wallet"] == {
            "billing": False,
            "balance_usd": 0.0,
            "last_topup_usd": 0.0,
            "topups": 0,
        }

        changed = await patch(env, {"cap_usd": 50})
        assert changed.status == 200
        assert (changed.json()["cap_usd"], changed.json()["cap_source"]) == (50.0, "workspace")
        back = await patch(env, {"cap_usd": None})
        assert (back.json()["cap_usd"], back.json()["cap_source"]) == (0.01, "plan")


async def test_spend_and_verdict_follow_the_requests() -> None:
    async with provisioned("capped", **CONFIG) as env:
        env.upstream.json_body = {
            **COMPLETION,
            "usage": {"prompt_tokens": 4000, "completion_tokens": 4000},
        }
        await patch(env, {"cap_usd": 0.01})  # 10,000 micro-USD; each request costs 8,000
        assert (await env.chat()).status == 200
        budget = await read(env)
        assert (budget["spent_usd"], budget["committed_usd"], budget["reserved_usd"]) == (
            0.008,
            0.008,
            0.0,
        )
        assert budget["verdict"] == "warn"


async def test_key_caps_are_set_and_removed_by_key_id() -> None:
    async with provisioned("capped", **CONFIG) as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        added = await patch(env, {"key_caps": {key_id: 2.5}})
        assert added.json()["key_caps"] == {key_id: 2.5}
        removed = await patch(env, {"key_caps": {key_id: None}})
        assert removed.json()["key_caps"] == {}


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"cap_usd": -1}, "invalid_value", "cap_usd"),
        ({"cap_usd": "10"}, "invalid_value", "cap_usd"),
        ({"cap_usd": True}, "invalid_value", "cap_usd"),
        ({"cap_usd": 10**10}, "invalid_value", "cap_usd"),
        ({"key_caps": []}, "invalid_type", "key_caps"),
        ({"key_caps": {"kid_someoneelse": 5}}, "key_not_found", "key_caps"),
        ({"key_caps": {"{key}": -5}}, "invalid_value", None),
        ({"limit": 5}, "unknown_parameter", "limit"),
    ],
)
async def test_bad_changes_are_refused_and_change_nothing(
    body: dict[str, Any], code: str, param: str | None
) -> None:
    async with provisioned("capped", **CONFIG) as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        if "key_caps" in body and isinstance(body["key_caps"], dict):
            body = {"key_caps": {k.format(key=key_id): v for k, v in body["key_caps"].items()}}
        before = await read(env)
        response = await patch(env, body)
        assert response.status == 400
        error = response.json()["error"]
        assert error["code"] == code
        if param is not None:
            assert error["param"] == param
        assert await read(env) == before


async def test_another_workspace_s_budget_is_out_of_reach() -> None:
    async with provisioned("capped", **CONFIG) as env:
        other = await env.gateway.workspaces.create("other@example.com", plan="capped")
        for method, body in (("GET", None), ("PATCH", {"cap_usd": 0})):
            response = await env.recorder.request(
                method, path(env, other.id), json=body, headers=env.auth()
            )
            assert response.status == 403
        assert (await env.gateway.ledger.settings(other.id)).cap_micro_usd is None
