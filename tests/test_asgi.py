"""The private ASGI plumbing: OpenAI-shaped errors and cancelling on a disconnect."""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gateway_kit._asgi import CancelOnDisconnect, Message, send_error

pytestmark = pytest.mark.anyio


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
