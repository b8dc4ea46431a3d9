"""How the router retries, falls back and cools deployments down, and the ``auto`` models."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from gateway_kit.config.base import NAME_PATTERN, _Config

__all__ = ["AutoModelConfig", "ComplexityConfig", "RoutingConfig"]


class ComplexityConfig(_Config):
    """When a prompt counts as complex: then ``auto`` picks among ``models`` only."""

    #: Complex from this many prompt tokens on.
    min_prompt_tokens: int | None = Field(default=None, ge=1)
    #: Complex when the last user message matches one of these (case-insensitive regexes).
    patterns: tuple[str, ...] = ()
    #: The models a complex prompt may go to (cheapest first that fits, as usual).
    models: tuple[str, ...] = Field(min_length=1)

    @field_validator("patterns")
    @classmethod
    def _compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
        return patterns


class AutoModelConfig(_Config):
    """A model name that picks, per request, the cheapest of ``models`` that can serve it."""

    name: str = Field(pattern=NAME_PATTERN)
    #: The candidates (chat models of this configuration).
    models: tuple[str, ...] = Field(min_length=1)
    #: An optional rule sending complex prompts to stronger models.
    complexity: ComplexityConfig | None = None
    #: Room kept for the answer when checking a model's context window.
    reserve_output_tokens: int = Field(default=1024, ge=0)


class RoutingConfig(_Config):
    """Retries, backoff and the per-deployment circuit breaker."""

    #: Retries of one deployment after its first failed attempt, before the next deployment.
    retries: int = Field(default=1, ge=0, le=10)
    #: The first retry's backoff in seconds, doubled each retry (with full jitter).
    backoff_s: float = Field(default=0.25, ge=0, le=60)
    max_backoff_s: float = Field(default=4.0, ge=0, le=300)
    #: An upstream's ``Retry-After`` is honoured up to this many seconds; a longer one moves
    #: on to the next deployment at once.
    max_retry_after_s: float = Field(default=10.0, ge=0, le=600)
    #: A deployment failing this many times within ``fail_window_s`` cools down.
    allowed_fails: int = Field(default=3, ge=1, le=1_000_000)
    #: At most a day, as ``cooldown_s``: both are storage TTLs, which must be finite.
    fail_window_s: float = Field(default=60.0, gt=0, le=86_400)
    #: Seconds a deployment is skipped; then one request probes it (half-open).
    cooldown_s: float = Field(default=30.0, gt=0, le=86_400)
    #: How stale this instance's view of other instances' cooldowns may be: the view of every
    #: deployment is refreshed in the background this often (one storage read).
    refresh_s: float = Field(default=1.0, ge=0.05, le=60)
    #: The ``auto`` models (smart routing).
    auto: tuple[AutoModelConfig, ...] = ()
