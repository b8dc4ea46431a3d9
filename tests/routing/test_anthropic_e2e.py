"""The Anthropic provider end to end, as the OpenAI one is tested: the ``openai`` SDK against
the gateway over real sockets, the gateway against a local server speaking the Messages wire
format (``tests.anthropic_server``): answers, streams, streamed usage and cost, tool calls,
errors, and fallback away from an overloaded Anthropic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway_kit import GatewayConfig, create_app
from gateway_kit.cost.costs import Costs
from gateway_kit.cost.usage import Usage
from gateway_kit.testing import run_server
from tests.anthropic_server import AnthropicServer
from tests.fakes import OPEN

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"enum": ["celsius"]}},
            "required": ["location"],
        },
    },
}


def config(anthropic_url: str) -> GatewayConfig:
    claude = {"provider": "claude", "price_as": "claude-sonnet-4-5"}
    return GatewayConfig.model_validate(
        {
            **{k: v.model_dump() for k, v in OPEN.items()},
            "providers": [
                {
                    "name": "claude",
                    "type": "anthropic",
                    "base_url": anthropic_url,
                    "api_key": "sk-ant-test",
                },
                {"name": "mock", "type": "mock"},
            ],
            "models": [
                {"name": "sonnet", "upstream_model": "claude-text", **claude},
                {"name": "sonnet-tools", "upstream_model": "claude-tool", **claude},
                {"name": "sonnet-cached", "upstream_model": "claude-cached", **claude},
                {"name": "sonnet-bad", "upstream_model": "claude-400", **claude},
                {"name": "sonnet-cut", "upstream_model": "claude-stream-cut", **claude},
                {"name": "sonnet-cached-cut", "upstream_model": "claude-cached-cut", **claude},
                {
                    "name": "sonnet-overloaded",
                    "upstream_model": "claude-529",
                    "fallbacks": ["mock-mini"],
                    **claude,
                },
                {"name": "mock-mini", "provider": "mock", "price_as": "gpt-5-mini"},
            ],
            "routing": {"backoff_s": 0.001, "max_backoff_s": 0.001, "max_retry_after_s": 0},
            "metrics": {"enabled": True, "access": "public"},
        }
    )


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[AnthropicServer, str]]:
    upstream = AnthropicServer()
    with (
        run_server(upstream.app()) as anthropic_url,
        run_server(create_app(config(anthropic_url))) as gateway_url,
    ):
        yield upstream, gateway_url


@pytest.fixture
def client(served: tuple[AnthropicServer, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served[1]}/v1", api_key="unused", max_retries=0)


HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def test_an_answer_comes_back_in_openai_format_priced_as_claude(
    client: openai.OpenAI, served: tuple[AnthropicServer, str]
) -> None:
    raw = client.chat.completions.with_raw_response.create(model="sonnet", messages=HI)
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hi! My name is Claude."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2095, 503)
    assert raw.headers["x-gateway-provider"] == "claude"
    sent = served[0].requests[-1].body
    assert sent["model"] == "claude-text"
    assert sent["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])
    costs = Costs(config("http://unused"))
    expected = costs.of("sonnet", Usage(2095, 503)).headers()[0][1].decode()
    assert raw.headers["x-gateway-cost-usd"] == expected


def test_a_stream_is_translated_chunk_by_chunk_with_usage_and_cache_tokens(
    client: openai.OpenAI,
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="sonnet-cached",
        messages=HI,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hi! My name is Claude."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens == 21 + 188086 + 1500
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 1500


def test_cache_reads_and_writes_are_priced_at_their_own_rates(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="sonnet-cached", messages=HI)
    costs = Costs(config("http://unused"))
    usage = Usage(21 + 188086 + 1500, 393, cache_read_tokens=1500, cache_write_tokens=188086)
    assert raw.headers["x-gateway-cost-usd"] == costs.of("sonnet", usage).headers()[0][1].decode()
    plain = costs.of("sonnet", Usage(21 + 188086 + 1500, 393))
    assert costs.of("sonnet", usage).cost_micro_usd != plain.cost_micro_usd


def test_tool_calls_come_back_as_openai_tool_calls_json_and_streamed(
    client: openai.OpenAI, served: tuple[AnthropicServer, str]
) -> None:
    ask: Any = [{"role": "user", "content": "Weather in San Francisco?"}]
    completion = client.chat.completions.create(
        model="sonnet-tools",
        messages=ask,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert arguments == {"location": "San Francisco, CA", "unit": "celsius"}
    assert served[0].requests[-1].body["tools"][0]["name"] == "get_weather"

    stream = client.chat.completions.create(
        model="sonnet-tools",
        messages=ask,
        tools=[WEATHER],
        stream=True,  # type: ignore[list-item]
    )
    pieces = [
        call.function.arguments or ""
        for chunk in stream
        if chunk.choices and chunk.choices[0].delta.tool_calls
        for call in chunk.choices[0].delta.tool_calls
        if call.function is not None
    ]
    assert json.loads("".join(pieces)) == arguments

    answered = client.chat.completions.create(
        model="sonnet",
        messages=[
            *ask,
            completion.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "15 C"},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert answered.choices[0].message.content
    sent = served[0].requests[-1].body["messages"]
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"][0]["type"] == "tool_result"
    assert sent[-1]["content"][0]["tool_use_id"] == call.id


def test_anthropics_own_errors_reach_the_client_in_openai_shape(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="sonnet-bad", messages=HI)
    assert "text content blocks must be non-empty" in bad.value.message


def test_an_overloaded_anthropic_falls_back(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="sonnet-overloaded", messages=HI)
    assert raw.parse().choices[0].message.content == (
        "This is a mock reply from gateway-kit to: Hello"
    )
    assert raw.headers["x-gateway-model"] == "mock-mini"
    assert "sonnet-overloaded@claude=529" in raw.headers["x-gateway-attempts"]


def test_a_stream_cut_after_it_began_ends_with_an_error_event(
    served: tuple[AnthropicServer, str],
) -> None:
    status, lines = _streamed(served[1], "sonnet-cut")
    assert status == 200
    assert json.loads(lines[-1][6:])["error"]["code"] == "upstream_stream_error"
    assert "data: [DONE]" not in lines


def _streamed(url: str, model: str) -> tuple[int, list[str]]:
    """A streamed chat with ``model``: the status and the stream's data lines."""
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": HI, "stream": True},
        timeout=10,
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    return response.status_code, lines


