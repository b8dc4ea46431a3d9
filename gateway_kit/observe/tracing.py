"""``Tracing``: OpenTelemetry spans for a request, its layers, the storage and the upstream call.

Off by default (``tracing.enabled``): then nothing here runs at all. On, it uses the
OpenTelemetry API (the ``otel`` extra) and the tracer provider the host application set up
(its SDK and exporter); with none set up the API's spans are no-ops that record nothing.

Spans (the GenAI semantic conventions' names where they have one):

- the request (``SERVER``), named ``chat {model}`` or ``embeddings {model}``: ``gen_ai.*``
  (``operation.name``, ``request.model``, ``response.model``, ``provider.name``,
  ``usage.input_tokens``, ``usage.output_tokens``), ``http.response.status_code``,
  ``error.type``, and the gateway's own ``gateway_kit.*`` (workspace, key, cost, savings, each
  layer's verdict);
- each policy layer's decision (``gateway_kit.layer.{concern}``) and the admission's storage
  step (``gateway_kit.admission``);
- each storage operation (``gateway_kit.storage.{operation}``, ``db.system.name``);
- the upstream call (``CLIENT``), named ``{operation} {model}``, around the router's call
  (retries and fallbacks included, until the answer or a stream's first event): ``gen_ai.*``
  and the number of fallbacks and retries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gateway_kit.config.observe import TracingConfig
from gateway_kit.exceptions import MissingExtraError
from gateway_kit.observe.record import RequestRecord

__all__ = ["TracedStorage", "Tracing"]


class Tracing:
    """The gateway's tracer; ``enabled`` says whether there is anything to do at all."""

    def __init__(self, config: TracingConfig, *, tracer: Any = None) -> None:
        self.enabled = config.enabled or tracer is not None
        self._tracer: Any = tracer
        if self.enabled and tracer is None:
            try:
                from opentelemetry import trace
            except ImportError as exc:
                module = (exc.name or "opentelemetry").partition(".")[0]
                raise MissingExtraError(
                    "tracing.enabled", "true", extra="otel", module=module
                ) from None
            from gateway_kit import __version__

            self._tracer = trace.get_tracer("gateway_kit", __version__)

    @contextmanager
    def span(
        self, name: str, *, kind: str = "INTERNAL", attributes: dict[str, Any] | None = None
    ) -> Iterator[Any]:
        """A span around the block, a child of the current one (its exception recorded)."""
        from opentelemetry.trace import SpanKind

        with self._tracer.start_as_current_span(
            name, kind=getattr(SpanKind, kind), attributes=attributes
        ) as span:
            yield span

    def request_span(self, route: str) -> Any:
        """The request's span: started now, named after its model and described from its
        record when it ends (``describe``)."""
        from opentelemetry.trace import SpanKind

        # Its status comes from the answer (``describe``), not from how the app returned: a
        # client that leaves cancels the request, which is not the gateway's error.
        return self._tracer.start_as_current_span(
            route,  # the GenAI operation name: "chat" or "embeddings"
            kind=SpanKind.SERVER,
            record_exception=False,
            set_status_on_exception=False,
        )

    @staticmethod
    def describe(span: Any, record: RequestRecord) -> None:
        """Name the request's span after its model and set its attributes from its record."""
        operation = record.route
        if record.model:
            span.update_name(f"{operation} {record.model}")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": record.model,
            "gen_ai.response.model": record.served_model,
            "gen_ai.provider.name": record.provider,
            "http.response.status_code": record.status,
            "gateway_kit.request_id": record.request_id,
            "gateway_kit.workspace_id": record.workspace_id,
            "gateway_kit.key_id": record.key_id,
            "gateway_kit.stream": record.stream,
            "gateway_kit.completed": record.completed,
            "gateway_kit.cost_micro_usd": record.cost_micro_usd,
            "gateway_kit.savings_micro_usd": record.savings_micro_usd,
        }
        if record.input_tokens or record.output_tokens:
            attributes["gen_ai.usage.input_tokens"] = record.input_tokens
            attributes["gen_ai.usage.output_tokens"] = record.output_tokens
        if record.ttft_ms is not None:
            attributes["gateway_kit.time_to_first_token_ms"] = record.ttft_ms
        for layer, verdict in record.verdicts.items():
            attributes[f"gateway_kit.verdict.{layer}"] = verdict.action
        if record.fallbacks:
            attributes["gateway_kit.fallbacks"] = list(record.fallbacks)
        if record.error_code is not None:
            attributes["error.type"] = record.error_code
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if record.status >= 500 or record.error_code == "upstream_stream_error":
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, record.error_code or str(record.status)))


class TracedStorage:
    """A ``Storage`` whose every operation is a span (``gateway_kit.storage.{operation}``);
    the rest is the wrapped backend's."""

    def __init__(self, storage: Any, tracing: Tracing) -> None:
        self._storage = storage
        self._tracing = tracing
        self._system = type(storage).__name__.removesuffix("Storage").lower() or "custom"

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._storage, name)
        if name.startswith("_") or name in ("aclose", "now") or not callable(attribute):
            return attribute
        return self._traced(name, attribute)

    def _traced(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        tracing, system = self._tracing, self._system

        @functools.wraps(call)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            with tracing.span(
                f"gateway_kit.storage.{name}",
                kind="CLIENT",
                attributes={"db.system.name": system, "db.operation.name": name},
            ):
                return await call(*args, **kwargs)

        return traced

    async def __aenter__(self) -> TracedStorage:
        await self._storage.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._storage.__aexit__(*exc)
