"""The layer contract's plumbing (DESIGN.md section 3).

Every layer and the proxy endpoint use these pieces, so the invariants live in one place:

- ``RequestContext`` under ``scope["gateway_kit.context"]``, created by whoever runs first;
- the request body read once under a size cap and replayed to the inner app by a ``receive``
  that hands over to the original one afterwards (so ``http.disconnect`` still arrives);
- OpenAI-shaped error responses, sent rather than raised;
- ``ResponseTracker``: ``http.response.start`` goes out exactly once;
- ``SSEFramer``: a byte stream split into complete server-sent events at any chunk boundary.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from gateway_kit.cost import RequestCost

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTEXT_KEY = "gateway_kit.context"
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024

JSON_HEADERS = ((b"content-type", b"application/json"),)
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(slots=True)
class Principal:
    """Who is calling: set by the Auth layer."""

    workspace_id: str
    key_id: str


@dataclass(slots=True)
class RequestContext:
    """Per-request state shared by the layers; the only channel between them."""

    request_id: str = ""
    started_at: float = field(default_factory=time.perf_counter)
    principal: Principal | None = None
    #: The raw request body once read; ``None`` until a layer (or the endpoint) reads it.
    body: bytes | None = None
    #: The parsed chat request, once parsed. Layers that change it call ``replace_json``.
    json: dict[str, Any] | None = None
    #: The model the request will be sent as (after routing/experiments/downgrades).
    model: str | None = None
    #: Named durations in seconds for ``Server-Timing`` (``upstream`` is set by the endpoint).
    timings: dict[str, float] = field(default_factory=dict)
    #: What the request cost (usage, micro-USD, flagship baseline), set by the endpoint once
    #: upstream may bill: reported usage, or an estimate (flagged) when none arrived.
    cost: RequestCost | None = None
    #: Free-form values layers hand to each other (documented by the layer that sets them).
    extras: dict[str, Any] = field(default_factory=dict)


def get_context(scope: Scope) -> RequestContext:
    """The request's context, created on first use."""
    ctx: RequestContext | None = scope.get(CONTEXT_KEY)
    if ctx is None:
        ctx = RequestContext(request_id=new_request_id())
        scope[CONTEXT_KEY] = ctx
    return ctx


def new_request_id() -> str:
    """``req_`` and 32 random hex digits (a quarter of ``uuid4``'s cost, same entropy)."""
    return "req_" + os.urandom(16).hex()


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (``name`` lower-case)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


# -- errors -------------------------------------------------------------------------------------


def error_body(message: str, *, type: str, code: str | None, param: str | None = None) -> bytes:
    """An OpenAI-shaped error body: ``{"error": {"message", "type", "code", "param"}}``."""
    error = {"message": message, "type": type, "param": param, "code": code}
    return json.dumps({"error": error}).encode()


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    type: str,
    code: str | None,
    param: str | None = None,
    headers: tuple[tuple[bytes, bytes], ...] | list[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with an OpenAI-shaped JSON error. Layers call this and return; never raise."""
    body = error_body(message, type=type, code=code, param=param)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *JSON_HEADERS,
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- the request body ---------------------------------------------------------------------------


class BodyTooLarge(Exception):
    """The body passed the cap; the layer answers 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeds the limit of {limit} bytes.")
        self.limit = limit


class ClientDisconnected(Exception):
    """The client went away while the body was being read."""


class _ReplayReceive:
    """Replays the buffered body once, then hands over to the original ``receive``."""

    __slots__ = ("_ctx", "_receive", "_replayed")

    def __init__(self, ctx: RequestContext, receive: Receive) -> None:
        self._ctx = ctx
        self._receive = receive
        self._replayed = False

    async def __call__(self) -> Message:
        if not self._replayed:
            self._replayed = True
            return {"type": "http.request", "body": self._ctx.body or b"", "more_body": False}
        return await self._receive()


async def read_body(
    scope: Scope, receive: Receive, *, limit: int = DEFAULT_MAX_BODY_BYTES
) -> tuple[bytes, Receive]:
    """Read the request body once and return it with a ``receive`` that replays it.

    A second call (an inner layer) gets the buffered body and the same replaying ``receive``
    without touching the network. Raises ``BodyTooLarge`` past ``limit`` (checked against
    ``content-length`` first, then while reading) and ``ClientDisconnected``.
    """
    ctx = get_context(scope)
    if ctx.body is not None and isinstance(receive, _ReplayReceive) and not receive._replayed:
        return ctx.body, receive
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    ctx.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return ctx.body, _ReplayReceive(ctx, receive)


def replace_json(scope: Scope, payload: dict[str, Any]) -> None:
    """Replace the request's JSON body for the layers and the app inside.

    Re-serializes once and fixes ``content-length`` in the scope, so an inner app reading
    ``receive`` sees a consistent request.
    """
    ctx = get_context(scope)
    ctx.json = payload
    ctx.body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    length = str(len(ctx.body)).encode()
    scope["headers"] = [(k, length if k == b"content-length" else v) for k, v in scope["headers"]]


# -- the response -------------------------------------------------------------------------------


class ResponseTracker:
    """Wraps ``send``: knows whether the response started or ended, refuses a second start.

    A layer or endpoint that must answer an error after calling inner code checks ``started``:
    before the start it can still send a proper error response, after it only an in-band one.
    """

    __slots__ = ("_send", "ended", "started", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.ended = False
        self.status = 0

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            self.status = message["status"]
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self._send(message)


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


# -- server-sent events -------------------------------------------------------------------------


class SSEFramer:
    """Splits a byte stream into complete server-sent events.

    Events end with a blank line; lines end with LF, CRLF or CR (the SSE grammar). Splitting
    happens only at those ASCII bytes, which never occur inside a multi-byte UTF-8 sequence, so
    a character split between two chunks comes out whole. Events are returned byte for byte
    as received, terminating blank line included; the concatenation of the events is the
    stream (blank lines between events travel at the front of the next event).
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" not in buffer:
            # The common case (OpenAI and most providers): LF line ends only.
            *events, self._buffer = buffer.split(b"\n\n")
            return [event + b"\n\n" for event in events if event]
        events = []
        start = line_start = 0
        has_content = False
        for match in _LINE_END.finditer(buffer):
            # A CR at the end of a chunk may be half of a CRLF. Either way it ends the line,
            # so the event goes out now; an LF arriving next is an empty line, ignored.
            if match.start() == line_start:  # a blank line ends the event
                if has_content:
                    events.append(buffer[start : match.end()])
                    start = match.end()
                    has_content = False
            else:
                has_content = True
            line_start = match.end()
        self._buffer = buffer[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated (what a cut stream leaves behind)."""
        return self._buffer


def sse_data(event: bytes) -> str | None:
    """The ``data`` of one framed event (joined lines), or ``None`` if it has none."""
    data_lines = [
        line[5:].removeprefix(" ")
        for line in event.decode("utf-8", "replace").splitlines()
        if line.startswith("data:")
    ]
    return "\n".join(data_lines) if data_lines else None


def sse_event(data: dict[str, Any] | str) -> bytes:
    """Frame one ``data:`` event."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
