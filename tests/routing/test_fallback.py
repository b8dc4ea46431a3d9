"""Fallback through the whole stack: the client sees one clean answer, charged once, priced at
the model that served; a stream that already began is never replayed; an unknown model holds
no quota."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from gateway_kit.cost.usage import Usage
from tests.fakes import DONE, ScriptedStream, chunk, provisioned

pytestmark = pytest.mark.anyio

#: `gpt-fake` on the scripted upstream falls back to the offline mock's small model.
FALLBACK = {
    "providers": [
        {"name": "up", "base_url": "https://upstream.test/v1"},
        {"name": "mock", "type": "mock"},
    ],
    "models": [
        {"name": "gpt-fake", "provider": "up", "price_as": "gpt-5.1", "fallbacks": ["mock-mini"]},
        {"name": "mock-mini", "provider": "mock", "price_as": "gpt-5-mini"},
    ],
    "routing": {"backoff_s": 0.001, "max_backoff_s": 0.001},
}


def events(response: Any) -> list[str]:
    return [
        line.removeprefix("data: ")
        for line in response.body.decode().splitlines()
        if line.startswith("data: ")
    ]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param({"status": 503}, id="503"),
        pytest.param({"status": 429}, id="429"),
        pytest.param({"error": httpx.ConnectError("refused")}, id="connection-refused"),
        pytest.param({"error": httpx.ReadTimeout("slow")}, id="timeout"),
    ],
)
async def test_a_failing_provider_is_retried_then_falls_back_once_charged_at_the_server(
    failure: dict[str, Any],
) -> None:
    async with provisioned("scale", **FALLBACK) as env:
        for name, value in failure.items():
            setattr(env.upstream, name, value)
        response = await env.chat()
        assert response.status == 200, response.text
        assert response.json()["choices"][0]["message"]["content"].startswith("This is a mock")
        assert env.upstream.calls == 2  # the first attempt and one retry
        assert response.headers["x-gateway-model"] == "mock-mini"
        assert response.headers["x-gateway-provider"] == "mock"
        assert response.headers["x-gateway-fallbacks"] == "1"
        # Priced at the model that served, for the usage it reported.
        usage = Usage.from_openai(response.json()["usage"])
        assert usage is not None
        cost = env.gateway.costs.of("mock-mini", usage)
        assert cost.cost_micro_usd is not None
        assert response.headers["x-gateway-cost-usd"] == cost.headers()[0][1].decode()
        # Charged once: one request of quota, the served model's cost as spend.
        assert await env.used_requests() == 1
        spend = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/budget", headers=env.auth()
        )
        assert float(spend.json()["spent_usd"]) == pytest.approx(cost.cost_micro_usd / 1e6)


async def test_a_stream_that_breaks_before_its_first_event_falls_back() -> None:
    async with provisioned("scale", **FALLBACK) as env:
        env.upstream.stream = ScriptedStream([chunk("never")], fail_after=0)
        response = await env.chat(stream=True)
        assert response.status == 200
        data = events(response)
        assert data[-1] == "[DONE]"
        text = "".join(
            json.loads(d)["choices"][0]["delta"].get("content") or ""
            for d in data[:-1]
            if json.loads(d).get("choices")
        )
        assert text.startswith("This is a mock reply")
        assert response.headers["x-gateway-model"] == "mock-mini"
        assert await env.used_requests() == 1


async def test_a_stream_that_breaks_after_it_began_ends_with_an_error_and_is_not_replayed() -> None:
    async with provisioned("scale", **FALLBACK) as env:
        env.upstream.stream = ScriptedStream([chunk("Hel"), chunk("lo"), DONE], fail_after=1)
        response = await env.chat(stream=True)
        assert response.status == 200
        data = events(response)
        assert json.loads(data[0])["choices"][0]["delta"]["content"] == "Hel"
        assert json.loads(data[-1])["error"]["code"] == "upstream_stream_error"
        assert "[DONE]" not in data
        assert env.upstream.calls == 1
        assert response.headers["x-gateway-model"] == "gpt-fake"
        assert b"mock reply" not in response.body


async def test_the_clients_own_error_is_not_retried_nor_sent_elsewhere() -> None:
    async with provisioned("scale", **FALLBACK) as env:
        env.upstream.status = 400
        env.upstream.json_body = {"error": {"message": "bad", "type": "invalid_request_error"}}
        response = await env.chat()
        assert response.status == 400
        assert env.upstream.calls == 1
        assert response.json()["error"]["message"] == "bad"
        assert await env.used_requests() == 0  # a refused request gives its quota back


async def test_when_every_candidate_fails_the_client_gets_502_and_keeps_its_quota() -> None:
    config = {**FALLBACK, "models": [{"name": "gpt-fake", "provider": "up"}]}
    async with provisioned("scale", **config) as env:
        env.upstream.error = httpx.ConnectError("refused")
        response = await env.chat()
        assert response.status == 502
        assert response.json()["error"]["code"] == "upstream_unavailable"
        assert "gpt-fake@up=error" in response.json()["error"]["message"]
        assert await env.used_requests() == 0


async def test_a_deployment_in_cooldown_is_skipped_and_all_cooling_answers_503() -> None:
    config = {
        **FALLBACK,
        "models": [{"name": "gpt-fake", "provider": "up"}],
        "routing": {"retries": 0, "allowed_fails": 2, "cooldown_s": 30},
    }
    async with provisioned("scale", **config) as env:
        env.upstream.status = 503
        for _ in range(2):
            assert (await env.chat()).status == 502
        response = await env.chat()
        assert response.status == 503
        assert response.json()["error"]["code"] == "deployments_cooling_down"
        assert 1 <= int(response.headers["retry-after"]) <= 30
        assert env.upstream.calls == 2  # the cooling deployment was not called
        env.upstream.status = 200
        env.clock.advance(31)
        assert (await env.chat()).status == 200  # the probe succeeds: closed again
        assert (await env.chat()).status == 200
        assert env.upstream.calls == 4


async def test_an_unknown_model_is_refused_before_it_holds_any_quota() -> None:
    plans = {"hundred": {"included_requests": 100, "burst_limit_rpm": 100_000}}
    async with provisioned("hundred", plans=plans, default_plan="hundred") as env:
        statuses: list[int] = []

        async def one(model: str) -> None:
            response = await env.chat(model=model)
            statuses.append(response.status)

        async with anyio.create_task_group() as tasks:
            for index in range(200):
                tasks.start_soon(one, "gpt-fake" if index % 2 else "no-such-model")
        assert statuses.count(200) == 100
        assert statuses.count(404) == 100
        assert await env.used_requests() == 100
        response = await env.chat(model="no-such-model")
        assert response.status == 404
        assert response.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"id": "chatcmpl-x", "choices": [{"message": {"role": "assist', id="cut"),
        pytest.param(b"{}", id="not-a-completion"),
        pytest.param(b'{"error": {"message": "overloaded"}}', id="error-with-200"),
    ],
)
async def test_a_2xx_that_is_not_a_chat_completion_is_retried_then_falls_back(
    body: bytes, stream: bool
) -> None:
    """A 200 whose JSON was cut short (or was `{}`) reached the client as the answer."""
    async with provisioned("scale", **FALLBACK) as env:
        env.upstream.raw_body = body
        response = await env.chat(stream=stream)
        assert response.status == 200
        assert env.upstream.calls == 2  # the first attempt and one retry
        assert response.headers["x-gateway-model"] == "mock-mini"
        assert response.headers["x-gateway-attempts"] == "gpt-fake@up=error, gpt-fake@up=error"
        if stream:
            assert events(response)[-1] == "[DONE]"
        else:
            assert response.json()["choices"][0]["message"]["content"].startswith("This is a mock")


KEEPALIVE = b": keepalive\n\n"


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(lambda: ScriptedStream([KEEPALIVE, chunk("never")], fail_after=1), id="break"),
        pytest.param(
            lambda: ScriptedStream([KEEPALIVE, b'data: {"error": {"message": "overloaded"}}\n\n']),
            id="error-event",
        ),
    ],
)
async def test_a_stream_that_fails_after_keepalive_comments_falls_back(stream: Any) -> None:
    """The comment counted as the first event: the failure after it reached the client."""
    async with provisioned("scale", **FALLBACK) as env:
        env.upstream.stream = stream()
        response = await env.chat(stream=True)
        assert response.status == 200
        assert response.headers["x-gateway-model"] == "mock-mini"
        assert events(response)[-1] == "[DONE]"
        assert b"keepalive" not in response.body
        assert b"overloaded" not in response.body


async def test_keepalive_comments_before_the_first_event_are_not_relayed() -> None:
    async with provisioned("scale", **FALLBACK) as env:
        env.upstream.stream = ScriptedStream([KEEPALIVE, KEEPALIVE, chunk("Hello"), DONE])
        response = await env.chat(stream=True)
        assert response.headers["x-gateway-model"] == "gpt-fake"
        assert response.body.startswith(b"data: ")
        assert json.loads(events(response)[0])["choices"][0]["delta"]["content"] == "Hello"
        assert env.upstream.calls == 1
