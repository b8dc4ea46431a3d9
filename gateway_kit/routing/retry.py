"""What an upstream failure means for the router, and how long to wait before a retry.

- **Retryable** (the same deployment again, after a backoff; it counts toward its cooldown):
  timeouts, refused or broken connections, 5xx (529 included), 408 and 429, and a stream that
  breaks before its first event.
- **The deployment's fault** (the next deployment at once, no retry; it counts toward its
  cooldown): 401, 403 and 404, an upstream that rejects the gateway's credentials or does not
  know the model it was configured with.
- **The client's fault** (answered as it is, never retried): every other 4xx (a bad
  parameter, a prompt too long for the model...).
"""

from __future__ import annotations

import random
from enum import Enum

from gateway_kit.config import RoutingConfig

__all__ = ["Failure", "backoff", "classify"]


class Failure(Enum):
    RETRYABLE = "retryable"
    DEPLOYMENT = "deployment"
    CLIENT = "client"


_DEPLOYMENT_FAULTS = frozenset({401, 403, 404})


def classify(status: int) -> Failure | None:
    """What an upstream status means; ``None`` for success (below 400). 0 is no response."""
    if status == 0 or status >= 500 or status in (408, 429):
        return Failure.RETRYABLE
    if status in _DEPLOYMENT_FAULTS:
        return Failure.DEPLOYMENT
    if status >= 400:
        return Failure.CLIENT
    return None


def backoff(
    config: RoutingConfig, retry: int, retry_after: float | None, rng: random.Random
) -> float | None:
    """Seconds to wait before retry number ``retry`` (0 is the first); ``None`` when the
    upstream asked for longer than ``max_retry_after_s`` (then try elsewhere instead)."""
    if retry_after is not None:
        return retry_after if retry_after <= config.max_retry_after_s else None
    base: float = min(config.max_backoff_s, config.backoff_s * 2**retry)
    return base / 2 + rng.uniform(0, base / 2)  # jittered, so retries do not stampede
