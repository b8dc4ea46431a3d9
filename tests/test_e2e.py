"""End to end over real sockets: uvicorn serving the gateway, the openai SDK as the client."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from gateway_kit import GatewayConfig, ModelConfig, ProviderConfig, create_app
from gateway_kit._asgi import Message, Receive, Scope, Send
from gateway_kit.testing import run_server
from tests.fakes import COMPLETION, DONE, OPEN, chunk, offline_config

pytestmark = pytest.mark.slow

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    },
}


@pytest.fixture(scope="module")
def offline_gateway() -> Iterator[str]:
    with run_server(create_app(offline_config())) as base_url:
        yield base_url


@pytest.fixture
def client(offline_gateway: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{offline_gateway}/v1", api_key="unused", max_retries=0)


def test_openai_sdk_non_streaming(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="mock-large", messages=[{"role": "user", "content": "Hello over a socket"}]
    )
    assert completion.choices[0].message.content == (
        "This is a mock reply from gateway-kit to: Hello over a socket"
    )
    assert completion.usage is not None
    assert completion.usage.total_tokens > 0


def test_pii_masking_through_the_openai_sdk_without_auth() -> None:
    """The mock quotes the prompt it read: it reads placeholders, the client its values."""
    prompt = "Mail anna@example.se or call +44 20 7946 0958"
    with run_server(create_app(offline_config(pii={"mode": "enforce"}))) as base_url:
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="mock-large", messages=[{"role": "user", "content": prompt}]
        )
        assert raw.headers["x-gateway-pii"] == "masked EMAIL=1 PHONE=1"
        reply = raw.parse().choices[0].message.content
        assert reply == f"This is a mock reply from gateway-kit to: {prompt}"
        stream = client.chat.completions.create(
            model="mock-mini", messages=[{"role": "user", "content": prompt}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == f"This is a mock reply from gateway-kit to: {prompt}"


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tool-calls"])
def test_a_stream_served_from_the_cache_reads_like_a_live_one_to_the_openai_sdk(
    client: openai.OpenAI, tools: bool
) -> None:
    """The SDK's own accumulation of a replayed stream equals that of the live one (but the
    id and time each answer has of its own), usage included when asked, and chunk by chunk
    the SDK parses the same fields."""
    question = "Where is the weather nicest today?" if tools else "Cache this, please"
    asked: dict[str, Any] = {
        "model": "mock-large",
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    if tools:
        asked |= {"tools": [WEATHER_TOOL], "tool_choice": "required"}

    def streamed() -> tuple[str, Any, list[Any]]:
        raw = client.chat.completions.with_raw_response.create(**asked, stream=True)
        chunks = list(raw.parse())
        # What the SDK's stream helper (`client.chat.completions.stream`) makes of them.
        accumulated = ChatCompletionStreamState(input_tools=asked.get("tools", openai.omit))
        for piece in chunks:
            accumulated.handle_chunk(piece)
        return raw.headers["x-gateway-cache"], accumulated.get_final_completion(), chunks

    live_state, live, live_chunks = streamed()
    hit_state, hit, hit_chunks = streamed()
    assert (live_state, hit_state) == ("miss", "hit")
    ignored = {"id", "created", "system_fingerprint"}
    assert hit.model_dump(exclude=ignored) == live.model_dump(exclude=ignored)
    assert hit.choices[0].finish_reason == ("tool_calls" if tools else "stop")
    assert hit_chunks[-1].usage == live_chunks[-1].usage
    fields = {frozenset(c.model_dump(exclude_unset=True)) for c in live_chunks}
    assert {frozenset(c.model_dump(exclude_unset=True)) for c in hit_chunks} <= fields


async def _json_request(receive: Receive) -> Any:
    """The JSON body an upstream stand-in was sent, read whole."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return json.loads(body)


