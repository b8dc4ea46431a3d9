"""AnthropicProvider against a local Messages API (tests/anthropic_server.py, real uvicorn).

The server holds every request to the official ``anthropic`` SDK's request types and answers
with shapes from Anthropic's documentation (checked here against the SDK's response types);
what the provider hands back is checked against the ``openai`` SDK's types.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic.types
import httpx
import openai.types.chat
import pytest

from gateway_kit import ChatCall, Provider, UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.cost.usage import Usage
from gateway_kit.providers.anthropic import AnthropicProvider
from gateway_kit.providers.base import ChatResponse
from gateway_kit.sse import SSEEvent
from gateway_kit.testing import run_server
from tests import anthropic_server as recorded
from tests.anthropic_server import AnthropicServer, no_extras
from tests.servers import free_port

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0
HI = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"enum": ["celsius"]}},
            "required": ["location"],
        },
    },
}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[AnthropicServer, str]]:
    server = AnthropicServer()
    with run_server(server.app()) as base_url:
        yield server, base_url


@pytest.fixture
def upstream(served: tuple[AnthropicServer, str]) -> AnthropicServer:
    server, _ = served
    server.requests.clear()
    return server


@pytest.fixture
async def provider(served: tuple[AnthropicServer, str]) -> AsyncIterator[AnthropicProvider]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield AnthropicProvider(
            client=client, base_url=served[1] + "/", api_key="sk-ant-test", clock=lambda: NOW
        )


async def chat(provider: AnthropicProvider, stream: bool = False, **payload: Any) -> ChatResponse:
    payload = {"model": "claude-text", "messages": HI, **payload}
    if stream:
        payload["stream"] = True
    return await provider.chat(ChatCall(payload, None, stream=stream))


def completion(response: ChatResponse) -> dict[str, Any]:
    """The JSON answer, checked against the openai SDK's ChatCompletion."""
    assert response.status == 200
    assert not response.streaming
    body: dict[str, Any] = json.loads(response.body)
    no_extras(
        openai.types.chat.ChatCompletion.model_validate(body),
        allowed=frozenset({"cache_creation_tokens"}),
    )
    return body


async def chunks(response: ChatResponse) -> list[dict[str, Any]]:
    """The streamed chunks (checked against ChatCompletionChunk), after a final [DONE]."""
    assert response.status == 200
    assert response.events is not None
    assert response.close is not None
    try:
        events = [event async for event in response.events]
    finally:
        await response.close()
    assert events[-1] == SSEEvent("[DONE]")
    parsed = [event.json() for event in events[:-1]]
    for chunk in parsed:
        no_extras(
            openai.types.chat.ChatCompletionChunk.model_validate(chunk),
            allowed=frozenset({"cache_creation_tokens"}),
        )
    return parsed


async def rest(events: AsyncIterator[SSEEvent]) -> list[SSEEvent]:
    return [event async for event in events]


