"""LimitsMiddleware: burst limit (GCRA) and included requests per period, through the app."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import BreakableStorage, provisioned

pytestmark = pytest.mark.anyio


def error_code(response: Any) -> str:
    code: str = response.json()["error"]["code"]
    return code


async def test_the_burst_limit_answers_429_with_retry_after_then_recovers() -> None:
    async with provisioned("tiny") as env:  # 3 requests per minute, bursts of 3
        assert [(await env.chat()).status for _ in range(3)] == [200, 200, 200]
        refused = await env.chat()
        assert refused.status == 429
        assert error_code(refused) == "rate_limit_exceeded"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.headers["retry-after"] == "20"  # one request every 60/3 s
        assert refused.headers["x-ratelimit-remaining"] == "0"
        env.clock.advance(19.9)
        assert (await env.chat()).status == 429
        env.clock.advance(0.1)
        assert (await env.chat()).status == 200


async def test_the_included_requests_are_exact_then_402() -> None:
    async with provisioned("tiny") as env:  # 5 included
        statuses = []
        for _ in range(7):
            statuses.append((await env.chat()).status)
            env.clock.advance(20)  # stay under the burst limit
        assert statuses == [200] * 5 + [402] * 2
        refused = await env.chat()
        assert error_code(refused) == "quota_exceeded"
        assert refused.json()["error"]["type"] == "insufficient_quota"
        assert "2026-12-01T00:00:00Z" in refused.json()["error"]["message"]
        assert await env.used_requests() == 5


async def test_rejected_requests_consume_neither_quota_nor_burst() -> None:
    async with provisioned("tiny") as env:
        for _ in range(3):
            assert (await env.chat()).status == 200
        for _ in range(5):
            assert (await env.chat()).status == 429  # refused: takes nothing
        assert await env.used_requests() == 3
        env.clock.advance(40)  # two burst tokens back
        assert (await env.chat()).status == 200
        assert (await env.chat()).status == 200
        assert (await env.chat()).status == 429
        assert await env.used_requests() == 5


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"messages": []}, id="invalid-request"),
        pytest.param({"model": "no-such-model"}, id="unknown-model"),
    ],
)
async def test_requests_refused_before_the_step_hold_nothing(body: dict[str, Any]) -> None:
    async with provisioned("tiny") as env:
        for _ in range(10):  # more than the burst and the quota
            assert (await env.chat(**body)).status in (400, 404)
        assert await env.used_requests() == 0
        for _ in range(3):
            assert (await env.chat()).status == 200  # the whole burst is still there


@pytest.mark.parametrize(
    ("body", "upstream_status", "status"),
    [
        pytest.param({}, 503, 502, id="upstream-down"),
        pytest.param({}, 400, 400, id="upstream-4xx"),
    ],
)
async def test_requests_failing_further_in_give_their_quota_back(
    body: dict[str, Any], upstream_status: int, status: int
) -> None:
    async with provisioned("scale") as env:
        env.upstream.status = upstream_status
        response = await env.chat(**body)
        assert response.status == status
        assert "ratelimit" in response.headers  # failed or not, the headers are there
        # What is left counts this request back already (it once showed one less).
        left = dict(part.split(";", 1) for part in response.headers["ratelimit"].split(", "))
        assert left['"quota"'].startswith("r=1000;")
        assert await env.used_requests() == 0
        env.upstream.status = 200
        served = await env.chat()
        assert served.status == 200
        left = dict(part.split(";", 1) for part in served.headers["ratelimit"].split(", "))
        assert left['"quota"'].startswith("r=999;")
        assert await env.used_requests() == 1


async def test_every_response_carries_the_rate_limit_headers() -> None:
    async with provisioned("tiny") as env:
        ok = await env.chat()
        assert ok.headers["ratelimit-policy"] == (
            '"burst";q=3;w=60, "quota";q=5;w=2592000'  # November: 30 days
        )
        remaining = dict(part.split(";", 1) for part in ok.headers["ratelimit"].split(", "))
        assert remaining['"burst"'].startswith("r=2;")
        assert remaining['"quota"'].startswith("r=4;")
        assert ok.headers["x-ratelimit-limit"] == "3"
        assert ok.headers["x-ratelimit-remaining"] == "2"
        assert int(ok.headers["x-ratelimit-reset"]) == 20
        for _ in range(2):
            await env.chat()
        limited = await env.chat()
        assert "ratelimit-policy" in limited.headers
        assert "x-ratelimit-reset" in limited.headers


async def test_overage_plans_serve_past_the_quota_marked() -> None:
    plans = {"flex": {"included_requests": 2, "burst_limit_rpm": 100, "overage": "allow"}}
    async with provisioned("flex", plans=plans, default_plan="flex") as env:
        first, second, third = [await env.chat() for _ in range(3)]
        assert (first.status, second.status, third.status) == (200, 200, 200)
        assert "x-gateway-quota" not in second.headers
        assert third.headers["x-gateway-quota"] == "overage"
        assert await env.used_requests() == 3


async def test_the_period_rolls_over() -> None:
    async with provisioned("tiny") as env:
        for _ in range(5):
            await env.chat()
            env.clock.advance(20)
        assert (await env.chat()).status == 402
        me = (await env.recorder.request("GET", "/v1/me", headers=env.auth())).json()
        assert (me["used_requests"], me["reset_at"]) == (5, "2026-12-01T00:00:00Z")
        env.clock.time = 1_796_083_200.0  # 2026-12-01T00:00:00Z
        me = (await env.recorder.request("GET", "/v1/me", headers=env.auth())).json()
        assert (me["used_requests"], me["reset_at"]) == (0, "2027-01-01T00:00:00Z")
        assert (await env.chat()).status == 200


async def test_monitor_mode_never_blocks_but_says_what_it_would_do() -> None:
    async with provisioned("tiny", limits={"mode": "monitor"}) as env:
        statuses = [(await env.chat()).status for _ in range(4)]
        assert statuses == [200] * 4
        fourth = await env.chat()
        assert fourth.headers["x-gateway-limits"] == "would-block=rate_limit_exceeded"


@pytest.mark.parametrize(("on_error", "status"), [("open", 200), ("closed", 503)])
async def test_a_storage_failure_follows_the_configured_policy(on_error: str, status: int) -> None:
    async with provisioned(
        "tiny", storage_class=BreakableStorage, limits={"on_error": on_error}
    ) as env:
        env.storage.broken = True
        response = await env.chat()
        assert response.status == status
        if status == 503:
            assert error_code(response) == "limits_unavailable"
