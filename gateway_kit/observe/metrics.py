"""``Metrics``: the gateway's Prometheus metrics, served at ``GET /metrics`` (``metrics`` extra).

Requests add to plain dictionaries as they end (a few dictionary updates: no lock, no label
validation per request); ``prometheus-client`` builds the exposition from them when scraped,
through a collector on a registry of this ``Gateway``'s own. Labels are bounded: models and
providers are the configured ones (a name nobody configured counts as ``(none)``), statuses
are HTTP codes, verdicts are the layers' actions; the workspace id is a label only when
``metrics.workspace_label`` is on.

Families (all prefixed ``gateway_``): ``requests_total`` (route, model, provider, status,
``decided_by``: the refusing layer, ``cache``, ``upstream`` or ``gateway``),
``request_duration_seconds`` and ``time_to_first_token_seconds`` (histograms by route and
model), ``verdicts_total`` (layer, action), ``tokens_total`` (model, kind),
``cost_usd_total``, ``savings_usd_total`` and ``overspend_usd_total`` (model),
``cache_hits_total`` (kind), ``webhook_attempts_total`` (outcome), ``webhook_queue_depth`` (state),
``storage_errors_total`` (operation), ``request_log_pending`` and ``request_log_dropped_total``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Literal

from gateway_kit.config.observe import MetricsConfig
from gateway_kit.exceptions import MissingExtraError, StorageError
from gateway_kit.observe.record import BATCH, RequestRecord

__all__ = ["DURATION_BUCKETS", "TTFT_BUCKETS", "Metrics", "decided_by"]

NO_LABEL = "(none)"
_Read = Callable[[], dict[Any, float]]
#: Seconds: a gateway answers from its cache in a millisecond, a model in up to minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


def decided_by(record: RequestRecord) -> str:
    """Who answered the request: the layer that refused it (``limits``, ``budget``,
    ``guardian``, ``pii``, ``auth``...), ``cache`` for an answer from the cache, ``upstream``
    for one that went to a model (answered or failed there), ``gateway`` for a request refused
    before any layer decided (a malformed body, an unknown model), ``client`` for one whose
    client left before any answer (status 0: it was counted as the gateway's)."""
    cache = None
    for concern, verdict in record.verdicts.items():
        if getattr(verdict, "refusal", None) is not None:
            return concern
        if concern == "cache":
            cache = verdict.action
    if cache in ("hit", "semantic"):
        return "cache"
    if record.status == 0:
        return "client"
    return "upstream" if "routing" in record.verdicts else "gateway"


class Metrics:
    """What ``/metrics`` reports; ``observe`` each finished request."""

    def __init__(
        self,
        config: MetricsConfig,
        *,
        models: Iterable[str] = (),
        providers: Iterable[str] = (),
    ) -> None:
        try:
            import prometheus_client  # noqa: F401
        except ImportError as exc:
            module = (exc.name or "prometheus_client").partition(".")[0]
            raise MissingExtraError(
                "metrics.enabled", "true", extra="metrics", module=module
            ) from None
        self._by_workspace = config.workspace_label
        self._models = frozenset(models)
        self._providers = frozenset(providers)
        self.requests: Counter[tuple[str, ...]] = Counter()
        self.verdicts: Counter[tuple[str, str]] = Counter()
        self.tokens: Counter[tuple[str, str]] = Counter()
        self.cost: Counter[str] = Counter()
        self.savings: Counter[str] = Counter()
        self.overspend: Counter[str] = Counter()
        self.cache_hits: Counter[str] = Counter()
        self.webhook_attempts: Counter[str] = Counter()
        self._durations: dict[tuple[str, str], _Histogram] = {}
        self._ttft: dict[tuple[str, str], _Histogram] = {}
        #: Figures read when scraped, by name: (counter or gauge, help, label names, a
        #: function of no arguments giving ``{label values: value}``).
        self._sources: dict[str, tuple[str, str, tuple[str, ...], _Read]] = {}
        #: Figures that take I/O to read (the storage's), read before each scrape, by name:
        #: the metrics outlive a gateway's restarts, and each start registers its own.
        self._refreshers: dict[str, Callable[[], Awaitable[None]]] = {}
        #: Requests finished and not counted yet (``observe``).
        self._pending: list[RequestRecord] = []

    def _model(self, name: str | None) -> str:
        return name if name is not None and name in self._models else NO_LABEL

    def observe(self, record: RequestRecord) -> None:
        """Count a finished request: in batches of ``BATCH`` (see ``record.BATCH``), and all
        of them before a scrape."""
        pending = self._pending
        pending.append(record)
        if len(pending) >= BATCH:
            self._count()

    def _count(self) -> None:
        pending, self._pending = self._pending, []
        for record in pending:
            self._count_one(record)

    def _count_one(self, record: RequestRecord) -> None:
        model = self._model(record.served_model or record.model)
        provider = record.provider if record.provider in self._providers else NO_LABEL
        labels: tuple[str, ...] = (
            record.route,
            model,
            provider,
            str(record.status),
            decided_by(record),
        )
        if self._by_workspace:
            labels += (record.workspace_id or NO_LABEL,)
        self.requests[labels] += 1
        key = (record.route, model)
        histogram = self._durations.get(key)
        if histogram is None:
            histogram = self._durations[key] = _Histogram(DURATION_BUCKETS)
        histogram.observe(record.total_ms / 1000)
        if record.ttft_ms is not None:
            histogram = self._ttft.get(key)
            if histogram is None:
                histogram = self._ttft[key] = _Histogram(TTFT_BUCKETS)
            histogram.observe(record.ttft_ms / 1000)
        verdicts = self.verdicts
        for layer, verdict in record.verdicts.items():
            verdicts[(layer, verdict.action)] += 1
        cache = record.cache
        if cache in ("hit", "semantic"):
            self.cache_hits["exact" if cache == "hit" else "semantic"] += 1
        elif record.input_tokens or record.output_tokens:
            tokens = self.tokens
            tokens[(model, "input")] += record.input_tokens
            tokens[(model, "cached")] += record.cached_tokens
            tokens[(model, "output")] += record.output_tokens
            tokens[(model, "reasoning")] += record.reasoning_tokens
        if record.cost_micro_usd:
            self.cost[model] += record.cost_micro_usd
        saved = record.savings_micro_usd
        if saved > 0:
            self.savings[model] += saved
        elif saved < 0:  # a model pricier than the flagship: a counter never goes down
            self.overspend[model] -= saved

    def webhook_attempt(self, outcome: str) -> None:
        """A webhook delivery attempt ended: ``success``, ``retry`` (a failure retried later),
        ``held`` (a retryable failure with no attempt left: the delivery is held), ``rejected``
        (a 4xx that ends the delivery)."""
        self.webhook_attempts[outcome] += 1

    def read_at_scrape(
        self,
        name: str,
        kind: Literal["counter", "gauge"],
        help_text: str,
        labels: tuple[str, ...],
        read: _Read,
    ) -> None:
        """Figures kept elsewhere, read when scraped: ``read()`` gives ``{label values:
        value}`` (a tuple of values, or one value for one label, or ``()`` for none)."""
        self._sources[name] = (kind, help_text, labels, read)

    def read_before_scrape(
        self,
        name: str,
        kind: Literal["counter", "gauge"],
        help_text: str,
        labels: tuple[str, ...],
        read: Callable[[], Awaitable[dict[Any, float]]],
    ) -> None:
        """Like ``read_at_scrape`` for figures read with I/O: ``refresh`` awaits ``read()``
        before each scrape (a failed read keeps the last figures)."""
        latest: dict[Any, float] = {}

        async def refresh() -> None:
            try:
                fresh = await read()
            except StorageError:
                return
            latest.clear()
            latest.update(fresh)

        self._refreshers[name] = refresh
        self.read_at_scrape(name, kind, help_text, labels, lambda: latest)

    async def refresh(self) -> None:
        """Read the figures that take I/O (``/metrics`` calls it before building the page)."""
        for refresh in self._refreshers.values():
            await refresh()

    # -- exposition --------------------------------------------------------------------------

    def registry(self) -> Any:
        """A ``prometheus_client`` registry holding these metrics (and nothing else)."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return registry

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in the text exposition format, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry()), CONTENT_TYPE_LATEST

    def families(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        self._count()
        request_labels = ["route", "model", "provider", "status", "decided_by"]
        if self._by_workspace:
            request_labels.append("workspace")
        family = CounterMetricFamily(
            "gateway_requests",
            "Requests of the inference routes, by outcome.",
            labels=request_labels,
        )
        for labels, count in sorted(self.requests.items()):
            family.add_metric(list(labels), count)
        yield family
        for name, help_text, histograms in (
            (
                "gateway_request_duration_seconds",
                "Time from request to the end of the response.",
                self._durations,
            ),
            (
                "gateway_time_to_first_token_seconds",
                "Time to the first byte of a streamed answer.",
                self._ttft,
            ),
        ):
            hist = HistogramMetricFamily(name, help_text, labels=["route", "model"])
            for labels, histogram in sorted(histograms.items()):
                hist.add_metric(list(labels), histogram.buckets(), histogram.total)
            yield hist
        family = CounterMetricFamily(
            "gateway_verdicts", "Each layer's decisions.", labels=["layer", "action"]
        )
        for labels, count in sorted(self.verdicts.items()):
            family.add_metric(list(labels), count)
        yield family
        family = CounterMetricFamily(
            "gateway_tokens", "Upstream tokens by model and kind.", labels=["model", "kind"]
        )
        for labels, count in sorted(self.tokens.items()):
            family.add_metric(list(labels), count)
        yield family
        for name, help_text, counts in (
            ("gateway_cost_usd", "What the requests cost upstream, in USD.", self.cost),
            ("gateway_savings_usd", "Savings against the flagship model, in USD.", self.savings),
            (
                "gateway_overspend_usd",
                "What requests cost above the flagship model's price, in USD.",
                self.overspend,
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=["model"])
            for model, micro in sorted(counts.items()):
                family.add_metric([model], micro / 1_000_000)
            yield family
        family = CounterMetricFamily(
            "gateway_cache_hits", "Answers served from the cache.", labels=["kind"]
        )
        for kind, count in sorted(self.cache_hits.items()):
            family.add_metric([kind], count)
        yield family
        family = CounterMetricFamily(
            "gateway_webhook_attempts", "Webhook delivery attempts.", labels=["outcome"]
        )
        for outcome, count in sorted(self.webhook_attempts.items()):
            family.add_metric([outcome], count)
        yield family
        for name, (kind, help_text, labels, read) in sorted(self._sources.items()):
            made = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            source = made(name, help_text, labels=list(labels))
            for values, value in sorted(read().items()):
                source.add_metric(list(values) if isinstance(values, tuple) else [values], value)
            yield source


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        return self._metrics.families()
