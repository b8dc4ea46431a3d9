"""Metering, the first response transform: usage read, the request priced, the cost told.

It sees the upstream's answer before any other transform. For a JSON body it reads the usage
and adds ``x-gateway-cost-usd`` (and ``-estimated``, ``x-gateway-savings-usd``) to the response
headers. For a stream it reads the usage chunk (stripping it when the gateway asked for it on
the client's behalf) and, just before ``[DONE]``, adds the cost as an SSE comment (the headers
left long before). Whatever happens once upstream may bill (a cut stream, a client that left),
``close`` gives the request a cost: the one reported, or an estimate flagged as such (with
the counts the upstream reported before the end, when it did: Anthropic's prompt count).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway_kit.cost.costs import Costs
from gateway_kit.cost.metering import StreamMeter, usage_of_body
from gateway_kit.cost.usage import Usage
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.transforms import JSONBody, ResponseTransform
from gateway_kit.sse import SSEEvent

__all__ = ["MeterTransform"]


class MeterTransform(ResponseTransform):
    """Prices the answer of ``model`` to ``payload`` into ``ctx.cost``."""

    def __init__(
        self,
        ctx: RequestContext,
        costs: Costs,
        model: str,
        payload: dict[str, Any],
        *,
        strip_usage: bool = False,
        usage_so_far: Callable[[], Usage | None] | None = None,
        upstream: str | None = None,
    ) -> None:
        self._ctx = ctx
        self._costs = costs
        self._model = model
        self._payload = payload
        self._strip = strip_usage
        self._usage_so_far = usage_so_far
        #: The upstream model of the deployment that answered: what the answer is priced at.
        self._upstream = upstream
        self._stream: StreamMeter | None = None  # made for a stream's first event
        self._billable = False

    @property
    def _meter(self) -> StreamMeter:
        if self._stream is None:
            self._stream = StreamMeter(strip_usage=self._strip)
        return self._stream

    def start(self, status: int) -> None:
        self._billable = 200 <= status < 300

    def _price(self, usage: Usage | None, *, output_tokens: int | None = None) -> None:
        costs = self._costs
        if usage is None:
            usage = self._estimate(output_tokens)
        self._ctx.cost = cost = costs.of(self._model, usage, upstream=self._upstream)
        choices = self._payload.get("n")
        costs.observe(cost, choices=choices if type(choices) is int and choices > 0 else 1)

    def _estimate(self, output_tokens: int | None) -> Usage:
        """The usage of an answer that reported none in the end, flagged as estimated: the
        counts the stream reported early (the prompt's) where it did, the rest estimated."""
        early = self._usage_so_far() if self._usage_so_far is not None else None
        if early is None:
            return self._costs.estimate_usage(
                self._model, self._payload, output_tokens=output_tokens
            )
        output = max(early.output_tokens, output_tokens or 0)
        return Usage(
            early.input_tokens,
            output,
            cache_read_tokens=early.cache_read_tokens,
            cache_write_tokens=early.cache_write_tokens,
            reasoning_tokens=min(early.reasoning_tokens, output),
            estimated=True,
        )

    def body(self, body: JSONBody) -> None:
        if self._billable:
            self._price(usage_of_body(body.raw, body.json))
            assert self._ctx.cost is not None
            self._ctx.headers.extend(self._ctx.cost.headers())

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        if event.done:
            if not self._billable or self._ctx.cost is not None:
                return (event,)
            # The cost is known only now: an SSE comment just before `[DONE]`.
            self._price(self._meter.usage, output_tokens=self._meter.chunks)
            assert self._ctx.cost is not None
            return (SSEEvent.comment(self._ctx.cost.comment()), event)
        forward = self._meter.process(event)
        return () if forward is None else (forward,)

    def close(self) -> Sequence[SSEEvent]:
        if self._billable and self._ctx.cost is None:
            # Upstream may bill a stream that never finished: an estimate, flagged as such.
            meter = self._meter
            usage = meter.usage or self._estimate(meter.chunks)
            self._ctx.cost = self._costs.of(self._model, usage, upstream=self._upstream)
        return ()
