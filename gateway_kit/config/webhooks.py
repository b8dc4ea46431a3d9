"""Webhook delivery: the schedule, the deadline, the SSRF policy and the worker."""

from __future__ import annotations

from pydantic import Field, model_validator

from gateway_kit.config.base import _Config

__all__ = ["WebhooksConfig"]


class WebhooksConfig(_Config):
    """Webhook delivery: the schedule, the deadline, the SSRF policy and the worker."""

    #: Attempts per delivery, the first immediate (spec: 5).
    max_attempts: int = Field(default=5, ge=1, le=20)
    #: Seconds before each retry, in order (spec: 1 s, 5 s, 30 s, 5 min, 30 min).
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 30.0, 300.0, 1800.0)
    #: Total deadline of one attempt, connect to status line (spec: 5 s).
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    #: Admit http:// URLs (addresses are still checked). For development only.
    allow_http: bool = False
    #: Operator allow-list past the SSRF guard: CIDRs (``127.0.0.0/8``) or exact host names.
    allow: tuple[str, ...] = ()
    #: Run the delivery worker inside the gateway (``gateway-kit worker`` runs it alone).
    worker: bool = True
    #: Deliveries in flight per worker, and per webhook (one dead endpoint cannot starve
    #: the others).
    concurrency: int = Field(default=32, ge=1, le=1000)
    per_webhook_concurrency: int = Field(default=4, ge=1, le=100)
    #: How often an idle worker looks for due deliveries.
    poll_interval_s: float = Field(default=0.5, gt=0, le=60)
    #: How long a worker owns a claimed delivery; must exceed ``timeout_s``.
    lease_s: float = Field(default=30.0, gt=0)
    max_webhooks_per_workspace: int = Field(default=20, ge=1, le=1000)
    #: Attempts kept in each webhook's delivery log.
    log_size: int = Field(default=1000, ge=10, le=100_000)

    @model_validator(mode="after")
    def _check_schedule(self) -> WebhooksConfig:
        if len(self.retry_backoff_s) < self.max_attempts - 1:
            raise ValueError(
                f"retry_backoff_s needs at least {self.max_attempts - 1} values for "
                f"max_attempts = {self.max_attempts}"
            )
        if any(delay < 0 for delay in self.retry_backoff_s):
            raise ValueError("retry_backoff_s: delays cannot be negative")
        if self.lease_s <= self.timeout_s:
            raise ValueError("lease_s must be longer than timeout_s")
        return self
