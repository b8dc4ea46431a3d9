"""Plans, API keys and the request limits."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

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


def default_plans() -> dict[str, PlanConfig]:
    return {
        "starter": PlanConfig(included_requests=10_000, burst_limit_rpm=60),
        "scale": PlanConfig(included_requests=1_000_000, burst_limit_rpm=600),
    }


class AuthConfig(_Config):
    """API keys: ``Authorization: Bearer <key>``."""

    mode: Literal["enforce", "off"] = "enforce"
    #: Seconds a verified key is trusted without asking storage again. A key revoked on another
    #: instance (or by the CLI) stops working here within this time; 0 asks storage every time.
    cache_ttl_s: float = Field(default=5.0, ge=0)


class LimitsConfig(_Config):
    """The burst limit and the included requests per period."""

    mode: Mode = Mode.ENFORCE
    period: PeriodUnit = "month"
    #: When storage fails: ``open`` serves the request uncounted, ``closed`` answers 503.
    on_error: OnError = OnError.OPEN
