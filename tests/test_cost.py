"""Every request's cost: reported usage priced exactly, streamed usage asked for and stripped,
estimates flagged, savings against the flagship summed into ``GET /v1/me``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway_kit.cost import usd_text
from gateway_kit.cost.usage import Usage
from tests.fakes import COMPLETION, DONE, ScriptedStream, chunk, provisioned

pytestmark = pytest.mark.anyio

# $2 / $8 per million tokens, cached input $0.50: 2 / 8 / 0.5 micro-USD per token.
PRICED = {
    "models": [
        {
            "name": "gpt-fake",
            "provider": "up",
            "price": {
                "input_usd_per_mtok": "2",
                "output_usd_per_mtok": "8",
                "cache_read_usd_per_mtok": "0.5",
            },
        },
        {
            "name": "gpt-flagship",
            "provider": "up",
            "price": {"input_usd_per_mtok": "10", "output_usd_per_mtok": "40"},
        },
    ],
    "cost": {"flagship_model": "gpt-flagship"},
}
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 300,
    "total_tokens": 1300,
    "prompt_tokens_details": {"cached_tokens": 400},
    "completion_tokens_details": {"reasoning_tokens": 100},
}
# 600 uncached * 2 + 400 cached * 0.5 + 300 output (reasoning included) * 8 = 3,800 micro-USD
COST = 600 * 2 + 400 // 2 + 300 * 8
FLAGSHIP = 1000 * 10 + 300 * 40


def usage_chunk(usage: dict[str, Any]) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def test_a_response_carries_its_exact_cost_and_savings_add_up_in_me() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = {**COMPLETION, "usage": USAGE}
        for _ in range(3):
            response = await env.chat()
            assert response.status == 200
            assert response.headers.get("x-gateway-cost-usd") == usd_text(COST) == "0.003800"
            assert response.headers.get("x-gateway-savings-usd") == usd_text(FLAGSHIP - COST)
            assert response.headers.get("x-gateway-cost-estimated") is None
            assert response.json()["usage"] == USAGE  # the client's body is untouched
        me = await env.recorder.request("GET", "/v1/me", headers=env.auth())
        expected = round((FLAGSHIP - COST) * 3 / 1_000_000, 2)
        assert me.json()["savings_usd"] == expected


async def test_a_cache_hit_costs_nothing_and_saves_its_whole_flagship_baseline() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = {**COMPLETION, "usage": USAGE}
        miss = await env.chat(temperature=0)
        assert miss.headers["x-gateway-cache"] == "miss"
        hit = await env.chat(temperature=0)
        assert hit.headers["x-gateway-cache"] == "hit"
        assert hit.headers["x-gateway-cost-usd"] == "0.000000"
        assert hit.headers["x-gateway-savings-usd"] == usd_text(FLAGSHIP) == "0.022000"
        me = await env.recorder.request("GET", "/v1/me", headers=env.auth())
        assert me.json()["savings_usd"] == round((FLAGSHIP - COST + FLAGSHIP) / 1_000_000, 2)


async def test_a_stream_asks_upstream_for_usage_and_strips_it_for_the_client() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.stream = ScriptedStream(
            [chunk("Hel"), chunk("lo", finish="stop"), usage_chunk(USAGE), DONE]
        )
        response = await env.chat(stream=True)
        sent = env.upstream.sent_json()
        assert sent["stream_options"] == {"include_usage": True}
        text = response.body.decode()
        assert '"usage"' not in text
        assert text.endswith("data: [DONE]\n\n")
        comment = next(line for line in text.splitlines() if line.startswith(":"))
        assert f"x-gateway-cost-usd={usd_text(COST)}" in comment
        assert "estimated" not in comment


async def test_the_null_usage_openai_adds_to_every_chunk_is_stripped_too() -> None:
    def with_null_usage(event: bytes) -> bytes:
        body = json.loads(event[len(b"data: ") :])
        return b"data: " + json.dumps({**body, "usage": None}).encode() + b"\n\n"

    async with provisioned("scale", **PRICED) as env:
        parts = [with_null_usage(chunk("Hé")), with_null_usage(chunk("llo", finish="stop"))]
        env.upstream.stream = ScriptedStream([*parts, usage_chunk(USAGE), DONE])
        response = await env.chat(stream=True)
        assert '"usage"' not in response.body.decode()
        events = [json.loads(e) for e in response.events()[:-1]]
        assert "".join(e["choices"][0]["delta"]["content"] for e in events) == "Héllo"
        assert f"x-gateway-cost-usd={usd_text(COST)}" in response.body.decode()


async def test_a_client_that_asked_for_streamed_usage_gets_it() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.stream = ScriptedStream([chunk("Hi", finish="stop"), usage_chunk(USAGE), DONE])
        response = await env.chat(stream=True, stream_options={"include_usage": True})
        assert env.upstream.sent_json()["stream_options"] == {"include_usage": True}
        assert '"usage"' in response.body.decode()
        assert f"x-gateway-cost-usd={usd_text(COST)}" in response.body.decode()


async def test_missing_usage_is_estimated_and_flagged() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = {k: v for k, v in COMPLETION.items() if k != "usage"}
        response = await env.chat()
        assert response.headers.get("x-gateway-cost-estimated") == "true"
        assert float(response.headers.get("x-gateway-cost-usd")) > 0

        env.upstream.stream = ScriptedStream([chunk("a"), chunk("b"), chunk("c"), DONE])
        streamed = await env.chat(stream=True)
        assert "x-gateway-cost-estimated=true" in streamed.body.decode()


async def test_an_unpriced_model_says_unknown_never_free() -> None:
    async with provisioned("scale", models=[{"name": "gpt-fake", "provider": "up"}]) as env:
        env.upstream.json_body = {**COMPLETION, "usage": USAGE}
        response = await env.chat()
        assert response.headers.get("x-gateway-cost-usd") == "unknown"


async def test_failed_upstream_calls_cost_nothing() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.status = 400
        env.upstream.json_body = {"error": {"message": "bad", "type": "invalid_request_error"}}
        response = await env.chat()
        assert response.status == 400
        assert response.headers.get("x-gateway-cost-usd") is None
        assert await env.gateway.ledger.savings(env.workspace_id) == 0


def test_usd_text_is_exact() -> None:
    assert usd_text(0) == "0.000000"
    assert usd_text(1) == "0.000001"
    assert usd_text(12_345_678) == "12.345678"
    assert usd_text(-5) == "-0.000005"
    assert Usage.from_openai(USAGE) == Usage(1000, 300, 400, 0, 100)


async def test_a_deployment_is_billed_at_its_own_upstream_models_price() -> None:
    # The standby (weight 0) is first in the list; the weighted deployment, gpt-4o, answers.
    deployments = [
        {"provider": "up", "upstream_model": "gpt-4o-mini", "weight": 0},
        {"provider": "up", "upstream_model": "gpt-4o", "weight": 1},
    ]
    models = [{"name": "chat", "deployments": deployments}]
    async with provisioned("scale", models=models) as env:
        usage = {"prompt_tokens": 100_000, "completion_tokens": 100_000, "total_tokens": 200_000}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        response = await env.chat(model="chat")
        assert response.status == 200
        assert env.upstream.sent_json()["model"] == "gpt-4o"
        cost = env.gateway.costs.prices.cost_micro_usd("gpt-4o", Usage(100_000, 100_000))
        assert cost is not None
        # It was billed as gpt-4o-mini, the first deployment: 16 times less.
        assert response.headers["x-gateway-cost-usd"] == usd_text(cost)
