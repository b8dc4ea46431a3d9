"""Plans, API keys and the request limits."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import Field

from gateway_kit.config.base import Mode, OnError, PeriodUnit, _Config

__all__ = ["AuthConfig", "LimitsConfig", "PlanConfig", "default_plans"]


class PlanConfig(_Config):
    """What a workspace on this plan may use."""

    #: Requests included per quota period.
    included_requests: int = Field(ge=0)
    #: Burst limit: requests per minute, and the size of an instant burst.
    burst_limit_rpm: int = Field(ge=1)
    #: ``block``: 402 once the included requests are used; ``allow``: serve them, marked.
    overage: Literal["block", "allow"] = "block"
    #: The default spend cap per budget period, USD; a workspace may set its own. None: no cap.
    budget_usd: Decimal | None = Field(default=None, ge=0)
    #: Guardian's rules for this plan: rule name to the fields it changes, e.g.
    #: ``{"repeat": {"block_at": 30}}`` (checked against ``guardian.rules``).
    guardian: dict[str, dict[str, Any]] = Field(default_factory=dict)


def default_plans() -> dict[str, PlanConfig]:
    return {
        "starter": PlanConfig(included_requests=10_000, burst_limit_rpm=60),
        "scale": PlanConfig(included_requests=1_000_000, burst_limit_rpm=600),
    }


class AuthConfig(_Config):
    """API keys: ``Authorization: Bearer <key>``."""

    mode: Literal["enforce", "off"] = "enforce"
    #: The bound on how long a change made elsewhere goes unseen here. Verified keys, plans,
    #: budget caps and the billing switch are cached per process and kept current by a change
    #: feed in storage, polled every ``cache_ttl_s / 4`` (one storage read per process): a key
    #: revoked or rotated on another instance (or by the CLI), or a plan, cap or billing change,
    #: takes effect here within this time, at once on the instance that made it. Cached entries
    #: are not trusted once the last good poll is this old (storage down: every request asks
    #: storage). 0 caches nothing and asks storage every time.
    cache_ttl_s: float = Field(default=5.0, ge=0, le=3600)
    #: What a key made before key scopes existed may do: ``inference`` (model calls and
    #: ``/v1/me`` only; the safe default) or ``admin`` (everything, as before scopes: while a
    #: deployment moves its automation to keys made with a role).
    unscoped_keys: Literal["inference", "admin"] = "inference"


class LimitsConfig(_Config):
    """The burst limit and the included requests per period."""

    mode: Mode = Mode.ENFORCE
    period: PeriodUnit = "month"
    #: When storage fails: ``open`` serves the request uncounted, ``closed`` answers 503.
    on_error: OnError = OnError.OPEN
