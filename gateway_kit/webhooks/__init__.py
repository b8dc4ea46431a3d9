"""Webhook primitives: signing and verification of deliveries.

The event catalogue lives in ``gateway_kit.events``.
"""

from __future__ import annotations

from gateway_kit.webhooks.signing import (
    delivery_headers,
    generate_secret,
    sign,
    standard_webhooks_headers,
    standard_webhooks_key,
    verify_signature,
    verify_standard_webhook,
)

__all__ = [
    "delivery_headers",
    "generate_secret",
    "sign",
    "standard_webhooks_headers",
    "standard_webhooks_key",
    "verify_signature",
    "verify_standard_webhook",
]
