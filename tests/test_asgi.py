"""The layer contract's plumbing: body reading and replay, errors, start-once, SSE framing."""

from __future__ import annotations

import gc
import itertools
import json
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gateway_kit._asgi import CancelOnDisconnect, Message, send_error
from gateway_kit.pipeline.body import BodyTooLarge, ClientDisconnected, read_body, replace_json
from gateway_kit.pipeline.context import CONTEXT_KEY, get_context
from gateway_kit.pipeline.response import ResponseTracker
from gateway_kit.sse import SSEFramer, sse_data

pytestmark = pytest.mark.anyio


def scripted_receive(*messages: Message) -> Any:
    queue = list(messages)

    async def receive() -> Message:
        return queue.pop(0)

    return receive


def http_scope(**headers: str) -> dict[str, Any]:
    return {
        "type": "http",
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }


# -- SSE framing --------------------------------------------------------------------------------

STREAM = (
    'data: {"a": "héllo wörld 🚀"}\n\n'
    ": a comment\n\n"
    "event: ping\ndata: line one\ndata: line two\n\n"
    "data: [DONE]\n\n"
).encode()


def frame_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    framer = SSEFramer()
    events: list[bytes] = []
    edges = [0, *cuts, len(stream)]
    for start, end in itertools.pairwise(edges):
        events += framer.feed(stream[start:end])
    # At most an empty line can be left over (an LF after an event that ended in CR).
    assert framer.pending.strip(b"\r\n") == b""
    return [*events, framer.pending] if framer.pending else events


def test_framer_yields_each_event_whole_for_every_single_split_point() -> None:
    whole = frame_in_pieces(STREAM, [])
    assert len(whole) == 4
    assert b"".join(whole) == STREAM
    for cut in range(1, len(STREAM)):
        assert frame_in_pieces(STREAM, [cut]) == whole, cut


def test_framer_keeps_a_utf8_character_split_between_chunks_whole() -> None:
    rocket = STREAM.index("🚀".encode())
    for offset in range(1, 4):  # inside the four-byte sequence
        events = frame_in_pieces(STREAM, [rocket + offset])
        assert json.loads(sse_data(events[0]) or "") == {"a": "héllo wörld 🚀"}


