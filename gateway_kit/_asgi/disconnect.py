"""``CancelOnDisconnect``: stop paying for an upstream call once the client has gone."""

from __future__ import annotations

import asyncio
from types import TracebackType

import anyio
import anyio.abc

from gateway_kit._asgi.types import Message, Receive, Send

__all__ = ["CancelOnDisconnect"]


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another anyio backend (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class CancelOnDisconnect:
    """Cancel a block when the client goes away before its response is complete.

        async with CancelOnDisconnect(receive, send) as guard:
            await relay(..., guard.send)

    Enter it once the request body has been read, so the next message on ``receive`` is
    ``http.disconnect``. Servers also report ``http.disconnect`` once a response is complete;
    ``guard.send`` notes the final body message so that one is ignored.

    The watcher starts only when the block is still running after ``delay`` seconds: the
    point is to stop paying for long upstream calls, and a watcher task per request would cost
    about a tenth of the gateway's throughput on fast ones. A client that left earlier is seen
    the moment the watcher starts. On asyncio the watcher is a bare task (a timer until then)
    and the block an anyio cancel scope; other backends get a task group at once.
    """

    __slots__ = (
        "_complete",
        "_delay",
        "_receive",
        "_scope",
        "_send",
        "_tasks",
        "_timer",
        "_watcher",
    )

    def __init__(self, receive: Receive, send: Send, *, delay: float = 0.1) -> None:
        self._receive = receive
        self._send = send
        self._delay = delay
        self._complete = False
        self._scope = anyio.CancelScope()
        self._timer: asyncio.TimerHandle | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._tasks: anyio.abc.TaskGroup | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._complete = True
        await self._send(message)

    async def _watch(self) -> None:
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a server that cannot tell us: nothing to cancel then
            return
        if not self._complete:
            self._scope.cancel()

    def _start_watching(self) -> None:
        self._timer = None
        if not self._complete:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def __aenter__(self) -> CancelOnDisconnect:
        loop = _asyncio_loop()
        self._scope.__enter__()
        if loop is not None:
            self._timer = loop.call_later(self._delay, self._start_watching)
        else:
            self._tasks = anyio.create_task_group()
            await self._tasks.__aenter__()
            self._tasks.start_soon(self._watch)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._complete = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._watcher is not None:
            # Drop our reference: the cancelled task's traceback holds `self`, and a cycle
            # through it would leave every request's objects to the (slow) full collection.
            watcher, self._watcher = self._watcher, None
            watcher.cancel()
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()
            await self._tasks.__aexit__(None, None, None)
        return bool(self._scope.__exit__(exc_type, exc, traceback))
