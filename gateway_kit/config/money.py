"""Cost accounting, Budget Control and the payment processor's endpoint."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from gateway_kit.config.base import Mode, OnError, PeriodUnit, _Config

__all__ = ["BudgetConfig", "CostConfig", "PaymentsConfig"]


class PaymentsConfig(_Config):
    """The payment processor's webhook endpoint (``POST /v1/payments/stripe``)."""

    #: The endpoint's signing secret (``whsec_...``) from the Stripe dashboard. Unset: the
    #: endpoint answers 404.
    stripe_webhook_secret: SecretStr | None = None
    #: How old (or how far in the future) a signed event may be, in seconds.
    stripe_tolerance_s: int = Field(default=300, ge=1, le=3600)


class CostConfig(_Config):
    """Cost accounting: the price table's baseline for savings."""

    #: Savings are measured against this model: today's top-tier (flagship) model, priced
    #: from the table (or ``models[].price`` when it is one of ours).
    flagship_model: str = "gpt-5.1"


class BudgetConfig(_Config):
    """Budget Control: spend caps per period with warn, downgrade and block verdicts."""

    mode: Mode = Mode.ENFORCE
    period: PeriodUnit = "month"
    #: Fractions of the cap at which the verdict becomes warn, downgrade and block.
    warn_at: float = Field(default=0.8, gt=0, le=1)
    downgrade_at: float = Field(default=0.9, gt=0, le=1)
    block_at: float = Field(default=1.0, gt=0, le=1)
    #: When storage fails: ``closed`` answers 503 (money is at stake), ``open`` serves uncounted.
    on_error: OnError = OnError.CLOSED
    #: Output tokens assumed for a model before any of its responses has been seen.
    default_output_tokens: int = Field(default=512, ge=1)

    @model_validator(mode="after")
    def _check_order(self) -> BudgetConfig:
        if not self.warn_at <= self.downgrade_at <= self.block_at:
            raise ValueError("thresholds must satisfy warn_at <= downgrade_at <= block_at")
        return self
