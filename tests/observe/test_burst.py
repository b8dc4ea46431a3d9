"""The request log holds up under a burst: 1,000 mixed requests at once (answered, refused by
the budget with 402 and by the burst limit with 429, failed upstream with 502, streams the
client cuts off) leave exactly 1,000 records, whose costs add up to what the budget settled
and whose statuses are what the clients saw; the metrics say the same."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway_kit import Gateway, GatewayConfig, MemoryStorage, create_app
from gateway_kit.accounts.periods import period_at
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.testing import ASGIRecorder, FakeClock
from tests.fakes import COMPLETION, DONE, ScriptedStream, chunk

pytestmark = pytest.mark.anyio

REQUESTS = 1000
USAGE = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
SSE = {"content-type": "text/event-stream"}


async def upstream(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    text = body["messages"][-1]["content"]
    await anyio.sleep(0.001)
    if text.startswith("fail"):
        return httpx.Response(500, json={"error": {"message": "down", "type": "server_error"}})
    if body.get("stream"):
        usage_event = b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\n"
        parts = [chunk(role="assistant"), chunk("a"), chunk("b"), chunk(finish="stop")]
        # The streams clients leave last well past the 0.1 s after which the gateway watches
        # for a client gone (``CancelOnDisconnect``): each is seen cut, whatever the timing.
        pause = 0.06 if text.startswith("leave") else 0.01
        stream = ScriptedStream(
            [*parts, usage_event, DONE], before_each=lambda _: anyio.sleep(pause)
        )
        return httpx.Response(200, headers=SSE, stream=stream)
    return httpx.Response(200, json={**COMPLETION, "usage": USAGE})


def config() -> GatewayConfig:
    price = {"input_usd_per_mtok": "1", "output_usd_per_mtok": "1"}
    return GatewayConfig.model_validate(
        {
            "providers": [{"name": "up", "base_url": "https://upstream.test/v1"}],
            "models": [{"name": "gpt-fake", "provider": "up", "price": price}],
            "plans": {
                # About 150 requests' worth of budget, then 402.
                "capped": {
                    "included_requests": 100_000,
                    "burst_limit_rpm": 100_000,
                    "budget_usd": "0.0045",
                },
                # 150 requests at once, then 429 (the clock does not move).
                "bursty": {"included_requests": 100_000, "burst_limit_rpm": 150},
            },
            "default_plan": "capped",
            # Failures answer 502 every time: the deployment never cools down (503).
            "routing": {"retries": 0, "allowed_fails": 1_000_000},
            "guardian": {"mode": "off"},
            "metrics": {"enabled": True, "access": "public"},
        }
    )


async def test_a_burst_of_mixed_requests_leaves_exactly_its_records() -> None:
    clock = FakeClock(1_795_000_000.0)
    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    seen: Counter[tuple[str, int]] = Counter()
    left = 0  # streams answered 200 that their client left
    async with (
        MemoryStorage(clock=clock, max_keys=1_000_000) as storage,
        Gateway(config(), storage=storage, http_client=client, clock=clock) as gateway,
    ):
        recorder = ASGIRecorder(create_app(gateway=gateway))
        workspaces = {}
        for plan in ("capped", "bursty"):
            workspace = await gateway.workspaces.create(f"{plan}@example.com", plan=plan)
            key = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
            workspaces[plan] = (workspace.id, key.secret)
        limit = anyio.Semaphore(32)

        async def one(index: int) -> None:
            plan = "capped" if index % 2 else "bursty"
            workspace_id, key = workspaces[plan]
            kind = index % 5
            text = {0: "fail", 1: f"leave {index}"}.get(kind, f"question {index}")
            payload: dict[str, Any] = {
                "model": "gpt-fake",
                "messages": [{"role": "user", "content": text}],
            }
            if kind in (1, 2):
                payload["stream"] = True
            async with limit:
                response = await recorder.request(
                    "POST",
                    "/v1/chat/completions",
                    json=payload,
                    headers={"authorization": f"Bearer {key}"},
                    disconnect_after=1 if kind == 1 else None,  # the client leaves
                )
            seen[(workspace_id, response.start["status"])] += 1
            if kind == 1 and response.start["status"] == 200:
                nonlocal left
                left += 1

        async with anyio.create_task_group() as tasks:
            for index in range(REQUESTS):
                tasks.start_soon(one, index)
        await gateway.requests.flush()

        statuses = Counter(status for (_, status) in seen.elements())
        assert set(statuses) == {200, 402, 429, 502}, statuses
        period = period_at(clock(), "month")
        logged: Counter[tuple[str, int]] = Counter()
        every: list[dict[str, Any]] = []
        for workspace_id, _ in workspaces.values():
            page = await gateway.requests.page(workspace_id, limit=1000)
            assert page.next_cursor is None
            records = page.records
            every += records
            assert len({r["id"] for r in records}) == len(records)
            logged.update((workspace_id, r["status"]) for r in records)
            spent = await gateway.ledger.totals(workspace_id, period)
            assert spent.reserved == 0
            assert sum(r["cost_micro_usd"] or 0 for r in records) == spent.settled
        assert sum(logged.values()) == REQUESTS
        assert logged == seen
        cut = [r for r in every if r["stream"] and r["status"] == 200 and not r["completed"]]
        assert cut  # the streams the clients left, each seen cut
        assert len(cut) == left
        assert all(r["cost_micro_usd"] for r in cut)  # each still has a cost (estimated)

        metrics = (await recorder.request("GET", "/metrics")).body.decode()
        by_status: Counter[int] = Counter()
        for family in text_string_to_metric_families(metrics):
            for sample in family.samples:
                if sample.name == "gateway_requests_total":
                    by_status[int(sample.labels["status"])] += int(sample.value)
        assert by_status == statuses
