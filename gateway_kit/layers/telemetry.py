"""``TelemetryMiddleware``: ``x-request-id`` and ``Server-Timing`` on every response.

It runs first, so it creates the request context: a valid incoming ``x-request-id`` is kept
(and sent upstream), anything else is replaced by a generated ``req_...`` id. ``Server-Timing``
reports ``gateway`` (time spent in gateway-kit before the response started, upstream excluded)
and each duration a layer recorded in ``ctx.timings`` (``upstream``: until the upstream's
response headers for a stream, until its whole body otherwise).
"""

from __future__ import annotations

import re
import time

from gateway_kit._asgi import ASGIApp, Message, Receive, Scope, Send, header
from gateway_kit.pipeline.context import CONTEXT_KEY, RequestContext, new_request_id

_VALID_REQUEST_ID = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:+=/-]{0,127}")


class TelemetryMiddleware:
    """Request ids and timing headers; put it outermost."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = header(scope, b"x-request-id")
        if incoming is not None and _VALID_REQUEST_ID.fullmatch(incoming):
            request_id = incoming.decode()
        else:
            request_id = new_request_id()
        ctx = scope.get(CONTEXT_KEY)
        if ctx is None:
            ctx = scope[CONTEXT_KEY] = RequestContext(request_id=request_id)
        else:
            ctx.request_id = request_id

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                elapsed = time.perf_counter() - ctx.started_at
                own = elapsed - sum(ctx.timings.values())
                timing = ", ".join(
                    [f"gateway;dur={own * 1000:.3f}"]
                    + [f"{name};dur={seconds * 1000:.3f}" for name, seconds in ctx.timings.items()]
                )
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"x-request-id", ctx.request_id.encode()),
                    (b"server-timing", timing.encode()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)