def _metrics(url: str, model: str) -> dict[str, float]:
    """The model's token counts by kind, and its cost in USD, off ``GET /metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {"cost": 0.0}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "gateway_tokens_total":
                found[sample.labels["kind"]] = sample.value
            elif sample.name == "gateway_cost_usd_total":
                found["cost"] = sample.value
    return found


def test_a_cut_stream_is_billed_on_the_prompt_count_anthropic_reported_at_its_start(
    served: tuple[AnthropicServer, str],
) -> None:
    # message_start told the prompt: 21 tokens, 188,086 written to the prompt cache and 1,500
    # read from it. The answer never reported its usage; its output is estimated, its prompt
    # is not (the gateway's own estimate of these two short messages is a dozen tokens).
    before = _metrics(served[1], "sonnet-cached-cut")
    _, lines = _streamed(served[1], "sonnet-cached-cut")
    assert json.loads(lines[-1][6:])["error"]["code"] == "upstream_stream_error"
    after = _metrics(served[1], "sonnet-cached-cut")
    added = {kind: after.get(kind, 0) - before.get(kind, 0) for kind in after}
    assert added["input"] == 21 + 188086 + 1500
    assert added["cached"] == 1500
    assert 1 <= added["output"] <= 10  # the chunks that came: a token or so each
    costs = Costs(config("http://unused"))
    prompt = Usage(21 + 188086 + 1500, 0, cache_read_tokens=1500, cache_write_tokens=188086)
    floor = costs.of("sonnet-cached-cut", prompt).cost_micro_usd / 1e6
    with_output = Usage(189607, 10, cache_read_tokens=1500, cache_write_tokens=188086)
    most = costs.of("sonnet-cached-cut", with_output).cost_micro_usd / 1e6
    assert floor < added["cost"] <= most