async def _reasoning_upstream(scope: Scope, receive: Receive, send: Send) -> None:
    """A reasoning model's OpenAI-compatible stream (DeepSeek's fields): its thinking, then
    its answer, Perplexity-style citations in every chunk, the usage when asked."""
    if scope["type"] != "http":
        return
    request = await _json_request(receive)
    cited = {"citations": ["https://example.com/paris"]}

    def event(**fields: Any) -> bytes:
        document = {**COMPLETION, "object": "chat.completion.chunk", **cited, **fields}
        return b"data: " + json.dumps(document).encode() + b"\n\n"

    def piece(finish: str | None = None, **delta: Any) -> bytes:
        return event(choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

    events = [piece(role="assistant", content="")]
    events += [piece(reasoning_content=t, content=None) for t in ("The user ", "asks of France.")]
    events += [piece(content=t, reasoning_content=None) for t in ("Paris", " is the capital.")]
    events.append(piece("stop"))
    usage = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
    if (request.get("stream_options") or {}).get("include_usage"):
        events.append(event(choices=[], usage=usage))
    await send(_start(200, b"text/event-stream"))
    await send({"type": "http.response.body", "body": b"".join([*events, DONE])})


def test_a_reasoning_models_stream_from_the_cache_reads_like_the_live_one() -> None:
    """Its thinking and the provider's own fields included, to the SDK's accumulation."""
    with (
        run_server(_reasoning_upstream) as upstream_url,
        run_server(create_app(proxy_config(upstream_url))) as gateway_url,
    ):
        client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0)

        def streamed() -> tuple[str, Any]:
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-fake",
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                temperature=0,
                stream=True,
            )
            accumulated = ChatCompletionStreamState()
            for piece in raw.parse():
                accumulated.handle_chunk(piece)
            return raw.headers["x-gateway-cache"], accumulated.get_final_completion()

        live_state, live = streamed()
        hit_state, hit = streamed()
    assert (live_state, hit_state) == ("miss", "hit")
    ignored = {"id", "created", "system_fingerprint"}
    assert hit.model_dump(exclude=ignored) == live.model_dump(exclude=ignored)
    message = hit.choices[0].message.model_dump()
    assert message["reasoning_content"] == "The user asks of France."
    assert message["content"] == "Paris is the capital."
    assert hit.model_dump()["citations"] == ["https://example.com/paris"]


