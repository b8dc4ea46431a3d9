"""GET /v1/me: exactly the fields of spec 2.1 for the authenticated workspace."""

from __future__ import annotations

import json

import pytest

from gateway_kit.accounts.spend import savings_key
from tests.fakes import provisioned

pytestmark = pytest.mark.anyio

SPEC_FIELDS = [
    "workspace_id",
    "email",
    "plan",
    "included_requests",
    "used_requests",
    "burst_limit_rpm",
    "savings_usd",
    "reset_at",
]


async def test_me_has_exactly_the_spec_fields_for_the_keys_workspace() -> None:
    async with provisioned("scale") as env:
        for _ in range(3):
            await env.chat()
        response = await env.recorder.request("GET", "/v1/me", headers=env.auth())
        assert response.status == 200
        me = response.json()
        assert list(me) == SPEC_FIELDS
        assert me == {
            "workspace_id": env.workspace_id,
            "email": "team@example.com",
            "plan": "scale",
            "included_requests": 1000,
            "used_requests": 3,
            "burst_limit_rpm": 600,
            "savings_usd": 0.0,
            "reset_at": "2026-12-01T00:00:00Z",
        }
        assert env.workspace_id.startswith("ws_")
        assert b'"savings_usd": 0.00,' in response.body  # a number with two decimals


@pytest.mark.parametrize(
    ("micro_usd", "text"),
    [(12_345_678, "12.35"), (5_000, "0.01"), (4_999, "0.00"), (10**12, "1000000.00")],
)
async def test_savings_render_as_a_two_decimal_number(micro_usd: int, text: str) -> None:
    async with provisioned() as env:
        await env.storage.incr(savings_key(env.workspace_id), micro_usd)
        response = await env.recorder.request("GET", "/v1/me", headers=env.auth())
        assert f'"savings_usd": {text},'.encode() in response.body
        assert json.loads(response.body)["savings_usd"] == float(text)


async def test_me_does_not_count_as_a_request() -> None:
    async with provisioned("tiny") as env:
        for _ in range(10):
            assert (await env.recorder.request("GET", "/v1/me", headers=env.auth())).status == 200
        assert await env.used_requests() == 0
