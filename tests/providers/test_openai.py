"""OpenAIProvider against a scripted upstream (httpx.MockTransport)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from gateway_kit import (
    ChatCall,
    EmbeddingsCall,
    OpenAIProvider,
    UpstreamStreamError,
    UpstreamUnavailableError,
    create_http_client,
)
from tests.fakes import DONE, FakeUpstream, ScriptedStream, chunk

pytestmark = pytest.mark.anyio

PAYLOAD = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}


def provider(upstream: FakeUpstream, **options: object) -> OpenAIProvider:
    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    return OpenAIProvider(client=client, base_url="https://api.test/v1/", **options)  # type: ignore[arg-type]


async def test_sends_the_exact_bytes_with_key_and_headers() -> None:
    upstream = FakeUpstream()
    raw = b'{"model":"gpt-x",  "messages":[{"role":"user","content":"hi"}], "x_new": 1}'
    p = provider(upstream, api_key="sk-1", headers={"OpenAI-Organization": "org-1"})
    response = await p.chat(ChatCall(PAYLOAD, raw, stream=False, request_id="req_1"))
    sent = upstream.requests[0]
    assert str(sent.url) == "https://api.test/v1/chat/completions"
    assert sent.content == raw
    assert sent.headers["authorization"] == "Bearer sk-1"
    assert sent.headers["openai-organization"] == "org-1"
    assert sent.headers["x-request-id"] == "req_1"
    assert response.status == 200
    assert not response.streaming


async def test_serializes_the_payload_when_no_bytes_are_given() -> None:
    upstream = FakeUpstream()
    await provider(upstream).chat(ChatCall({**PAYLOAD, "model": "other"}, None, stream=False))
    assert upstream.sent_json() == {**PAYLOAD, "model": "other"}
    assert "authorization" not in upstream.requests[0].headers


async def test_forwards_only_safe_response_headers() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={"choices": []},
            headers={
                "x-request-id": "up-1",
                "x-ratelimit-remaining-requests": "5",
                "set-cookie": "a=b",
                "openai-processing-ms": "12",
            },
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    response = await OpenAIProvider(client=client).chat(ChatCall(PAYLOAD, None, stream=False))
    assert dict(response.headers) == {
        b"content-type": b"application/json",
        b"x-upstream-request-id": b"up-1",
        b"openai-processing-ms": b"12",
    }


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_5xx_raises_unavailable_with_the_status(status: int) -> None:
    upstream = FakeUpstream(status=status)
    with pytest.raises(UpstreamUnavailableError) as info:
        await provider(upstream).chat(ChatCall(PAYLOAD, None, stream=False))
    assert info.value.status == status
    assert info.value.provider == "openai"


@pytest.mark.parametrize(
    "error", [httpx.ConnectError("no"), httpx.ConnectTimeout("slow"), httpx.ReadTimeout("slow")]
)
async def test_transport_errors_raise_unavailable_with_status_0(error: Exception) -> None:
    with pytest.raises(UpstreamUnavailableError) as info:
        await provider(FakeUpstream(error=error)).chat(ChatCall(PAYLOAD, None, stream=False))
    assert info.value.status == 0


async def test_4xx_is_returned_with_its_body() -> None:
    upstream = FakeUpstream(status=429, json_body={"error": {"message": "slow down"}})
    response = await provider(upstream).chat(ChatCall(PAYLOAD, None, stream=True))
    assert response.status == 429
    assert json.loads(response.body) == {"error": {"message": "slow down"}}
    assert not response.streaming


async def test_a_stream_is_framed_into_events_and_closed() -> None:
    stream = ScriptedStream([b"data: {}\n", b"\ndata: [DONE]\n\n"])
    upstream = FakeUpstream(stream=stream)
    response = await provider(upstream).chat(
        ChatCall({**PAYLOAD, "stream": True}, None, stream=True)
    )
    assert response.events is not None
    events = [event.encode() async for event in response.events]
    await response.close()
    assert events == [b"data: {}\n\n", DONE]
    assert stream.closed


async def test_a_stream_without_done_raises_stream_error() -> None:
    upstream = FakeUpstream(stream=ScriptedStream([chunk("a")]))
    response = await provider(upstream).chat(ChatCall(PAYLOAD, None, stream=True))
    assert response.events is not None
    with pytest.raises(UpstreamStreamError):
        [event async for event in response.events]
    await response.close()


async def test_a_json_answer_to_a_stream_request_is_returned_whole() -> None:
    upstream = FakeUpstream()
    response = await provider(upstream).chat(ChatCall(PAYLOAD, None, stream=True))
    assert not response.streaming
    assert json.loads(response.body)["id"] == "chatcmpl-fake"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("body", [b"<html><body>502 Bad Gateway</body></html>", b"", b"  "])
async def test_a_2xx_without_a_json_body_is_an_outage_not_an_answer(
    stream: bool, body: bytes
) -> None:
    """A proxy's error page with a 200 was passed through as the answer, and billed."""
    upstream = FakeUpstream(raw_body=body)
    with pytest.raises(UpstreamUnavailableError) as info:
        await provider(upstream).chat(ChatCall(PAYLOAD, None, stream=stream))
    assert info.value.status == 0
    assert "without a JSON body" in str(info.value)


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        pytest.param("chat", b'{"id": "chatcmpl-x", "choices": [{"message": {"ro', id="chat-cut"),
        pytest.param("chat", b"{}", id="chat-empty"),
        pytest.param("chat", b'{"choices": null}', id="chat-no-list"),
        pytest.param("embeddings", b'{"object": "list", "data": [{"emb', id="embeddings-cut"),
        pytest.param("embeddings", b'{"object": "list"}', id="embeddings-no-data"),
    ],
)
async def test_a_2xx_that_is_not_the_apis_answer_is_an_outage(answer: str, body: bytes) -> None:
    """Only the first byte was checked: a body cut short, or `{}`, passed as the answer."""
    upstream = provider(FakeUpstream(raw_body=body))
    if answer == "chat":
        call = upstream.chat(ChatCall(PAYLOAD, None, stream=False))
    else:
        call = upstream.embeddings(EmbeddingsCall({"model": "e", "input": "hi"}))
    with pytest.raises(UpstreamUnavailableError) as info:
        await call
    assert info.value.status == 0


async def test_a_whole_answer_carries_its_parsed_body() -> None:
    response = await provider(FakeUpstream()).chat(ChatCall(PAYLOAD, None, stream=False))
    assert response.document == json.loads(response.body)


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
async def test_a_refused_connection_is_unreachable_on_every_transport(transport: str) -> None:
    """With aiohttp (the default "auto" transport) it was reported as a timeout."""
    if transport == "aiohttp":
        pytest.importorskip("httpx_aiohttp")
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    async with create_http_client(transport=transport) as client:
        upstream = OpenAIProvider(client=client, base_url=f"http://127.0.0.1:{port}/v1")
        with pytest.raises(UpstreamUnavailableError) as info:
            await upstream.chat(ChatCall(PAYLOAD, None, stream=False))
    assert "is unreachable" in str(info.value)
    assert "timed out" not in str(info.value)


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
async def test_a_silent_upstream_times_out_on_every_transport(transport: str) -> None:
    if transport == "aiohttp":
        pytest.importorskip("httpx_aiohttp")
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        async with create_http_client(transport=transport) as client:
            upstream = OpenAIProvider(client=client, base_url=url, timeout=0.2)
            with pytest.raises(UpstreamUnavailableError) as info:
                await upstream.chat(ChatCall(PAYLOAD, None, stream=False))
    assert str(info.value) == "Upstream provider 'openai' timed out."
