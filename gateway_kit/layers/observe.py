"""``ObserveMiddleware``: every request of the chat and embeddings routes, recorded as it ends.

It runs first on the inference routes (``stack.py``), so it sees every request there, the
ones the layers inside refuse included (a bad key's 401, a quota's 429, a budget's 402), and
hands each, once it has ended, to the ``Gateway``'s observer: the request log, the metrics and
the log line (``observe.observer``). A request ends when the app inside returns: answered,
refused, failed, or cancelled because the client went away (the record says the response was
not completed). Recording does no I/O: the log is written off the request path.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gateway_kit._asgi import ASGIApp, Receive, Scope, Send
from gateway_kit.gateway import Gateway
from gateway_kit.observe.record import RequestRecord, Route
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.entry import answer_fault, enter, finish

__all__ = ["ObserveMiddleware", "record_of"]

logger = logging.getLogger("gateway_kit.requests")


class ObserveMiddleware:
    """Records each request of the route it wraps; put it first in the route's stack."""

    def __init__(self, app: ASGIApp, *, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway
        kind = getattr(app, "request_kind", "chat")
        self.route: Route = "embeddings" if kind == "embedding" else "chat"
        #: The layers inside commit the admission (it adds nothing to it).
        self.commits_admission = getattr(app, "commits_admission", False)
        self.request_kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.gateway.running:
            await self.app(scope, receive, send)
            return
        ctx, send, owner = enter(scope, send)
        tracing = self.gateway.tracing
        if not tracing.enabled:
            await self._observed(ctx, owner, scope, receive, send, None)
            return
        with tracing.request_span(self.route) as span:
            ctx.tracing = tracing
            await self._observed(ctx, owner, scope, receive, send, span)

    async def _observed(
        self,
        ctx: RequestContext,
        owner: bool,
        scope: Scope,
        receive: Receive,
        send: Send,
        span: Any,
    ) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception:
            # A fault inside: answered here (recorded as the 500 it is), unless the response
            # had started.
            if not await answer_fault(ctx, send):
                ctx.error_code = ctx.error_code or "internal_error"
                raise
        finally:
            if owner:
                await finish(ctx)
            gateway = self.gateway
            try:
                now, ended = gateway.clock(), time.perf_counter()
                record = record_of(ctx, self.route, now=now, ended=ended)
                gateway.observer.request_done(record)
                if span is not None:
                    gateway.tracing.describe(span, record)
            except Exception:
                logger.exception("request %s could not be recorded", ctx.request_id)


def record_of(ctx: RequestContext, route: Route, *, now: float, ended: float) -> RequestRecord:
    """The record of the request ``ctx`` carried; ``now`` is the Unix time as it ends,
    ``ended`` the ``perf_counter`` reading then (the context's durations are on that clock)."""
    total = ended - ctx.started_at
    principal = ctx.principal
    payload = ctx.json
    requested = payload.get("model") if payload is not None else ctx.asked_model
    served_model = provider = None
    fallbacks: tuple[str, ...] = ()
    retries = 0
    verdicts = ctx.verdicts
    routing = verdicts.get("routing")
    if routing is not None:
        served_model = getattr(routing, "model", None)
        provider = getattr(routing, "provider", None)
        fallbacks = getattr(routing, "attempts", ())
        retries = getattr(routing, "retries", 0)
    cost = ctx.cost
    if cost is not None:
        usage = cost.usage
        tokens = (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.output_tokens,
            usage.reasoning_tokens,
        )
        estimated = usage.estimated
        cost_micro_usd = cost.cost_micro_usd
        savings = cost.savings_micro_usd
        served_model = served_model or cost.model
    else:
        tokens, estimated, cost_micro_usd, savings = (0, 0, 0, 0), False, None, 0
    upstream = ctx.timings.get("upstream")
    first_byte = ctx.first_byte_at
    stream = payload is not None and payload.get("stream") is True
    # Positionally, in the fields' order: keywords cost three times as much to pass.
    return RequestRecord(
        ctx.request_id,
        now - total,
        route,
        principal.workspace_id if principal is not None else None,
        principal.key_id if principal is not None else None,
        requested[:256] if isinstance(requested, str) else None,
        served_model,
        provider,
        ctx.status,
        ctx.error_code,
        stream,
        ctx.responded,
        tokens[0],
        tokens[1],
        tokens[2],
        tokens[3],
        estimated,
        cost_micro_usd,
        savings,
        total * 1000,
        None if upstream is None else upstream * 1000,
        # A stream's first token: an error answer to a stream request has none.
        (first_byte - ctx.started_at) * 1000
        if stream and first_byte and ctx.status < 400
        else None,
        verdicts,
        tuple(fallbacks),
        retries,
    )
