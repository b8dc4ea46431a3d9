"""OpenTelemetry spans: the request, each layer, the admission, the storage and the upstream
call, with the GenAI conventions' attribute names; none at all when tracing is off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.fakes import COMPLETION, provisioned

pytestmark = pytest.mark.anyio

PRICED = [{"name": "gpt-fake", "provider": "up", "price_as": "gpt-4o-mini"}]


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, Any]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield spans, provider.get_tracer("test")
    provider.shutdown()


@pytest.fixture
def given_tracer(
    exporter: tuple[InMemorySpanExporter, Any], monkeypatch: pytest.MonkeyPatch
) -> InMemorySpanExporter:
    """Every Gateway made in the test gets the exporter's tracer (``Gateway(tracer=...)``)."""
    import gateway_kit.gateway as module

    spans, tracer = exporter
    made = module.Gateway.__init__
    monkeypatch.setattr(
        module.Gateway, "__init__", lambda self, *a, **k: made(self, *a, **k, tracer=tracer)
    )
    return spans


@pytest.fixture
def global_tracer(
    exporter: tuple[InMemorySpanExporter, Any], monkeypatch: pytest.MonkeyPatch
) -> InMemorySpanExporter:
    """OpenTelemetry's global tracer is the exporter's (as a host's SDK set-up makes it)."""
    from opentelemetry import trace

    spans, tracer = exporter
    monkeypatch.setattr(trace, "get_tracer", lambda *args, **kwargs: tracer)
    return spans


async def test_a_request_is_a_tree_of_spans_named_by_the_genai_conventions(
    given_tracer: InMemorySpanExporter,
) -> None:
    spans = given_tracer
    async with provisioned("scale", models=PRICED) as env:
        env.upstream.json_body = {
            **COMPLETION,
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
        spans.clear()
        response = await env.chat()
        assert response.status == 200
    finished = {span.name: span for span in spans.get_finished_spans()}
    request = finished["chat gpt-fake"]
    assert request.kind == SpanKind.SERVER
    attributes = dict(request.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "gpt-fake"
    assert attributes["gen_ai.response.model"] == "gpt-fake"
    assert attributes["gen_ai.provider.name"] == "up"
    assert attributes["gen_ai.usage.input_tokens"] == 20
    assert attributes["gen_ai.usage.output_tokens"] == 5
    assert attributes["http.response.status_code"] == 200
    assert attributes["gateway_kit.request_id"] == response.headers["x-request-id"]
    assert attributes["gateway_kit.workspace_id"] == env.workspace_id
    assert attributes["gateway_kit.verdict.limits"] == "pass"
    assert attributes["gateway_kit.cost_micro_usd"] > 0
    upstream = [
        s
        for s in spans.get_finished_spans()
        if s.kind == SpanKind.CLIENT and s.name == "chat gpt-fake"
    ]
    assert len(upstream) == 1
    assert dict(upstream[0].attributes or {})["gen_ai.provider.name"] == "up"
    names = set(finished)
    assert {"gateway_kit.layer.auth", "gateway_kit.layer.limits", "gateway_kit.admission"} <= names
    assert "gateway_kit.storage.incr_many" in names
    # Every span of the request is in the request's trace, under its span.
    trace_id = request.context.trace_id
    inside = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    assert len(inside) >= 5
    storage = finished["gateway_kit.storage.incr_many"]
    assert dict(storage.attributes or {})["db.system.name"] == "memory"
    assert all(s.parent is not None for s in inside if s is not request)


async def test_an_upstream_failure_marks_the_request_span_as_an_error(
    given_tracer: InMemorySpanExporter,
) -> None:
    spans = given_tracer
    async with provisioned("scale", routing={"retries": 0}) as env:
        env.upstream.status = 500
        assert (await env.chat()).status == 502
    [request] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert request.status.status_code == StatusCode.ERROR
    assert dict(request.attributes or {})["error.type"] == "upstream_unavailable"
    # The upstream call's span says what was tried, as the request's does (it said nothing
    # when every attempt failed, and gave a count where the request's span gives the list).
    [call] = [
        s
        for s in spans.get_finished_spans()
        if s.kind == SpanKind.CLIENT and s.name == "chat gpt-fake"
    ]
    attributes = dict(call.attributes or {})
    assert attributes["gateway_kit.retries"] == 0
    assert list(attributes["gateway_kit.fallbacks"]) == ["gpt-fake@up=500"]
    assert list(attributes["gateway_kit.fallbacks"]) == list(
        dict(request.attributes or {})["gateway_kit.fallbacks"]
    )


async def test_no_span_is_made_when_tracing_is_off(global_tracer: InMemorySpanExporter) -> None:
    spans = global_tracer
    async with provisioned("scale") as env:
        assert not env.gateway.tracing.enabled
        assert (await env.chat()).status == 200
    assert spans.get_finished_spans() == ()


async def test_tracing_enabled_uses_the_global_tracer_provider(
    global_tracer: InMemorySpanExporter,
) -> None:
    spans = global_tracer
    async with provisioned("scale", tracing={"enabled": True}) as env:
        assert (await env.chat()).status == 200
    assert any(s.kind == SpanKind.SERVER for s in spans.get_finished_spans())
