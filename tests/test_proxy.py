"""POST /v1/chat/completions through the app: validation, relaying, streaming, disconnects."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from gateway_kit import ChatCompletionsEndpoint, Gateway, GatewayConfig, ServerConfig, create_app
from gateway_kit._asgi import Message
from gateway_kit.testing import ASGIRecorder
from tests.fakes import DONE, FakeUpstream, ScriptedStream, chunk, gateway_for, offline_config
from tests.fakes import upstream_config as config_for

pytestmark = pytest.mark.anyio

URL = "/v1/chat/completions"
HELLO = {"model": "gpt-fake", "messages": [{"role": "user", "content": "Hello"}]}


@pytest.fixture
async def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture
async def recorder(upstream: FakeUpstream) -> AsyncIterator[ASGIRecorder]:
    config = config_for()
    config = config.model_copy(update={"server": ServerConfig(max_body_bytes=4096)})
    async with gateway_for(upstream, config) as gateway:
        yield ASGIRecorder(create_app(gateway=gateway))


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "code", "param"}
    assert body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


# -- bad input ----------------------------------------------------------------------------------

BAD_BODIES = [
    pytest.param(b"{not json", 400, "invalid_json", None, id="malformed-json"),
    pytest.param(b"\xff\xfe", 400, "invalid_json", None, id="not-utf8"),
    pytest.param(b"[1, 2]", 400, "invalid_type", None, id="array-body"),
    pytest.param(b'"text"', 400, "invalid_type", None, id="string-body"),
    pytest.param(b"{}", 400, "missing_required_parameter", "model", id="no-model"),
    pytest.param(
        b'{"model": "gpt-fake"}', 400, "missing_required_parameter", "messages", id="no-messages"
    ),
    pytest.param(b'{"model": 3, "messages": []}', 400, "invalid_type", "model", id="model-int"),
    pytest.param(
        b'{"model": "gpt-fake", "messages": "hi"}', 400, "invalid_type", "messages", id="msgs-str"
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": []}', 400, "invalid_value", "messages", id="msgs-empty"
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"content": "x"}]}',
        400,
        "missing_required_parameter",
        "messages[0].role",
        id="no-role",
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"role": "wizard", "content": "x"}]}',
        400,
        "invalid_value",
        "messages[0].role",
        id="bad-role",
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"role": "user", "content": 5}]}',
        400,
        "invalid_type",
        "messages[0].content",
        id="content-int",
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
        400,
        "invalid_type",
        "stream",
        id="stream-str",
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
        400,
        "invalid_type",
        "max_tokens",
        id="max-tokens-0",
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}], "temperature": 9}',
        400,
        "invalid_type",
        "temperature",
        id="temperature-9",
    ),
    pytest.param(
        b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}',
        400,
        "invalid_type",
        "tools[0].function.name",
        id="tool-no-name",
    ),
    pytest.param(
        b'{"model": "gpt-9000", "messages": [{"role": "user", "content": "x"}]}',
        404,
        "model_not_found",
        "model",
        id="unknown-model",
    ),
]


@pytest.mark.parametrize(("body", "status", "code", "param"), BAD_BODIES)
async def test_bad_requests_get_an_openai_error_and_never_reach_the_upstream(
    recorder: ASGIRecorder,
    upstream: FakeUpstream,
    body: bytes,
    status: int,
    code: str,
    param: str | None,
) -> None:
    response = await recorder.request(
        "POST", URL, body=body, headers={"content-type": "application/json"}
    )
    assert response.status == status
    assert response.headers["content-type"] == "application/json"
    error = error_of(response)
    assert error["code"] == code
    assert error["param"] == param
    assert upstream.calls == 0


async def test_a_body_over_the_cap_gets_413(recorder: ASGIRecorder, upstream: FakeUpstream) -> None:
    big = {**HELLO, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = await recorder.request("POST", URL, json=big)
    assert response.status == 413
    assert error_of(response)["code"] == "request_too_large"
    # Without a content-length the cap holds while reading, too.
    raw = json.dumps(big).encode()
    response = await recorder.request(
        "POST",
        URL,
        body_chunks=[raw[:3000], raw[3000:]],
        headers={"content-type": "application/json"},
    )
    assert response.status == 413
    assert upstream.calls == 0


async def test_a_wrong_content_type_gets_415(
    recorder: ASGIRecorder, upstream: FakeUpstream
) -> None:
    response = await recorder.request(
        "POST",
        URL,
        body=json.dumps(HELLO).encode(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status == 415
    assert error_of(response)["code"] == "unsupported_media_type"
    assert upstream.calls == 0


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/nope", 404),
        ("POST", "/", 404),
        ("GET", URL, 405),
        ("DELETE", "/healthz", 405),
        # A slash too many: once an empty 307 to the Host header's site, before authentication.
        ("POST", URL + "/", 404),
        ("GET", "/v1/me/", 404),
        ("GET", "/api/v1/workspaces/ws_abc/keys/", 404),
        ("GET", "/api/v1/admin/workspaces/", 404),
    ],
)
async def test_unknown_paths_and_methods_get_json_errors(
    recorder: ASGIRecorder, method: str, path: str, status: int
) -> None:
    response = await recorder.request(method, path, headers={"host": "evil.example"})
    assert response.status == status
    assert response.headers["content-type"] == "application/json"
    assert "location" not in response.headers
    assert error_of(response)["code"] == ("not_found" if status == 404 else "method_not_allowed")


# -- relaying -----------------------------------------------------------------------------------


async def test_json_response_and_request_pass_through_untouched(
    recorder: ASGIRecorder, upstream: FakeUpstream
) -> None:
    request = {
        **HELLO,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "some_future_parameter": {"nested": [1, 2, 3]},
    }
    raw = json.dumps(request, indent=2).encode()  # odd formatting must survive too
    upstream.raw_body = b'{"id": "x",  "choices": [], "brand_new_field": true}'
    response = await recorder.request(
        "POST", URL, body=raw, headers={"content-type": "application/json"}
    )
    assert response.status == 200
    assert response.body == upstream.raw_body
    assert upstream.requests[0].content == raw
    assert upstream.requests[0].headers["authorization"] == "Bearer sk-up"
    assert response.headers["x-gateway-model"] == "gpt-fake"


async def test_an_alias_is_sent_upstream_under_its_upstream_name(upstream: FakeUpstream) -> None:
    async with gateway_for(upstream, config_for(fast="gpt-4o-mini-2024")) as gateway:
        recorder = ASGIRecorder(create_app(gateway=gateway))
        response = await recorder.request("POST", URL, json={**HELLO, "model": "fast", "x": 1})
    assert response.status == 200
    assert upstream.sent_json() == {**HELLO, "model": "gpt-4o-mini-2024", "x": 1}
    assert response.headers["x-gateway-model"] == "fast"


async def test_upstream_4xx_passes_through_with_its_body(
    recorder: ASGIRecorder, upstream: FakeUpstream
) -> None:
    upstream.status = 400
    upstream.json_body = {"error": {"message": "context too long", "code": "context_length"}}
    response = await recorder.request("POST", URL, json=HELLO)
    assert response.status == 400
    assert response.json() == upstream.json_body


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param({"status": 500}, id="500"),
        pytest.param({"status": 503}, id="503"),
        pytest.param({"error": httpx.ConnectError("refused")}, id="connect-error"),
        pytest.param({"error": httpx.ReadTimeout("slow")}, id="timeout"),
    ],
)
async def test_upstream_failures_answer_502_upstream_unavailable(
    recorder: ASGIRecorder, upstream: FakeUpstream, failure: dict[str, Any]
) -> None:
    for name, value in failure.items():
        setattr(upstream, name, value)
    response = await recorder.request("POST", URL, json=HELLO)
    assert response.status == 502
    assert error_of(response)["code"] == "upstream_unavailable"


async def test_an_upstream_that_stops_answering_times_out_with_502(upstream: FakeUpstream) -> None:
    config = GatewayConfig.model_validate(
        {
            "storage": {"url": "memory://"},
            "auth": {"mode": "off"},
            "providers": [{"name": "up", "base_url": "https://u.test/v1", "timeout_s": 0.05}],
            "models": [{"name": "gpt-fake", "provider": "up"}],
        }
    )

    # A real socket server that accepts and never answers exercises httpx's read timeout.
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        config = config.model_copy(
            update={
                "providers": (
                    config.providers[0].model_copy(
                        update={"base_url": f"http://127.0.0.1:{port}/v1"}
                    ),
                )
            }
        )

        async def accept_and_hold(stream: anyio.abc.SocketStream) -> None:
            await anyio.sleep(30)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, accept_and_hold)
            async with Gateway(config) as gateway:
                with anyio.fail_after(10):
                    response = await ASGIRecorder(create_app(gateway=gateway)).request(
                        "POST", URL, json=HELLO
                    )
            tasks.cancel_scope.cancel()
    assert response.status == 502
    assert "timed out" in error_of(response)["message"]


# -- headers ------------------------------------------------------------------------------------


async def test_a_valid_request_id_is_echoed_and_sent_upstream(
    recorder: ASGIRecorder, upstream: FakeUpstream
) -> None:
    response = await recorder.request(
        "POST", URL, json=HELLO, headers={"x-request-id": "trace-abc.123"}
    )
    assert response.headers["x-request-id"] == "trace-abc.123"
    assert upstream.requests[0].headers["x-request-id"] == "trace-abc.123"


@pytest.mark.parametrize("incoming", [None, "", "bad id with spaces", "x" * 200, "é"])
async def test_a_missing_or_invalid_request_id_is_replaced(
    recorder: ASGIRecorder, incoming: str | None
) -> None:
    headers = {} if incoming is None else {"x-request-id": incoming}
    if incoming == "é":
        headers = {"x-request-id": "\xe9"}
    response = await recorder.request("POST", URL, json=HELLO, headers=headers)
    assert response.headers["x-request-id"].startswith("req_")
    assert response.headers["x-request-id"] != incoming


async def test_server_timing_reports_gateway_and_upstream_durations(
    recorder: ASGIRecorder, upstream: FakeUpstream
) -> None:
    upstream.delay = 0.05
    response = await recorder.request("POST", URL, json=HELLO)
    timing = dict(
        part.strip().split(";dur=") for part in response.headers["server-timing"].split(",")
    )
    assert set(timing) == {"gateway", "upstream"}
    assert float(timing["upstream"]) >= 50
    assert 0 <= float(timing["gateway"]) < float(timing["upstream"])
    # Errors answered by the gateway itself carry the headers too.
    response = await recorder.request("POST", URL, body=b"{", headers={"x-request-id": "r-1"})
    assert response.headers["x-request-id"] == "r-1"
    assert "gateway;dur=" in response.headers["server-timing"]


# -- streaming ----------------------------------------------------------------------------------


async def test_fifty_upstream_events_reach_the_client_one_by_one_before_the_upstream_ends(
    upstream: FakeUpstream,
) -> None:
    events = [chunk(f"w{i} ") for i in range(49)] + [DONE]
    seen = [anyio.Event() for _ in events]
    upstream_finished_at: list[float] = []

    async def wait_for_client(index: int) -> None:
        # The upstream produces event i only once the client has received event i-1:
        # a gateway that buffered anything would deadlock here (and fail the timeout).
        if index:
            await seen[index - 1].wait()

    stream = ScriptedStream(events, before_each=wait_for_client)
    upstream.stream = stream

    def on_send(message: Message) -> None:
        body = message.get("body", b"")
        # Upstream events only: the gateway's own cost comment comes just before `[DONE]`.
        if message["type"] == "http.response.body" and body and not body.startswith(b":"):
            seen[sum(1 for e in seen if e.is_set())].set()
        if stream.finished and not upstream_finished_at:
            upstream_finished_at.append(time.perf_counter())

    async with gateway_for(upstream) as gateway:
        with anyio.fail_after(10):
            response = await ASGIRecorder(create_app(gateway=gateway)).request(
                "POST", URL, json={**HELLO, "stream": True}, on_send=on_send
            )
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert len(response.body_messages) >= 50
    assert upstream_finished_at
    assert response.body_messages[0].at < upstream_finished_at[0]
    assert response.events()[-1] == "[DONE]"
    assert "".join(
        json.loads(e)["choices"][0]["delta"]["content"] for e in response.events()[:-1]
    ) == "".join(f"w{i} " for i in range(49))
    assert stream.closed


async def test_events_split_across_network_chunks_are_reassembled(upstream: FakeUpstream) -> None:
    wire = b"".join([chunk("héllo 🚀"), chunk(" wörld"), DONE])
    # Chunks of 7 bytes split lines, events and multi-byte characters.
    upstream.stream = ScriptedStream([wire[i : i + 7] for i in range(0, len(wire), 7)])
    async with gateway_for(upstream) as gateway:
        response = await ASGIRecorder(create_app(gateway=gateway)).request(
            "POST", URL, json={**HELLO, "stream": True}
        )
    assert [m.message["body"] for m in response.body_messages] == [
        chunk("héllo 🚀"),
        chunk(" wörld"),
        b": x-gateway-cost-usd=unknown\n\n",  # gpt-fake has no price here
        DONE,
    ]


async def test_tool_call_deltas_arrive_intact(upstream: FakeUpstream) -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
    events = [
        chunk(role="assistant", tool_calls=[{**call, "function": {"name": "f", "arguments": ""}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"ci'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]),
        chunk(finish="tool_calls"),
        DONE,
    ]
    upstream.stream = ScriptedStream(events)
    async with gateway_for(upstream) as gateway:
        response = await ASGIRecorder(create_app(gateway=gateway)).request(
            "POST", URL, json={**HELLO, "stream": True}
        )
    assert response.body == b"".join(events[:-1]) + b": x-gateway-cost-usd=unknown\n\n" + DONE
    arguments = "".join(
        json.loads(e)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        for e in response.events()[:3]
    )
    assert json.loads(arguments) == {"city": "Paris"}


@pytest.mark.parametrize(
    "script",
    [
        pytest.param({"fail_after": 2}, id="connection-drops"),
        pytest.param({}, id="ends-without-done"),
    ],
)
async def test_a_cut_stream_ends_with_an_error_event_never_done(
    upstream: FakeUpstream, script: dict[str, Any]
) -> None:
    upstream.stream = ScriptedStream([chunk("a"), chunk("b"), chunk("c")], **script)
    async with gateway_for(upstream) as gateway:
        response = await ASGIRecorder(create_app(gateway=gateway)).request(
            "POST", URL, json={**HELLO, "stream": True}
        )
    assert response.status == 200
    assert response.complete
    events = response.events()
    assert "[DONE]" not in events
    assert json.loads(events[-1])["error"]["code"] == "upstream_stream_error"
    assert upstream.stream.closed


async def test_a_client_disconnect_cancels_and_closes_the_upstream_stream(
    upstream: FakeUpstream,
) -> None:
    release = anyio.Event()

    async def slow_after_three(index: int) -> None:
        if index >= 3:
            await release.wait()  # never set: only cancellation ends this

    upstream.stream = ScriptedStream(
        [chunk(str(i)) for i in range(10)] + [DONE], before_each=slow_after_three
    )
    async with gateway_for(upstream) as gateway:
        with anyio.fail_after(10):
            response = await ASGIRecorder(create_app(gateway=gateway)).request(
                "POST", URL, json={**HELLO, "stream": True}, disconnect_after=3
            )
    assert len(response.body_messages) == 3
    assert upstream.stream.closed
    assert not upstream.stream.finished


async def test_a_client_disconnect_cancels_a_pending_json_call(upstream: FakeUpstream) -> None:
    cancelled = anyio.Event()

    async def never_answers(request: httpx.Request) -> httpx.Response:
        try:
            await anyio.sleep(30)
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    gone = anyio.Event()
    client = httpx.AsyncClient(transport=httpx.MockTransport(never_answers))
    async with Gateway(config_for(), http_client=client) as gateway:
        recorder = ASGIRecorder(create_app(gateway=gateway))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: recorder.request("POST", URL, json=HELLO, disconnect=gone))
                await anyio.sleep(0.05)
                gone.set()
                await cancelled.wait()
    assert cancelled.is_set()


async def test_mock_provider_streams_through_the_gateway_offline() -> None:
    async with Gateway(offline_config()) as gateway:
        recorder = ASGIRecorder(create_app(gateway=gateway))
        response = await recorder.request(
            "POST",
            URL,
            json={
                "model": "mock-large",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": HELLO["messages"],
            },
        )
        models = await recorder.request("GET", "/v1/models")
        health = await recorder.request("GET", "/healthz")
    events = response.events()
    assert events[-1] == "[DONE]"
    text = "".join(
        (json.loads(e)["choices"] or [{"delta": {}}])[0]["delta"].get("content") or ""
        for e in events[:-1]
    )
    assert text == "This is a mock reply from gateway-kit to: Hello"
    assert json.loads(events[-2])["usage"]["total_tokens"] > 0
    assert [m["id"] for m in models.json()["data"]] == [
        "mock-large",
        "mock-mini",
        "mock-flaky",
        "mock-embed",
        "auto",
    ]
    assert health.json() == {"status": "ok"}


@pytest.mark.parametrize(
    "fields",
    [{}, {"temperature": 0}],
    ids=["not-cached", "cached-request"],
)
async def test_a_gateway_that_was_not_entered_answers_503(fields: dict[str, Any]) -> None:
    config = offline_config(pii={"mode": "enforce"})  # the layers without Auth step aside
    recorder = ASGIRecorder(create_app(gateway=Gateway(config)))
    payload = {**HELLO, "model": "mock-large", **fields}
    response = await recorder.request("POST", URL, json=payload)
    assert response.status == 503
    assert error_of(response)["code"] == "gateway_not_running"


@pytest.mark.parametrize(
    ("method", "path"), [("POST", URL), ("GET", "/v1/models"), ("GET", "/v1/me")]
)
async def test_a_gateway_that_was_not_entered_answers_503_with_auth_on_too(
    method: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With Auth on (the default) the key's lookup touched the closed storage first: a 500
    and a traceback, where the README promises 503 gateway_not_running."""
    recorder = ASGIRecorder(create_app(gateway=Gateway(GatewayConfig())))
    headers = {"authorization": "Bearer gk_" + "a" * 43}
    response = await recorder.request(
        method, path, json={**HELLO, "model": "mock-large"}, headers=headers
    )
    assert response.status == 503
    assert error_of(response)["code"] == "gateway_not_running"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_send_that_raises_because_the_client_left_ends_the_request_quietly(
    upstream: FakeUpstream,
) -> None:
    # ASGI spec 2.4: `send` raises OSError once the client has disconnected.
    stream = ScriptedStream([chunk(str(i)) for i in range(5)] + [DONE])
    upstream.stream = stream
    sent: list[Message] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and len(sent) >= 3:
            raise OSError("client disconnected")
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": json.dumps({**HELLO, "stream": True}).encode()}

    scope = {
        "type": "http",
        "method": "POST",
        "path": URL,
        "headers": [(b"content-type", b"application/json")],
    }
    async with gateway_for(upstream) as gateway:
        await ChatCompletionsEndpoint(gateway)(scope, receive, send)
    assert len(sent) == 3
    assert stream.closed


