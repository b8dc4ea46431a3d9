"""Metering a stream that ends before its usage, without ASGI: the request still gets a cost,
estimated, with whatever the upstream reported before the end."""

from __future__ import annotations

from gateway_kit import GatewayConfig
from gateway_kit.chat.meter import MeterTransform
from gateway_kit.cost.costs import Costs
from gateway_kit.cost.usage import Usage
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.sse import SSEEvent

PAYLOAD = {"model": "mock-large", "messages": [{"role": "user", "content": "Hi"}]}
CHUNK = SSEEvent.of_json({"choices": [{"index": 0, "delta": {"content": "a"}}]})


def _cut(usage_so_far: Usage | None) -> Usage:
    """Three chunks streamed, then the stream is closed before its end (the client left)."""
    ctx = RequestContext()
    costs = Costs(GatewayConfig())
    early = None if usage_so_far is None else (lambda: usage_so_far)
    meter = MeterTransform(ctx, costs, "mock-large", PAYLOAD, usage_so_far=early)
    meter.start(200)
    for _ in range(3):
        assert meter.event(CHUNK) == (CHUNK,)
    assert meter.close() == ()
    assert ctx.cost is not None
    return ctx.cost.usage


def test_without_early_counts_the_prompt_and_the_output_are_estimated() -> None:
    usage = _cut(None)
    assert usage.estimated
    assert usage.output_tokens == 3
    assert usage.input_tokens < 20  # "Hi", counted here


def test_the_prompt_reported_early_is_billed_as_reported_and_the_output_as_seen() -> None:
    early = Usage(5000, 1, cache_read_tokens=4000, cache_write_tokens=900, reasoning_tokens=1)
    usage = _cut(early)
    assert usage == Usage(
        5000, 3, cache_read_tokens=4000, cache_write_tokens=900, reasoning_tokens=1, estimated=True
    )


def test_an_early_output_count_above_the_chunks_seen_stands() -> None:
    assert _cut(Usage(100, 40)).output_tokens == 40