def test_framer_handles_one_byte_chunks() -> None:
    assert frame_in_pieces(STREAM, list(range(1, len(STREAM)))) == frame_in_pieces(STREAM, [])


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_framer_accepts_every_line_ending(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    expected = [sse_data(e) for e in frame_in_pieces(STREAM, []) if sse_data(e) is not None]
    for cut in [None, *range(1, len(stream))]:
        events = frame_in_pieces(stream, [] if cut is None else [cut])
        # Nothing lost or added, and the same events, wherever the chunk boundary falls.
        assert b"".join(events) == stream
        assert [sse_data(e) for e in events if sse_data(e) is not None] == expected, cut


def test_framer_dispatches_at_a_final_cr_and_ignores_the_lf_that_follows() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: x\r\n\r") == [b"data: x\r\n\r"]
    assert framer.feed(b"\ndata: y\r\n\r\n") == [b"\ndata: y\r\n\r\n"]
    assert sse_data(b"\ndata: y\r\n\r\n") == "y"


def test_framer_reports_a_cut_event_as_pending() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: complete\n\ndata: cut of") == [b"data: complete\n\n"]
    assert framer.pending == b"data: cut of"


def test_sse_data_joins_data_lines_and_ignores_comments() -> None:
    assert sse_data(b"event: x\ndata: a\ndata:b\n\n") == "a\nb"
    assert sse_data(b": just a comment\n\n") is None


# -- the body -----------------------------------------------------------------------------------


async def test_body_is_read_once_then_replayed_then_receive_hands_over() -> None:
    scope = http_scope()
    receive = scripted_receive(
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
        {"type": "http.disconnect"},
    )
    body, replay = await read_body(scope, receive)
    assert body == b'{"a":1}'
    # An inner layer reads it again: no network read, the same replaying receive.
    again, replay2 = await read_body(scope, replay)
    assert again == body
    assert replay2 is replay
    assert await replay() == {"type": "http.request", "body": b'{"a":1}', "more_body": False}
    assert await replay() == {"type": "http.disconnect"}


async def test_body_over_the_cap_by_content_length_is_refused_before_reading() -> None:
    async def receive() -> Message:
        raise AssertionError("must not read")

    with pytest.raises(BodyTooLarge):
        await read_body(http_scope(content_length="2048"), receive, limit=1024)


async def test_body_over_the_cap_while_streaming_is_refused() -> None:
    receive = scripted_receive(
        *[{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 2,
        {"type": "http.request", "body": b"", "more_body": False},
    )
    with pytest.raises(BodyTooLarge):
        await read_body(http_scope(), receive, limit=1024)


async def test_disconnect_while_reading_the_body_is_reported() -> None:
    receive = scripted_receive({"type": "http.disconnect"})
    with pytest.raises(ClientDisconnected):
        await read_body(http_scope(), receive)


async def test_replace_json_reserializes_and_fixes_content_length() -> None:
    scope = http_scope(content_length="7")
    receive = scripted_receive({"type": "http.request", "body": b'{"a":1}'})
    _, replay = await read_body(scope, receive)
    replace_json(scope, {"a": 1, "b": "é"})
    message = await replay()
    assert json.loads(message["body"]) == {"a": 1, "b": "é"}
    assert dict(scope["headers"])[b"content-length"] == str(len(message["body"])).encode()
    assert get_context(scope).json == {"a": 1, "b": "é"}


def test_context_is_created_once_per_request() -> None:
    scope = http_scope()
    ctx = get_context(scope)
    assert get_context(scope) is ctx
    assert scope[CONTEXT_KEY] is ctx
    assert ctx.request_id.startswith("req_")


# -- responses ----------------------------------------------------------------------------------


async def test_send_error_is_openai_shaped() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await send_error(send, 402, "Quota used up.", type="insufficient_quota", code="quota_exceeded")
    assert sent[0]["status"] == 402
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {
        "error": {
            "message": "Quota used up.",
            "type": "insufficient_quota",
            "code": "quota_exceeded",
            "param": None,
        }
    }


async def test_response_tracker_refuses_a_second_start() -> None:
    async def send(message: Message) -> None:
        return None

    tracker = ResponseTracker(send)
    await tracker({"type": "http.response.start", "status": 200, "headers": []})
    assert tracker.started
    assert tracker.status == 200
    assert not tracker.ended
    with pytest.raises(RuntimeError, match="twice"):
        await tracker({"type": "http.response.start", "status": 500, "headers": []})
    await tracker({"type": "http.response.body", "body": b"", "more_body": False})
    assert tracker.ended


# -- cancelling on disconnect -------------------------------------------------------------------


def disconnect_after(event: anyio.Event) -> Any:
    async def receive() -> Message:
        await event.wait()
        return {"type": "http.disconnect"}

    return receive


async def ignore(message: Message) -> None:
    return None


@pytest.mark.parametrize("asyncio_loop", [True, False], ids=["bare-task", "task-group"])
async def test_a_disconnect_cancels_the_block(
    asyncio_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not asyncio_loop:  # the path other anyio backends (trio) take
        monkeypatch.setattr("gateway_kit._asgi.disconnect._asyncio_loop", lambda: None)
    gone = anyio.Event()
    reached_end = False
    with anyio.fail_after(5):
        async with CancelOnDisconnect(disconnect_after(gone), ignore, delay=0):
            gone.set()
            await anyio.sleep(10)
            reached_end = True
    assert not reached_end


async def test_a_client_that_left_early_is_seen_when_the_watcher_starts() -> None:
    gone = anyio.Event()
    gone.set()  # left before the watcher exists
    started = time.perf_counter()
    with anyio.fail_after(5):
        async with CancelOnDisconnect(disconnect_after(gone), ignore, delay=0.05):
            await anyio.sleep(10)
    assert 0.05 <= time.perf_counter() - started < 1


async def test_the_disconnect_after_a_complete_response_cancels_nothing() -> None:
    # Servers report http.disconnect once the response is complete: not a client leaving.
    completed = anyio.Event()
    finished = False
    async with CancelOnDisconnect(disconnect_after(completed), ignore, delay=0) as guard:
        await guard.send({"type": "http.response.body", "body": b"", "more_body": False})
        completed.set()
        await anyio.sleep(0.02)  # time for the watcher to see it
        finished = True
    assert finished


async def test_the_guard_leaves_no_reference_cycles_behind() -> None:
    # A cycle through the cancelled watcher once kept every request's objects alive until
    # a full collection: this checks the guard frees by reference counting alone.
    never = anyio.Event()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(5):
            async with CancelOnDisconnect(disconnect_after(never), ignore, delay=0):
                for _ in range(3):  # the timer fires, the watcher starts and blocks
                    await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()  # the loop runs the cancelled watcher to its end
        gc.collect()
        leaked = [o for o in gc.garbage if isinstance(o, CancelOnDisconnect)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert leaked == []
