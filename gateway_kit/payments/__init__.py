"""Payment processors' webhooks: verifying their signatures and reading their payment events.

Pure code, no ASGI and no storage; the wallet and the endpoint build on it.
"""

from __future__ import annotations

from gateway_kit.payments.stripe import (
    PaymentNotice,
    parse_payment,
    sign_stripe_payload,
    verify_stripe_event,
)

__all__ = ["PaymentNotice", "parse_payment", "sign_stripe_payload", "verify_stripe_event"]
