"""``RequestRecord``: what the request log keeps of one request, read off its context.

One record per request that reached the chat or embeddings route, built when it ends (the
answer sent, refused, failed or abandoned by the client): who called, which model was asked
for and which served it, the status and error code the client saw, tokens, cost and savings
in integer micro-USD, latencies, each layer's verdict and the fallbacks taken. Never the
prompt or the answer: a verdict says what a layer decided (PII masking's counts by kind, not
values), and nothing in a record is a key or a secret.

``layers.observe`` builds it from the request's context as the request ends (cheaply); the
JSON is made when the log is written, off the request path (``RequestRecord.json``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["RequestRecord", "Route", "iso_ms"]

Route = Literal["chat", "embeddings"]


def iso_ms(moment: float) -> str:
    """``2026-11-26T17:40:01.123Z``: UTC, milliseconds (so that the text sorts as the time)."""
    whole = int(moment)
    millis = min(999, int((moment - whole) * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


@dataclass(slots=True)
class RequestRecord:
    """One request, as the request log, the metrics and the log line see it."""

    request_id: str
    #: Unix seconds when the request arrived.
    at: float
    route: Route
    workspace_id: str | None
    key_id: str | None
    #: The model the client asked for; ``served_model`` the one that answered.
    model: str | None
    served_model: str | None
    provider: str | None
    status: int
    error_code: str | None
    stream: bool
    #: Whether the whole response went out (``False``: the client left before its end).
    completed: bool
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    usage_estimated: bool
    cost_micro_usd: int | None
    savings_micro_usd: int
    total_ms: float
    upstream_ms: float | None
    #: Time to the first byte of a streamed answer.
    ttft_ms: float | None
    #: Each layer's decision: ``{"action": ..., <details>}`` by concern.
    verdicts: dict[str, dict[str, Any]]
    #: Deployments tried and failed or skipped before the one that served, then retries.
    fallbacks: tuple[str, ...]
    retries: int

    @property
    def cache(self) -> str | None:
        """The cache's action (``hit``, ``semantic``, ``miss``, ``bypass``...), if it ran."""
        verdict = self.verdicts.get("cache")
        return None if verdict is None else verdict["action"]

    @property
    def day(self) -> str:
        """The UTC day it arrived on, ``2026-11-26``."""
        return time.strftime("%Y-%m-%d", time.gmtime(self.at))

    def to_dict(self) -> dict[str, Any]:
        """The record as the API shows it."""
        return {
            "id": self.request_id,
            "object": "gateway.request",
            "created_at": iso_ms(self.at),
            "workspace_id": self.workspace_id,
            "key_id": self.key_id,
            "route": self.route,
            "model": self.model,
            "served_model": self.served_model,
            "provider": self.provider,
            "status": self.status,
            "error_code": self.error_code,
            "stream": self.stream,
            "completed": self.completed,
            "usage": {
                "input_tokens": self.input_tokens,
                "cached_tokens": self.cached_tokens,
                "output_tokens": self.output_tokens,
                "reasoning_tokens": self.reasoning_tokens,
                "estimated": self.usage_estimated,
            },
            "cost_micro_usd": self.cost_micro_usd,
            "savings_micro_usd": self.savings_micro_usd,
            "latency_ms": {
                "total": round(self.total_ms, 3),
                "upstream": None if self.upstream_ms is None else round(self.upstream_ms, 3),
                "ttft": None if self.ttft_ms is None else round(self.ttft_ms, 3),
            },
            "verdicts": self.verdicts,
            "fallbacks": list(self.fallbacks),
            "retries": self.retries,
        }

    def json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()
