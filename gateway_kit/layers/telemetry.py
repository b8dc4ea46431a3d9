"""``TelemetryMiddleware``: ``x-request-id`` and ``Server-Timing`` on every response.

It runs first, so it creates the request context and owns the request in the pipeline (see
``pipeline.entry``): a valid incoming ``x-request-id`` is kept (and sent upstream), anything
else is replaced by a generated ``req_...`` id. ``Server-Timing`` reports ``gateway`` (time
spent in gateway-kit before the response started, upstream excluded) and each duration a layer
recorded in ``ctx.timings`` (``upstream``: until the upstream's first event for a stream, until
its whole body otherwise). Both go out through the pipeline's one response wrapper.
"""

from __future__ import annotations

import re
import time

from gateway_kit._asgi import ASGIApp, Header, Receive, Scope, Send, header
from gateway_kit.pipeline.context import CONTEXT_KEY, RequestContext, new_request_id
from gateway_kit.pipeline.entry import answer_fault, enter, finish

__all__ = ["TelemetryMiddleware"]

_VALID_REQUEST_ID = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:+=/-]{0,127}")


def _timing_headers(ctx: RequestContext) -> list[Header]:
    """``x-request-id`` and ``Server-Timing``, computed when the response starts."""
    elapsed = time.perf_counter() - ctx.started_at
    own = elapsed - sum(ctx.timings.values())
    timing = ", ".join(
        [f"gateway;dur={own * 1000:.3f}"]
        + [f"{name};dur={seconds * 1000:.3f}" for name, seconds in ctx.timings.items()]
    )
    return [(b"x-request-id", ctx.request_id.encode()), (b"server-timing", timing.encode())]


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
        ctx, send, owner = enter(scope, send)
        ctx.header_sources.append(_timing_headers)
        try:
            await self.app(scope, receive, send)
        except Exception:
            # Any route's fault (the management API's too) is a 500 with its request id: the
            # server's own 500 came outside this wrapper, without one.
            if not await answer_fault(ctx, send):
                raise
        finally:
            if owner:
                await finish(ctx)
