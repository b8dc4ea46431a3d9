"""Events: the typed payloads of spec section 6 and the bus layers publish them to.

- ``models``: one pydantic model per event type, the envelope, and their field formats;
- ``bus``: ``EventBus`` (subscribers such as the webhook emitter) and ``EventRecorder``.
"""

from __future__ import annotations

from gateway_kit.events.bus import EventBus, EventRecorder
from gateway_kit.events.models import (
    EVENT_TYPES,
    BudgetAlertData,
    Event,
    EventData,
    EventType,
    GuardianBlockData,
    KeyRotatedData,
    LowBalanceData,
    PaymentFailedData,
    PaymentSucceededData,
    SecurityEventData,
    WebhookStaleData,
    event_matches,
    format_timestamp,
    micro_usd,
    normalize_event_filter,
    sample_event,
    sha256_ref,
    usd,
)

__all__ = [
    "EVENT_TYPES",
    "BudgetAlertData",
    "Event",
    "EventBus",
    "EventData",
    "EventRecorder",
    "EventType",
    "GuardianBlockData",
    "KeyRotatedData",
    "LowBalanceData",
    "PaymentFailedData",
    "PaymentSucceededData",
    "SecurityEventData",
    "WebhookStaleData",
    "event_matches",
    "format_timestamp",
    "micro_usd",
    "normalize_event_filter",
    "sample_event",
    "sha256_ref",
    "usd",
]
