"""The webhook event catalogue (spec section 6): one typed data model per event type.

    event = Event.create(BudgetAlertData(...), workspace_id="ws_123")
    body = event.to_bytes()  # stored once, sent byte for byte on every attempt

The envelope is spec 6.1 plus ``event_id`` (DESIGN.md section 5), in a fixed field order:
``event``, ``event_id``, ``workspace_id``, ``timestamp``, ``data``. Timestamps are ISO 8601 UTC
with millisecond precision and a trailing ``Z``. USD amounts are JSON numbers built from the
gateway's integer micro-USD with ``usd()``, so they are exact to the micro-dollar.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    model_validator,
)

__all__ = [
    "EVENT_TYPES",
    "BudgetAlertData",
    "Event",
    "EventData",
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

EventType = Literal[
    "guardian.block",
    "budget.alert",
    "payment.succeeded",
    "payment.failed",
    "key.rotated",
    "account.low_balance",
    "security.event",
    "webhook.stale",
]
#: The event types of spec 6.2, in the spec's order.
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)
_EVENT_TYPE_BY_NAME: dict[str, EventType] = {name: name for name in EVENT_TYPES}


# -- field types --------------------------------------------------------------------------------


def usd(micro: int) -> float:
    """US dollars from integer micro-USD (the gateway's internal unit) for a payload.

    ``micro / 10**6`` is the double nearest the decimal, and JSON writes the shortest text that
    reads back as that double: the decimal itself, exact below a billion dollars.
    """
    return micro / 1_000_000


def micro_usd(amount: float) -> int:
    """Integer micro-USD from a payload amount (the inverse of ``usd``)."""
    return round(amount * 1_000_000)


def format_timestamp(when: datetime) -> str:
    """``2026-01-02T03:04:05.678Z``: UTC, milliseconds, trailing ``Z``."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256_ref(content: bytes) -> str:
    """``sha256:<hex>`` of ``content``, the form of ``request_hash`` and ``prompt_hash``."""
    return "sha256:" + hashlib.sha256(content).hexdigest()


def _utc_millis(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    value = value.astimezone(UTC)
    # Truncated to what the JSON carries, so an event equals its own round trip.
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _to_micro_dollar(value: float) -> float:
    return usd(micro_usd(value))


Timestamp = Annotated[
    datetime, AfterValidator(_utc_millis), PlainSerializer(format_timestamp, return_type=str)
]
#: A USD amount rounded to the micro-dollar (build it with ``usd(micro)``).
USD = Annotated[float, AfterValidator(_to_micro_dollar)]
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _unicode_text(value: Any) -> Any:
    # A lone surrogate is no Unicode text: an event holding one could be neither serialized nor
    # sent. The API refuses them, but a name stored before it did may hold one, and the event
    # about it (webhook.stale) must not be lost for that: U+FFFD stands in.
    if isinstance(value, str) and not value.isascii():
        return _LONE_SURROGATE.sub("\ufffd", value)
    return value


Text = Annotated[
    str, BeforeValidator(_unicode_text), StringConstraints(min_length=1, max_length=200)
]
Sha256Ref = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
KeyId = Annotated[str, StringConstraints(pattern=r"^kid_[A-Za-z0-9_-]{1,64}$")]
EventId = Annotated[str, StringConstraints(pattern=r"^evt_[A-Za-z0-9_-]{26,64}$")]
WorkspaceId = Annotated[str, StringConstraints(pattern=r"^ws_[A-Za-z0-9_-]{1,64}$")]


def new_event_id() -> str:
    """``evt_`` and 32 random hex digits."""
    return "evt_" + os.urandom(16).hex()


# -- data models --------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Data(_Model):
    event_type: ClassVar[EventType]


class GuardianBlockData(_Data):
    """A Guardian rule blocked or throttled a request: spec 6.3's fields, then two of ours."""

    event_type: ClassVar[EventType] = "guardian.block"
    rule: Text
    key_id: KeyId
    request_hash: Sha256Ref
    #: ``blocked`` or ``throttled`` (in monitor mode: what enforcing would have done).
    action: Text
    threshold: int
    observed: int
    #: ``enforce``, or ``monitor`` when the rule only said what it would have done.
    mode: Literal["enforce", "monitor"] = "enforce"
    #: What happened, for people: ``7 identical requests within 60 s (the limit is 6)``.
    message: str = Field(default="", max_length=500)


class BudgetAlertData(_Data):
    """Budget Control crossed a verdict threshold of the period's cap."""

    event_type: ClassVar[EventType] = "budget.alert"
    cap_usd: USD = Field(ge=0)
    spent_usd: USD = Field(ge=0)
    verdict: Literal["warn", "downgrade", "block"]
    #: The threshold crossed, in percent of the cap.
    threshold_pct: int = Field(ge=0)
    period_reset_at: Timestamp


class _PaymentData(_Data):
    #: In major units of ``currency`` (``20.0`` with ``usd`` is $20.00).
    amount: USD = Field(ge=0)
    #: ISO 4217 code, lower case as the payment processor (Stripe) writes it.
    currency: Annotated[str, StringConstraints(pattern=r"^[a-z]{3}$")]


class PaymentSucceededData(_PaymentData):
    """A top-up or subscription invoice was paid."""

    event_type: ClassVar[EventType] = "payment.succeeded"
    invoice_id: Text
    #: The wallet balance afterwards, in USD.
    new_balance: USD


class PaymentFailedData(_PaymentData):
    """The payment processor reported a failed invoice payment."""

    event_type: ClassVar[EventType] = "payment.failed"
    #: The processor's code, e.g. ``card_declined``.
    failure_code: Text
    attempt_count: int = Field(ge=1)


class KeyRotatedData(_Data):
    """An API key was rotated or revoked. Carries the display prefix only, never the key."""

    event_type: ClassVar[EventType] = "key.rotated"
    key_id: KeyId
    # Capped so a whole key cannot be passed off as its prefix.
    key_prefix: Annotated[str, StringConstraints(min_length=1, max_length=16)]
    rotated_at: Timestamp
    action: Literal["rotated", "revoked"]


class LowBalanceData(_Data):
    """The wallet balance crossed 20 %, 10 % or 0 % of the last top-up."""

    event_type: ClassVar[EventType] = "account.low_balance"
    #: USD.
    balance: USD
    #: USD, the amount of the last top-up the tiers are measured against.
    last_topup: USD = Field(ge=0)
    tier: Literal[20, 10, 0]


class SecurityEventData(_Data):
    """Security Shield detected a threat (monitor mode reports, block mode also blocks)."""

    event_type: ClassVar[EventType] = "security.event"
    threat_type: Text
    score: float = Field(ge=0, le=1)
    action: Literal["blocked", "monitored"]
    req_id: Text
    prompt_hash: Sha256Ref


class WebhookStaleData(_Data):
    """A webhook went stale after 5 failed attempts; sent to the workspace's other webhooks."""

    event_type: ClassVar[EventType] = "webhook.stale"
    webhook_id: Annotated[str, StringConstraints(pattern=r"^wh_[A-Za-z0-9_-]{1,64}$")]
    name: Text
    # The host only: paths and queries of webhook URLs often carry tokens.
    url_host: Annotated[str, StringConstraints(pattern=r"^[^\s/?#@]{1,253}$")]
    #: The last attempt's HTTP status, 0 when no response arrived.
    last_status: int = Field(ge=0, le=599)
    failed_event_id: EventId
    stale_at: Timestamp


EventData = (
    GuardianBlockData
    | BudgetAlertData
    | PaymentSucceededData
    | PaymentFailedData
    | KeyRotatedData
    | LowBalanceData
    | SecurityEventData
    | WebhookStaleData
)
_DATA_MODELS: dict[str, type[_Data]] = {
    model.event_type: model
    for model in (
        GuardianBlockData,
        BudgetAlertData,
        PaymentSucceededData,
        PaymentFailedData,
        KeyRotatedData,
        LowBalanceData,
        SecurityEventData,
        WebhookStaleData,
    )
}


# -- the envelope -------------------------------------------------------------------------------


class Event(_Model):
    """One event: the spec 6.1 envelope plus ``event_id``, with typed ``data``."""

    event: EventType
    #: Minted once; the same on every retry and replay so receivers can deduplicate.
    event_id: EventId
    workspace_id: WorkspaceId
    timestamp: Timestamp
    data: EventData

    @classmethod
    def create(
        cls,
        data: EventData,
        *,
        workspace_id: str,
        now: datetime | None = None,
        event_id: str | None = None,
    ) -> Event:
        """A new event for ``data``, with a fresh ``event_id`` and ``now`` (default: the clock)."""
        return cls(
            event=data.event_type,
            event_id=event_id or new_event_id(),
            workspace_id=workspace_id,
            timestamp=now or datetime.now(UTC),
            data=data,
        )

    def to_bytes(self) -> bytes:
        """Compact JSON in field order: the exact body that is stored and sent."""
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, body: bytes | str) -> Event:
        """The event a ``to_bytes`` body holds; raises ``pydantic.ValidationError``."""
        return cls.model_validate_json(body)

    @model_validator(mode="before")
    @classmethod
    def _typed_data(cls, values: Any) -> Any:
        # The type names the data model; validating against it alone gives clear errors
        # where a plain union would report a failure for each of the eight models.
        if isinstance(values, dict) and isinstance(values.get("data"), dict):
            model = _DATA_MODELS.get(values.get("event"))  # type: ignore[arg-type]
            if model is None:
                raise ValueError(f"unknown event type {values.get('event')!r}")
            values = {**values, "data": model.model_validate(values["data"])}
        return values

    @model_validator(mode="after")
    def _data_matches_event(self) -> Event:
        if self.data.event_type != self.event:
            raise ValueError(f"data of a {self.data.event_type} event given for {self.event}")
        return self


# -- samples and filters ------------------------------------------------------------------------


def sample_event(
    event_type: str,
    *,
    workspace_id: str = "ws_sample",
    now: datetime | None = None,
    event_id: str | None = None,
) -> Event:
    """A plausible event of ``event_type``: for test deliveries and documentation."""
    now = _utc_millis(now or datetime.now(UTC))
    request_hash = sha256_ref(b'{"model":"gpt-4o","messages":[...]}')
    samples: dict[str, EventData] = {
        "guardian.block": GuardianBlockData(
            rule="repeat",
            key_id="kid_sample",
            request_hash=request_hash,
            action="blocked",
            threshold=12,
            observed=13,
            message="13 identical requests from this key within 60 s (blocked from 12)",
        ),
        "budget.alert": BudgetAlertData(
            cap_usd=usd(50_000_000),
            spent_usd=usd(40_125_500),
            verdict="warn",
            threshold_pct=80,
            period_reset_at=_next_month(now),
        ),
        "payment.succeeded": PaymentSucceededData(
            amount=20.0, currency="usd", invoice_id="in_sample", new_balance=usd(24_500_000)
        ),
        "payment.failed": PaymentFailedData(
            amount=20.0, currency="usd", failure_code="card_declined", attempt_count=1
        ),
        "key.rotated": KeyRotatedData(
            key_id="kid_sample", key_prefix="gk_live_ab12", rotated_at=now, action="rotated"
        ),
        "account.low_balance": LowBalanceData(balance=usd(4_000_000), last_topup=20.0, tier=20),
        "security.event": SecurityEventData(
            threat_type="prompt_injection",
            score=0.97,
            action="blocked",
            req_id="req_" + "0" * 32,
            prompt_hash=request_hash,
        ),
        "webhook.stale": WebhookStaleData(
            webhook_id="wh_sample",
            name="Billing receiver",
            url_host="hooks.example.com",
            last_status=503,
            failed_event_id="evt_" + "0" * 32,
            stale_at=now,
        ),
    }
    if event_type not in samples:
        raise ValueError(f"unknown event type {event_type!r}")
    return Event.create(samples[event_type], workspace_id=workspace_id, now=now, event_id=event_id)


def _next_month(now: datetime) -> datetime:
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first + timedelta(days=32)).replace(day=1)


def normalize_event_filter(events: Iterable[str] | None) -> tuple[EventType, ...] | None:
    """A webhook's ``events`` filter, validated (spec 2.2).

    ``None`` (omitted) means every type; an empty list means paused. Duplicates are dropped,
    order kept. Unknown types raise ``ValueError`` naming them.
    """
    if events is None:
        return None
    if isinstance(events, str | bytes):
        raise ValueError("events must be a list of event types, not a single string")
    listed = list(dict.fromkeys(events))
    unknown = [name for name in listed if name not in _EVENT_TYPE_BY_NAME]
    if unknown:
        raise ValueError(
            f"unknown event type(s): {', '.join(map(repr, unknown))}; "
            f"known types: {', '.join(EVENT_TYPES)}"
        )
    return tuple(_EVENT_TYPE_BY_NAME[name] for name in listed)


def event_matches(events: tuple[str, ...] | None, event_type: str) -> bool:
    """Whether a webhook with filter ``events`` receives ``event_type`` (spec 6.3)."""
    return events is None or event_type in events