def test_openai_sdk_streaming(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="mock-mini",
        messages=[{"role": "user", "content": "Stream this, please"}],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "This is a mock reply from gateway-kit to: Stream this, please"
    assert len(chunks) > 5


def test_openai_sdk_streamed_usage_only_when_asked_and_the_cost_header(
    client: openai.OpenAI,
) -> None:
    hello = [{"role": "user", "content": "Stream this, please"}]
    plain = list(client.chat.completions.create(model="mock-mini", messages=hello, stream=True))
    assert all(chunk.usage is None for chunk in plain)  # the gateway's own ask is stripped
    asked = list(
        client.chat.completions.create(
            model="mock-mini",
            messages=hello,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert asked[-1].usage is not None
    assert asked[-1].usage.completion_tokens > 0

    raw = client.chat.completions.with_raw_response.create(model="mock-mini", messages=hello)
    assert float(raw.headers["x-gateway-cost-usd"]) > 0  # mock-mini is priced as gpt-5-mini
    assert float(raw.headers["x-gateway-savings-usd"]) > 0  # against the flagship, gpt-5.1
    assert raw.parse().usage is not None


def test_openai_sdk_tool_calls(client: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    completion = client.chat.completions.create(
        model="mock-large", messages=messages, tools=[WEATHER_TOOL]
    )
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "mock", "unit": "C"}  # type: ignore[union-attr]

    stream = client.chat.completions.create(
        model="mock-large", messages=messages, tools=[WEATHER_TOOL], stream=True
    )
    arguments = ""
    names = []
    for piece in stream:
        for delta_call in (piece.choices[0].delta.tool_calls or []) if piece.choices else []:
            if delta_call.function and delta_call.function.name:
                names.append(delta_call.function.name)
            if delta_call.function and delta_call.function.arguments:
                arguments += delta_call.function.arguments
    assert names == ["get_weather"]
    assert json.loads(arguments) == {"city": "mock", "unit": "C"}

    # The tool result goes back and the loop ends with a text answer.
    messages += [
        completion.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
    ]
    final = client.chat.completions.create(
        model="mock-large", messages=messages, tools=[WEATHER_TOOL]
    )
    assert final.choices[0].message.content == "Mock answer using the tool result: 18 C, sunny"


def test_openai_sdk_sees_gateway_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="mock-large", messages=[])


# -- the proxy path over real sockets on both sides ---------------------------------------------


class FakeOpenAIServer:
    """A raw ASGI app standing in for an OpenAI-compatible API (served by uvicorn)."""

    def __init__(self) -> None:
        self.stream_closed = threading.Event()
        self.stream_events = 30
        self.bodies: list[Any] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = await _json_request(receive)
        self.bodies.append(request)
        if not request.get("stream"):
            payload = json.dumps(COMPLETION).encode()
            await send(_start(200, b"application/json"))
            await send({"type": "http.response.body", "body": payload})
            return
        await send(_start(200, b"text/event-stream"))
        async with anyio.create_task_group() as tasks:

            async def stop_on_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.stream_closed.set()  # the gateway hung up on us
                tasks.cancel_scope.cancel()

            tasks.start_soon(stop_on_disconnect)
            for index in range(self.stream_events):
                await send(
                    {"type": "http.response.body", "body": chunk(f"{index} "), "more_body": True}
                )
                await anyio.sleep(0.02)
                if request.get("cut") and index == 3:
                    raise RuntimeError("upstream crashed mid-stream")
            await send({"type": "http.response.body", "body": DONE})
            tasks.cancel_scope.cancel()


def _start(status: int, content_type: bytes) -> Message:
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", content_type)],
    }


@pytest.fixture
def fake_upstream() -> Iterator[tuple[FakeOpenAIServer, str]]:
    app = FakeOpenAIServer()
    with run_server(app) as base_url:
        yield app, base_url


def proxy_config(upstream_url: str, transport: str = "httpx") -> GatewayConfig:
    return GatewayConfig(
        **OPEN,
        providers=(
            ProviderConfig(
                name="up", base_url=f"{upstream_url}/v1", api_key="sk-test", transport=transport
            ),  # type: ignore[arg-type]
        ),
        models=(ModelConfig(name="gpt-fake", provider="up"),),
    )


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_proxying_to_a_real_upstream_streams_and_relays(
    fake_upstream: tuple[FakeOpenAIServer, str], transport: str
) -> None:
    upstream, upstream_url = fake_upstream
    with run_server(create_app(proxy_config(upstream_url, transport))) as gateway_url:
        client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0)
        completion = client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "hi"}]
        )
        assert completion.system_fingerprint == "fp_unknown_field_kept"
        stream = client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream)
    assert text == "".join(f"{i} " for i in range(upstream.stream_events))


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_a_client_leaving_mid_stream_closes_the_upstream_request(
    fake_upstream: tuple[FakeOpenAIServer, str], transport: str
) -> None:
    upstream, upstream_url = fake_upstream
    upstream.stream_events = 500  # 10 s of streaming if nobody stops it
    with run_server(create_app(proxy_config(upstream_url, transport))) as gateway_url:
        body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}], "stream": True}
        with (
            httpx.Client() as http,
            http.stream("POST", f"{gateway_url}/v1/chat/completions", json=body) as response,
        ):
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
        # The client is gone; the gateway must cancel its upstream call promptly.
        assert upstream.stream_closed.wait(5)


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_an_upstream_crash_mid_stream_reaches_the_client_as_an_error_event(
    fake_upstream: tuple[FakeOpenAIServer, str], transport: str
) -> None:
    _, upstream_url = fake_upstream
    with run_server(create_app(proxy_config(upstream_url, transport))) as gateway_url:
        body = {
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
            "cut": True,
        }
        response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, timeout=10)
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in data
    assert json.loads(data[-1])["error"]["code"] == "upstream_stream_error"


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_an_unreachable_upstream_answers_502(transport: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more: connections are refused.
    config = proxy_config(f"http://127.0.0.1:{port}", transport)
    with run_server(create_app(config)) as gateway_url:
        response = httpx.post(
            f"{gateway_url}/v1/chat/completions",
            json={"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}]},
        )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unavailable"