def assemble(parsed: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed answer put together the way OpenAI clients do it."""
    text = ""
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in parsed:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for call in delta.get("tool_calls", []):
                into = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                into["id"] += call.get("id") or ""
                into["name"] += call.get("function", {}).get("name") or ""
                into["arguments"] += call.get("function", {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {"text": text, "tool_calls": [calls[i] for i in sorted(calls)], "finish": finish}


# -- the recorded shapes are Anthropic's ---------------------------------------------------------


@pytest.mark.parametrize(
    "message", [recorded.TEXT_MESSAGE, recorded.TOOL_MESSAGE, recorded.CACHED_MESSAGE]
)
def test_recorded_answers_are_sdk_messages(message: dict[str, Any]) -> None:
    assert recorded.sdk_message(message).id == message["id"]


@pytest.mark.parametrize(
    "stream",
    [recorded.TEXT_STREAM, recorded.TOOL_STREAM, recorded.CACHED_STREAM],
    ids=["text", "tool", "cached"],
)
def test_recorded_streams_are_sdk_stream_events(stream: list[tuple[str, Any]]) -> None:
    for name, data in stream:
        assert name == data["type"]
        recorded.sdk_stream_event(data)
    types = [name for name, _ in stream]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]


def test_recorded_errors_are_sdk_error_responses() -> None:
    for _, body, _ in recorded.ERRORS.values():
        no_extras(
            anthropic.types.ErrorResponse.model_validate(body), allowed=frozenset({"request_id"})
        )
    recorded.sdk_stream_event(recorded.OVERLOADED)


def test_the_request_checker_refuses_what_the_sdk_types_do_not_allow() -> None:
    good = {"model": "m", "max_tokens": 1, "messages": HI}
    recorded.check_request(good)
    with pytest.raises(ValueError, match="no \\['n'\\]"):
        recorded.check_request({**good, "n": 2})
    with pytest.raises(ValueError, match="needs \\['name'\\]"):
        recorded.check_request({**good, "tool_choice": {"type": "tool"}})
    block = {"type": "tool_result", "tool_use_id": "t", "content": "x", "name": "f"}
    with pytest.raises(ValueError, match="no \\['name'\\]"):
        recorded.check_request({**good, "messages": [{"role": "user", "content": [block]}]})


# -- request translation ------------------------------------------------------------------------


async def test_posts_a_messages_request_with_anthropic_headers(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    call = ChatCall({"model": "claude-text", "messages": HI}, b'{"ignored": true}', stream=False)
    response = await provider.chat(call)
    assert response.status == 200
    received = upstream.last
    assert received.body == {"model": "claude-text", "max_tokens": 4096, "messages": HI}
    assert received.headers["x-api-key"] == "sk-ant-test"
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert "authorization" not in received.headers
    assert isinstance(provider, Provider)


async def test_extra_headers_are_sent_and_the_default_max_tokens_applies(
    served: tuple[AnthropicServer, str], upstream: AnthropicServer
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        p = AnthropicProvider(
            client=client,
            base_url=served[1],
            api_key="k",
            headers={"anthropic-beta": "context-1m-2025-08-07"},
            default_max_tokens=512,
        )
        assert (await chat(p)).status == 200
    assert upstream.last.headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert upstream.last.body["max_tokens"] == 512


async def test_system_and_developer_messages_become_the_system_prompt(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    await chat(provider, messages=[{"role": "system", "content": "Be brief."}, *HI])
    assert upstream.last.body["system"] == "Be brief."
    assert upstream.last.body["messages"] == HI

    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        *HI,
    ]
    await chat(provider, messages=messages)
    assert upstream.last.body["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "Answer in French."},
    ]


async def test_tool_calls_and_results_become_alternating_turns(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "user", "content": [{"type": "text", "text": "In celsius."}]},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "24 C"}]},
        {"role": "user", "content": "Which is warmer?"},
    ]
    response = await chat(provider, messages=messages, tools=[WEATHER_TOOL])
    assert response.status == 200
    assert upstream.last.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Paris and Rome?"},
                {"type": "text", "text": "In celsius."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_weather",
                    "input": {"location": "Rome"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "24 C"}],
                },
                {"type": "text", "text": "Which is warmer?"},
            ],
        },
    ]


async def test_images_become_base64_and_url_sources(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    content = [
        {"type": "text", "text": "Compare these."},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
    ]
    await chat(provider, messages=[{"role": "user", "content": content}])
    assert upstream.last.body["messages"][0]["content"] == [
        {"type": "text", "text": "Compare these."},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


async def test_cache_control_on_a_part_is_passed_on(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    part = {"type": "text", "text": "A long document.", "cache_control": {"type": "ephemeral"}}
    await chat(provider, messages=[{"role": "user", "content": [part]}])
    assert upstream.last.body["messages"][0]["content"] == [part]


async def test_tools_are_translated_with_a_default_schema(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    bare = {"type": "function", "function": {"name": "now"}}
    await chat(provider, tools=[WEATHER_TOOL, bare])
    assert upstream.last.body["tools"] == [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": WEATHER_TOOL["function"]["parameters"],  # type: ignore[index]
        },
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert "tool_choice" not in upstream.last.body


@pytest.mark.parametrize(
    ("tool_choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("none", False, {"type": "none"}),
        ("auto", True, {"type": "auto"}),
    ],
)
async def test_tool_choice_and_parallel_tool_calls_are_mapped(
    provider: AnthropicProvider,
    upstream: AnthropicServer,
    tool_choice: Any,
    parallel: bool | None,
    expected: dict[str, Any],
) -> None:
    options: dict[str, Any] = {"tools": [WEATHER_TOOL]}
    if tool_choice is not None:
        options["tool_choice"] = tool_choice
    if parallel is not None:
        options["parallel_tool_calls"] = parallel
    assert (await chat(provider, **options)).status == 200
    assert upstream.last.body["tool_choice"] == expected


@pytest.mark.parametrize(("temperature", "sent"), [(0.0, 0.0), (0.7, 0.7), (1.0, 1.0), (1.8, 1)])
async def test_temperature_is_clamped_to_anthropics_range(
    provider: AnthropicProvider, upstream: AnthropicServer, temperature: float, sent: float
) -> None:
    await chat(provider, temperature=temperature)
    assert upstream.last.body["temperature"] == sent


async def test_sampling_limits_and_user_are_translated_and_openai_only_fields_dropped(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    await chat(
        provider,
        max_tokens=100,
        max_completion_tokens=200,
        top_p=0.9,
        stop="END",
        user="user-42",
        seed=7,
        logprobs=True,
        top_logprobs=2,
        frequency_penalty=0.5,
        presence_penalty=0.5,
        logit_bias={"50256": -100},
        stream_options={"include_usage": True},
        n=1,
    )
    assert upstream.last.body == {
        "model": "claude-text",
        "max_tokens": 200,
        "messages": HI,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "user-42"},
    }
    await chat(provider, max_tokens=100, stop=["a", "b"])
    assert upstream.last.body["max_tokens"] == 100
    assert upstream.last.body["stop_sequences"] == ["a", "b"]


async def test_json_response_formats_become_a_system_instruction(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    await chat(
        provider,
        messages=[{"role": "system", "content": "Be brief."}, *HI],
        response_format=response_format,
    )
    system = upstream.last.body["system"]
    assert system[0] == {"type": "text", "text": "Be brief."}
    assert "JSON" in system[1]["text"]
    assert json.dumps(schema) in system[1]["text"]

    await chat(provider, response_format={"type": "json_object"})
    assert "JSON object" in upstream.last.body["system"]
    await chat(provider, response_format={"type": "text"})
    assert "system" not in upstream.last.body


# -- requests that have no Messages equivalent --------------------------------------------------


async def test_n_above_one_is_refused_without_calling_anthropic(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    response = await chat(provider, n=3)
    assert response.status == 400
    assert (b"content-type", b"application/json") in response.headers
    error = json.loads(response.body)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "unsupported_parameter"
    assert error["param"] == "n"
    assert error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize("arguments", ['{"location": "Par', "[1, 2]", "null"])
async def test_tool_call_arguments_that_are_not_a_json_object_are_refused(
    provider: AnthropicProvider, upstream: AnthropicServer, arguments: str
) -> None:
    call = {"id": "toolu_9", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [*HI, {"role": "assistant", "content": None, "tool_calls": [call]}]
    response = await chat(provider, messages=messages)
    assert response.status == 400
    error = json.loads(response.body)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[1].tool_calls[0].function.arguments"
    assert "messages[1]" in error["message"]
    assert "toolu_9" in error["message"]
    assert upstream.requests == []


async def test_empty_tool_call_arguments_are_an_empty_input(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    call = {"id": "toolu_9", "type": "function", "function": {"name": "now", "arguments": ""}}
    messages = [
        *HI,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_9", "content": "noon"},
    ]
    assert (await chat(provider, messages=messages)).status == 200
    assert upstream.last.body["messages"][1]["content"][0]["input"] == {}


@pytest.mark.parametrize(
    ("options", "param"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
                        ],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
        ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice"),
    ],
    ids=["audio", "ftp-image", "function-role", "custom-tool", "allowed-tools"],
)
async def test_what_cannot_be_translated_is_a_400(
    provider: AnthropicProvider, upstream: AnthropicServer, options: dict[str, Any], param: str
) -> None:
    response = await chat(provider, **options)
    assert response.status == 400
    assert json.loads(response.body)["error"]["param"] == param
    assert upstream.requests == []


# -- answers ------------------------------------------------------------------------------------


async def test_a_text_answer_becomes_a_chat_completion(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    response = await chat(provider)
    assert completion(response) == {
        "id": "chatcmpl-msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "object": "chat.completion",
        "created": int(NOW),
        "model": "claude-sonnet-4-5-20250929",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hi! My name is Claude.",
                    "refusal": None,
                },
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 2095,
            "completion_tokens": 503,
            "total_tokens": 2598,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_tokens": 0},
        },
    }
    assert response.headers == [
        (b"content-type", b"application/json"),
        (b"x-upstream-request-id", b"req_0001"),
    ]
    assert response.close is None


async def test_a_tool_use_answer_becomes_tool_calls(provider: AnthropicProvider) -> None:
    body = completion(await chat(provider, model="claude-tool", tools=[WEATHER_TOOL]))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    # The thinking block is dropped; the text stays next to the call.
    assert choice["message"]["content"] == (
        "I'll check the current weather in San Francisco for you."
    )
    [call] = choice["message"]["tool_calls"]
    assert call["id"] == "toolu_01A09q90qw90lq917835lq9"
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {
        "location": "San Francisco, CA",
        "unit": "celsius",
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_stop_reasons_become_finish_reasons(
    provider: AnthropicProvider, stop_reason: str, finish_reason: str, stream: bool
) -> None:
    response = await chat(provider, stream, model=recorded.STOP_REASON_PREFIX + stop_reason)
    if stream:
        assert assemble(await chunks(response))["finish"] == finish_reason
    else:
        assert completion(response)["choices"][0]["finish_reason"] == finish_reason


async def test_usage_counts_cache_reads_and_writes_in_the_prompt(
    provider: AnthropicProvider,
) -> None:
    expected = {
        "prompt_tokens": 21 + 188086 + 1500,
        "completion_tokens": 393,
        "total_tokens": 21 + 188086 + 1500 + 393,
        "prompt_tokens_details": {"cached_tokens": 1500, "cache_creation_tokens": 188086},
    }
    body = completion(await chat(provider, model="claude-cached"))
    assert body["usage"] == expected
    streamed = await chunks(
        await chat(provider, True, model="claude-cached", stream_options={"include_usage": True})
    )
    assert streamed[-1]["usage"] == expected
    # What cost accounting reads from OpenAI-shaped usage.
    usage = Usage.from_openai(body["usage"])
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (21 + 188086 + 1500, 393)
    assert usage.cache_read_tokens == 1500


# -- streams ------------------------------------------------------------------------------------


async def test_a_text_stream_becomes_chunks_equal_to_the_json_answer(
    provider: AnthropicProvider, upstream: AnthropicServer
) -> None:
    whole = completion(await chat(provider))
    response = await chat(provider, stream=True)
    assert upstream.last.body["stream"] is True
    assert response.headers == [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"x-upstream-request-id", b"req_0002"),
    ]
    parsed = await chunks(response)
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert {(c["id"], c["created"], c["model"], c["object"]) for c in parsed} == {
        (
            "chatcmpl-msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
            int(NOW),
            "claude-sonnet-4-5-20250929",
            "chat.completion.chunk",
        )
    }
    assert [c["choices"][0]["delta"] for c in parsed[1:-1]] == [
        {"content": "Hi! My"},
        {"content": " name is"},
        {"content": " Claude."},
    ]
    assert parsed[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assembled = assemble(parsed)
    assert assembled["text"] == whole["choices"][0]["message"]["content"]
    assert assembled["tool_calls"] == []


async def test_a_tool_stream_becomes_tool_call_chunks_equal_to_the_json_answer(
    provider: AnthropicProvider,
) -> None:
    whole = completion(await chat(provider, model="claude-tool", tools=[WEATHER_TOOL]))
    parsed = await chunks(await chat(provider, True, model="claude-tool", tools=[WEATHER_TOOL]))
    # The thinking block (index 0) is dropped; the tool_use block (index 2) is tool call 0.
    start = next(c for c in parsed if "tool_calls" in c["choices"][0]["delta"])
    assert start["choices"][0]["delta"]["tool_calls"] == [
        {
            "index": 0,
            "id": "toolu_01A09q90qw90lq917835lq9",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
    ]
    assembled = assemble(parsed)
    message = whole["choices"][0]["message"]
    assert assembled["text"] == message["content"]
    assert assembled["finish"] == "tool_calls"
    [call] = assembled["tool_calls"]
    [expected] = message["tool_calls"]
    assert (call["id"], call["name"]) == (expected["id"], expected["function"]["name"])
    assert json.loads(call["arguments"]) == json.loads(expected["function"]["arguments"])


@pytest.mark.parametrize("include_usage", [True, False])
async def test_a_usage_chunk_is_sent_only_when_the_client_asked(
    provider: AnthropicProvider, include_usage: bool
) -> None:
    options = {"stream_options": {"include_usage": include_usage}}
    parsed = await chunks(await chat(provider, True, **options))
    usage_chunks = [c for c in parsed if "usage" in c]
    if not include_usage:
        assert usage_chunks == []
        return
    assert usage_chunks == [parsed[-1]]
    assert parsed[-1]["choices"] == []
    # Input from message_start, output from message_delta.
    assert parsed[-1]["usage"]["prompt_tokens"] == 2095
    assert parsed[-1]["usage"]["completion_tokens"] == 503


@pytest.mark.parametrize(
    ("model", "match"),
    [
        ("claude-stream-error", "overloaded_error: Overloaded"),
        ("claude-stream-cut", "broke off"),
        ("claude-stream-truncated", "before message_stop"),
    ],
)
async def test_a_failed_stream_raises_stream_error_after_its_first_chunks(
    provider: AnthropicProvider, model: str, match: str
) -> None:
    response = await chat(provider, True, model=model)
    assert response.events is not None
    assert response.close is not None
    first = [(await anext(response.events)).json() for _ in range(2)]
    assert first[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first[1]["choices"][0]["delta"] == {"content": "Hi! My"}
    with pytest.raises(UpstreamStreamError, match=match) as info:
        await rest(response.events)
    await response.close()
    assert info.value.provider == "anthropic"
    assert info.value.status == 200


async def test_a_stream_tells_the_usage_reported_so_far_for_metering_a_cut(
    provider: AnthropicProvider,
) -> None:
    response = await chat(provider, True, model="claude-cached-cut")
    assert response.events is not None
    assert response.close is not None
    assert response.usage_so_far is not None
    first = await anext(response.events)  # message_start, translated
    assert first.json()["choices"][0]["delta"]["role"] == "assistant"
    reported = Usage(189607, 1, cache_read_tokens=1500, cache_write_tokens=188086)
    assert response.usage_so_far() == reported
    with pytest.raises(UpstreamStreamError, match="broke off"):
        await rest(response.events)
    await response.close()
    assert response.usage_so_far() == reported  # still there for metering after the break


async def test_a_json_answer_has_no_usage_so_far(provider: AnthropicProvider) -> None:
    assert (await chat(provider)).usage_so_far is None


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("model", "status", "kind", "message"),
    [
        (
            "claude-400",
            400,
            "invalid_request_error",
            "messages: text content blocks must be non-empty",
        ),
        ("claude-404", 404, "not_found_error", "model: claude-404"),
    ],
)
async def test_4xx_errors_keep_their_status_in_openais_error_shape(
    provider: AnthropicProvider,
    upstream: AnthropicServer,
    model: str,
    status: int,
    kind: str,
    message: str,
    stream: bool,
) -> None:
    response = await chat(provider, stream, model=model)
    assert response.status == status
    assert not response.streaming
    assert response.retry_after is None
    assert json.loads(response.body) == {
        "error": {"message": message, "type": kind, "param": None, "code": kind}
    }
    assert (b"x-upstream-request-id", b"req_0001") in response.headers


async def test_a_missing_api_key_is_an_authentication_error(
    served: tuple[AnthropicServer, str], upstream: AnthropicServer
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await chat(AnthropicProvider(client=client, base_url=served[1]))
    assert response.status == 401
    assert json.loads(response.body)["error"]["type"] == "authentication_error"
    assert "x-api-key" not in upstream.last.headers


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_429_carries_retry_after(provider: AnthropicProvider, stream: bool) -> None:
    response = await chat(provider, stream, model="claude-429")
    assert response.status == 429
    assert response.retry_after == 7.0
    assert json.loads(response.body)["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("model", "status", "retry_after"), [("claude-529", 529, 3.0), ("claude-500", 500, None)]
)
async def test_5xx_and_overloaded_raise_unavailable(
    provider: AnthropicProvider, model: str, status: int, retry_after: float | None, stream: bool
) -> None:
    with pytest.raises(UpstreamUnavailableError) as info:
        await chat(provider, stream, model=model)
    assert info.value.status == status
    assert info.value.retry_after == retry_after
    assert info.value.provider == "anthropic"


async def test_a_closed_port_raises_unavailable_with_status_0() -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        p = AnthropicProvider(client=client, base_url=f"http://127.0.0.1:{free_port()}")
        with pytest.raises(UpstreamUnavailableError) as info:
            await chat(p)
    assert info.value.status == 0


async def test_a_timeout_raises_unavailable() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(hang)) as client:
        with pytest.raises(UpstreamUnavailableError, match="timed out"):
            await chat(AnthropicProvider(client=client))


async def test_retry_after_may_be_an_http_date() -> None:
    def limited(request: httpx.Request) -> httpx.Response:
        # NOW is 2023-11-14 22:13:20 GMT: 40 seconds later.
        headers = {"retry-after": "Tue, 14 Nov 2023 22:14:00 GMT"}
        return httpx.Response(429, json=recorded.ERRORS["claude-429"][1], headers=headers)

    async with httpx.AsyncClient(transport=httpx.MockTransport(limited)) as client:
        response = await chat(AnthropicProvider(client=client, clock=lambda: NOW))
    assert response.retry_after == 40.0


async def test_a_200_that_is_not_a_messages_body_raises_unavailable() -> None:
    def garbled(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>gateway</html>")

    async with httpx.AsyncClient(transport=httpx.MockTransport(garbled)) as client:
        with pytest.raises(UpstreamUnavailableError) as info:
            await chat(AnthropicProvider(client=client))
    assert info.value.status == 200


async def test_a_non_anthropic_4xx_body_still_gets_openais_error_shape() -> None:
    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text="Forbidden")

    async with httpx.AsyncClient(transport=httpx.MockTransport(proxy)) as client:
        response = await chat(AnthropicProvider(client=client))
    assert response.status == 403
    error = json.loads(response.body)["error"]
    assert error["type"] == "permission_error"
    assert "403" in error["message"]


def test_a_tool_called_without_input_streams_empty_json_arguments() -> None:
    """Anthropic streams a tool without input as one empty ``partial_json``: the arguments
    were then ``""`` (no JSON; the JSON answer and a cache hit have ``{}``)."""
    from gateway_kit.providers.anthropic import _StreamTranslator

    translator = _StreamTranslator(created=1, include_usage=False)
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    ]
    chunks = [
        e.json() for event in events for e in translator.feed(SSEEvent.of_json(event)) if not e.done
    ]
    arguments = "".join(
        call["function"].get("arguments", "")
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", ())
    )
    assert arguments == "{}"
