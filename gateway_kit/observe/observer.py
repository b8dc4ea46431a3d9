"""``Observer``: where a finished request goes to be recorded, counted and logged.

``ObserveMiddleware`` hands it the record of each request of the chat and embeddings routes
as it ends; the ``Observer`` gives it to the request log, the metrics (when enabled) and the
log line. Nothing here does I/O on the request's path.
"""

from __future__ import annotations

from gateway_kit.observe.logs import RequestLines
from gateway_kit.observe.metrics import Metrics
from gateway_kit.observe.record import RequestRecord
from gateway_kit.observe.requestlog import RequestLog

__all__ = ["Observer"]


class Observer:
    def __init__(
        self,
        requests: RequestLog,
        *,
        lines: RequestLines,
        metrics: Metrics | None = None,
    ) -> None:
        self.requests = requests
        self.lines = lines
        self.metrics = metrics

    def request_done(self, record: RequestRecord) -> None:
        """Keep, count and log the record of a request that just ended."""
        self.requests.add(record)
        if self.metrics is not None:
            self.metrics.observe(record)
        self.lines.emit(record)
