"""``RequestRecord``: what the request log keeps of one request, read off its context.

One record per request that reached the chat or embeddings route, built when it ends (the
answer sent, refused, failed or abandoned by the client): who called, which model was asked
for and which served it, the status and error code the client saw, tokens, cost and savings
in integer micro-USD, latencies, each layer's verdict and the fallbacks taken. Never the
prompt or the answer: a verdict says what a layer decided (PII masking's counts by kind, not
values), and nothing in a record is a key or a secret.

``layers.observe`` builds it from the request's context as the request ends, keeping
references (the layers' verdicts as they are); the log stores it as a compact JSON array
(``encode``, made in batches of ``BATCH``) and the API shows it as an object (``decode``,
``to_dict``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["BATCH", "Decision", "RequestRecord", "Route", "decode", "iso_ms"]

Route = Literal["chat", "embeddings"]

#: Records the log and the metrics take in at once: each holds the requests that end until it
#: has this many (or is read), then handles them in one go. Handled one by one as each request
#: ends, a record cost about twice as much: after a request's work the code and data that
#: handle it are no longer in the CPU's caches (measured at c=32: encoding a record took 16 us
#: there, 8 in a batch, 5 in a tight loop).
BATCH = 64

#: The stored form's version (its first element).
_VERSION = 1
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


class Decision(Protocol):
    """A layer's verdict as a record keeps it (``pipeline.verdicts.Verdict``)."""

    @property
    def action(self) -> str: ...

    def details(self) -> dict[str, Any]: ...


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
    #: Each layer's decision, by concern.
    verdicts: Mapping[str, Decision]
    #: Deployments tried and failed or skipped before the one that served, then retries.
    fallbacks: tuple[str, ...]
    retries: int

    @property
    def cache(self) -> str | None:
        """The cache's action (``hit``, ``semantic``, ``miss``, ``bypass``...), if it ran."""
        verdict = self.verdicts.get("cache")
        return None if verdict is None else verdict.action

    @property
    def day(self) -> str:
        """The UTC day it arrived on, ``2026-11-26``."""
        return time.strftime("%Y-%m-%d", time.gmtime(self.at))

    def encode(self) -> bytes:
        """The stored form: a JSON array, in the order of ``decode``."""
        verdicts = {}
        for concern, verdict in self.verdicts.items():
            details = verdict.details()
            verdicts[concern] = [verdict.action, details] if details else verdict.action
        return _ENCODER.encode(
            [
                _VERSION,
                self.request_id,
                round(self.at, 3),
                self.route,
                self.workspace_id,
                self.key_id,
                self.model,
                self.served_model,
                self.provider,
                self.status,
                self.error_code,
                self.stream,
                self.completed,
                self.input_tokens,
                self.cached_tokens,
                self.output_tokens,
                self.reasoning_tokens,
                self.usage_estimated,
                self.cost_micro_usd,
                self.savings_micro_usd,
                round(self.total_ms, 3),
                None if self.upstream_ms is None else round(self.upstream_ms, 3),
                None if self.ttft_ms is None else round(self.ttft_ms, 3),
                verdicts,
                self.fallbacks,
                self.retries,
            ]
        ).encode()

    def to_dict(self) -> dict[str, Any]:
        """The record as the API shows it."""
        return decode(self.encode())


def decode(raw: bytes) -> dict[str, Any]:
    """A stored record as the API shows it."""
    (
        _version,
        request_id,
        at,
        route,
        workspace_id,
        key_id,
        model,
        served_model,
        provider,
        status,
        error_code,
        stream,
        completed,
        input_tokens,
        cached_tokens,
        output_tokens,
        reasoning_tokens,
        estimated,
        cost,
        savings,
        total_ms,
        upstream_ms,
        ttft_ms,
        verdicts,
        fallbacks,
        retries,
    ) = json.loads(raw)
    return {
        "id": request_id,
        "object": "gateway.request",
        "created_at": iso_ms(at),
        "workspace_id": workspace_id,
        "key_id": key_id,
        "route": route,
        "model": model,
        "served_model": served_model,
        "provider": provider,
        "status": status,
        "error_code": error_code,
        "stream": stream,
        "completed": completed,
        "usage": {
            "input_tokens": input_tokens,
            "cached_tokens": cached_tokens,
            "output_tokens": output_tokens,
            "reasoning_tokens": reasoning_tokens,
            "estimated": estimated,
        },
        "cost_micro_usd": cost,
        "savings_micro_usd": savings,
        "latency_ms": {"total": total_ms, "upstream": upstream_ms, "ttft": ttft_ms},
        "verdicts": {
            concern: {"action": verdict}
            if isinstance(verdict, str)
            else {"action": verdict[0], **verdict[1]}
            for concern, verdict in verdicts.items()
        },
        "fallbacks": fallbacks,
        "retries": retries,
    }