# -- found in review ----------------------------------------------------------------------------

PRICED = GatewayConfig.model_validate(
    {
        **config_for().model_dump(mode="json", exclude={"models"}),
        "models": [
            {
                "name": "gpt-fake",
                "provider": "up",
                "price": {"input_usd_per_mtok": "1", "output_usd_per_mtok": "2"},
            }
        ],
    }
)


def usage_chunk(prompt: int, completion: int) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    body = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@pytest.mark.parametrize(
    "done", [b"data: [DONE]\n\n", b"data:[DONE]\n\n"], ids=["space", "no-space"]
)
async def test_a_stream_is_billed_on_its_reported_usage_however_done_is_written(
    upstream: FakeUpstream, done: bytes
) -> None:
    upstream.stream = ScriptedStream([chunk("hi"), usage_chunk(100, 50), done])
    async with gateway_for(upstream, PRICED) as gateway:
        response = await ASGIRecorder(create_app(gateway=gateway)).request(
            "POST", URL, json={**HELLO, "stream": True}
        )
    comment = next(
        m.message["body"] for m in response.body_messages if m.message["body"].startswith(b":")
    )
    # 100 prompt tokens at $1/M and 50 output tokens at $2/M: 200 micro-USD, as reported.
    assert (
        comment
        == b": x-gateway-cost-usd=0.000200 x-gateway-savings-usd="
        + comment.split(b"savings-usd=")[1]
    )
    assert b"estimated" not in comment
    assert response.events()[-1] == "[DONE]"


async def test_a_blank_line_before_done_still_ends_the_stream_cleanly(
    upstream: FakeUpstream,
) -> None:
    upstream.stream = ScriptedStream([chunk("hi"), b"\n", DONE])
    async with gateway_for(upstream) as gateway:
        response = await ASGIRecorder(create_app(gateway=gateway)).request(
            "POST", URL, json={**HELLO, "stream": True}
        )
    events = response.events()
    assert events[-1] == "[DONE]"
    assert not any("upstream_stream_error" in e for e in events)
