"""How a response leaves: one ``send`` wrapper per request, and the writer of upstream answers.

``respond_through`` is the only ``send`` wrapper the pipeline puts in place (once per request,
by whichever layer runs first): when the response starts it records the status and adds the
headers the layers collected on the context (rate limits, verdicts, cost, ``Server-Timing``),
whoever answers, and it refuses a second ``http.response.start``. Layers never wrap ``send``
for headers of their own.

``ResponseWriter`` sends an upstream answer that went through the transform chain: it holds
``http.response.start`` until the first body is ready (so a transform may still hold back or
change the first event, and a JSON body's ``content-length`` is that of the body sent) and
sends it exactly once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from gateway_kit._asgi.types import Header, Message, Send
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.sse import SSEEvent

__all__ = ["ResponseWriter", "error_code_of", "respond_through"]

#: Error bodies longer than this are not read for their code.
_ERROR_BODY_MAX = 65_536


def respond_through(ctx: RequestContext, send: Send) -> Send:
    """``send``, adding the context's response headers when the response starts; it notes
    the status, when the first bytes went out, and an error answer's code."""

    async def send_with_context(message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if ctx.status:
                raise RuntimeError("http.response.start sent twice")
            ctx.status = message["status"]
            extra = ctx.headers  # complete now: nothing is added once the response started
            for source in ctx.header_sources:
                extra.extend(source(ctx))
            if extra:
                message["headers"] = [*message.get("headers", ()), *extra]
        elif kind == "http.response.body":
            if not ctx.first_byte_at:
                ctx.first_byte_at = time.perf_counter()
                if ctx.status >= 400 and ctx.error_code is None:
                    ctx.error_code = error_code_of(message.get("body", b""))
            if not message.get("more_body", False):
                ctx.responded = True
        await send(message)

    return send_with_context


def error_code_of(body: bytes) -> str:
    """An OpenAI-shaped error body's ``error.code`` (its ``type`` when it has no code);
    ``unknown`` for a body of another shape."""
    if len(body) <= _ERROR_BODY_MAX:
        try:
            error = json.loads(body).get("error")
        except (ValueError, AttributeError, RecursionError):
            # An upstream's error body is passed on as it came: any shape, any depth.
            error = None
        if isinstance(error, dict):
            code = error.get("code") or error.get("type")
            if isinstance(code, str) and code:
                return code[:64]
    return "unknown"


class ResponseWriter:
    """Sends one upstream answer: ``whole`` for a body, ``emit``... ``end`` for a stream.
    It completes ``headers`` (``content-length``) in place."""

    __slots__ = ("_headers", "_send", "_status", "started")

    def __init__(self, send: Send, status: int, headers: list[Header]) -> None:
        self._send = send
        self._status = status
        self._headers = headers
        self.started = False

    async def _start(self) -> None:
        self.started = True
        start = {"type": "http.response.start", "status": self._status, "headers": self._headers}
        await self._send(start)

    async def whole(self, body: bytes) -> None:
        """The whole body, with its length."""
        self._headers.append((b"content-length", str(len(body)).encode()))
        await self._start()
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def emit(self, events: Sequence[SSEEvent]) -> None:
        """Stream events out, one body message each (the response starts with the first)."""
        for event in events:
            if not self.started:
                await self._start()
            await self._send(
                {"type": "http.response.body", "body": event.encode(), "more_body": True}
            )

    async def end(self) -> None:
        """End the stream (starting the response first if nothing was emitted)."""
        if not self.started:
            await self._start()
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})
