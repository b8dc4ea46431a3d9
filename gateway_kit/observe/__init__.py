"""Observability: the request log, usage totals, log lines, Prometheus metrics and traces.

A request of the chat or embeddings routes, once it ends, becomes a ``RequestRecord``
(``record``); ``ObserveMiddleware`` hands it to the ``Gateway``'s ``Observer``, which adds it
to the ``RequestLog`` (written off the request path, with ``UsageTotals`` per day and model),
to the ``Metrics`` (``/metrics``) and to the log lines (``logs``).
"""

from __future__ import annotations

from gateway_kit.observe.logs import JSONFormatter, RequestLines
from gateway_kit.observe.metrics import Metrics
from gateway_kit.observe.observer import Observer
from gateway_kit.observe.record import RequestRecord
from gateway_kit.observe.requestlog import RequestFilter, RequestLog, RequestPage
from gateway_kit.observe.usage import UsageRow, UsageTotals

__all__ = [
    "JSONFormatter",
    "Metrics",
    "Observer",
    "RequestFilter",
    "RequestLines",
    "RequestLog",
    "RequestPage",
    "RequestRecord",
    "UsageRow",
    "UsageTotals",
]
