"""Webhook primitives: signing and verification, and the SSRF guard for customer URLs.

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
from gateway_kit.webhooks.ssrf import (
    Resolver,
    SSRFGuard,
    VettedTarget,
    forbidden_reason,
    guarded_client,
    guarded_transport,
    static_resolver,
)

__all__ = [
    "Resolver",
    "SSRFGuard",
    "VettedTarget",
    "delivery_headers",
    "forbidden_reason",
    "generate_secret",
    "guarded_client",
    "guarded_transport",
    "sign",
    "standard_webhooks_headers",
    "standard_webhooks_key",
    "static_resolver",
    "verify_signature",
    "verify_standard_webhook",
]
