"""Stripe webhooks: verifying ``Stripe-Signature`` and reading the payment events.

Pure functions, no ASGI and no storage. A payments endpoint calls ``verify_stripe_event`` on the
raw request body (a ``SignatureError`` answers 400), then ``parse_payment``; ``None`` means
"acknowledge with 2xx and ignore".

Signatures (https://docs.stripe.com/webhooks#verify-manually). The header is
``t=<unix>,v1=<hex>[,v1=<hex>...][,v0=<hex>]``. Each ``v1`` is the lowercase hex HMAC-SHA256 of
``b"<t>." + body``, keyed with the UTF-8 bytes of the whole endpoint secret (``whsec_`` included,
not base64-decoded, unlike Standard Webhooks). Several ``v1`` appear while a secret is being
rolled and any may match; ``v0`` (a legacy test-mode scheme) is ignored. The checks run in the
official library's order (header, secret, parse, a ``v1`` present, a match, then the time) and
accept every header it accepts from Stripe; where it is lax, we are stricter:

- the timestamp must lie within ``tolerance`` seconds of now in both directions (the library
  refuses only old ones), and ``tolerance=0`` means "this very second", never "no check";
- ``t`` must be given once, as ASCII digits;
- the body must be a UTF-8 JSON Stripe event: an ``evt_`` id, a string ``type``, an object
  ``data.object`` (so v2 "thin" notifications are refused); ``NaN``, ``Infinity`` and lone
  surrogates (``"\\ud800"``, no Unicode text) are refused, as nesting past the parser's depth;
- ids (of the event, the invoice, the session) are at most 200 letters, digits and underscores,
  as Stripe's are; amounts at most 12 digits (Stripe's are 8, 12 for a few currencies), so
  that no amount overflows a 64-bit counter once in micro-USD; an attempt count outside 1 to
  1000 reads as 1.

Crediting once. For one paid invoice Stripe sends both ``invoice.paid`` and
``invoice.payment_succeeded``, each with its own event id; a subscription bought through Checkout
also sends ``checkout.session.completed`` for that same first invoice. Event ids only dedupe
Stripe's redeliveries of one event, so each succeeded ``PaymentNotice`` also carries a
``credit_key`` naming the money: ``invoice:<in_...>`` whenever an invoice is known (a Checkout
Session's ``invoice`` included), else ``checkout:<cs_...>``. The wallet credits at most once per
``credit_key`` and records every ``event_id`` it has handled. A failed notice credits nothing and
has no ``credit_key``: each failed attempt is an event of its own.

The workspace comes from ``metadata.workspace_id``; then, for invoices, the subscription's
metadata snapshot (``parent.subscription_details.metadata``, or ``subscription_details`` before
API version 2025-03-31), since subscription invoices do not inherit the subscription's metadata;
for Checkout Sessions, ``client_reference_id``. An event naming no workspace is ignored, and so is
a succeeded one of zero amount (a trial, a 100% coupon: no money moved). An event of a handled
type whose money fields are malformed raises ``SignatureError`` rather than being dropped, so
the failure shows in Stripe's dashboard instead of losing a payment.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway_kit.exceptions import SignatureError

__all__ = [
    "PaymentNotice",
    "UnreadableEventError",
    "parse_payment",
    "sign_stripe_payload",
    "verify_stripe_event",
]

_SCHEME = "v1"
# Up to 18 digits: int() stays cheap and anything longer is not a Unix time anyway.
_TIMESTAMP = re.compile(r"[0-9]{1,18}")
_CURRENCY = re.compile(r"[a-z]{3}")
_ID = re.compile(r"[A-Za-z0-9_]{1,200}")
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# The largest amount read, in minor units (twelve digits), and attempt count.
_MAX_AMOUNT = 10**12 - 1
_MAX_ATTEMPTS = 1000
# A \ud800-\udfff escape: only a body holding one can hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SUCCEEDED_INVOICE = frozenset({"invoice.paid", "invoice.payment_succeeded"})
_FAILED_INVOICE = "invoice.payment_failed"
_SUCCEEDED_CHECKOUT = frozenset(
    {"checkout.session.completed", "checkout.session.async_payment_succeeded"}
)
_HANDLED = _SUCCEEDED_INVOICE | _SUCCEEDED_CHECKOUT | {_FAILED_INVOICE}


class UnreadableEventError(SignatureError):
    """The body is authentic (a signature matched) but no JSON to read: not UTF-8, ``NaN`` or
    ``Infinity``, a lone surrogate, nesting past the parser's depth."""


def _signature(payload: bytes, secret: str, timestamp: int) -> str:
    signed = f"{timestamp}.".encode() + payload
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign_stripe_payload(payload: bytes, secret: str, *, timestamp: int) -> str:
    """The ``Stripe-Signature`` value Stripe would send for ``payload`` signed at ``timestamp``."""
    if not secret.strip():
        raise ValueError("a Stripe webhook secret must not be empty")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError("timestamp must be a non-negative integer (Unix seconds)")
    return f"t={timestamp},{_SCHEME}={_signature(payload, secret, timestamp)}"


def _parse_header(header: str) -> tuple[int, list[str]]:
    stamps: list[str] = []
    signatures: list[str] = []
    for item in header.split(","):
        key, _, value = item.partition("=")
        key = key.strip()
        if key == "t":
            stamps.append(value.strip())
        elif key == _SCHEME:
            signatures.append(value.strip())
    if len(stamps) != 1 or not _TIMESTAMP.fullmatch(stamps[0]):
        raise SignatureError(
            "malformed Stripe-Signature header: expected one t=<unix seconds> element"
        )
    if not signatures:
        raise SignatureError(f"the Stripe-Signature header has no {_SCHEME} signature")
    return int(stamps[0]), signatures


def verify_stripe_event(
    payload: bytes,
    header: str,
    secret: str,
    *,
    tolerance: int = 300,
    now: float | None = None,
    loads: Callable[[bytes], Any] | None = None,
) -> dict[str, Any]:
    """The Stripe event in the raw ``payload``, once ``header`` proves it authentic and fresh.

    ``secret`` is the endpoint's whole ``whsec_...`` string; ``now`` defaults to the clock.
    Raises ``SignatureError`` saying why (never quoting the secret) for a missing or malformed
    header, no ``v1`` signature, no matching one, a timestamp more than ``tolerance`` seconds
    away from ``now`` in either direction, or a body that is not a Stripe event object
    (``UnreadableEventError`` when it is no JSON to read). ``loads`` parses the authentic body
    (a ``ValueError`` from it: unreadable), by default UTF-8 JSON without ``NaN``, ``Infinity``
    or lone surrogates; an application passes its own stricter reader.
    """
    if tolerance < 0:
        raise ValueError("tolerance must not be negative")
    if not isinstance(header, str) or not header.strip():
        raise SignatureError("missing Stripe-Signature header")
    if not isinstance(secret, str) or not secret.strip():
        raise SignatureError("no Stripe webhook secret is configured")
    timestamp, signatures = _parse_header(header)
    expected = _signature(payload, secret, timestamp).encode()
    matched = False
    for candidate in signatures:
        # Check every entry, so the time taken does not reveal which one matched.
        matched |= hmac.compare_digest(expected, candidate.encode(errors="replace"))
    if not matched:
        raise SignatureError("no Stripe-Signature v1 signature matches the payload")
    age = (time.time() if now is None else now) - timestamp
    if age > tolerance:
        raise SignatureError(
            f"the Stripe-Signature timestamp is {age:.0f} s old, beyond the {tolerance} s "
            "tolerance (a replay, or a clock out of sync)"
        )
    if -age > tolerance:
        raise SignatureError(
            f"the Stripe-Signature timestamp is {-age:.0f} s in the future, beyond the "
            f"{tolerance} s tolerance (a clock out of sync)"
        )
    return _parse_event(payload, loads or _loads)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(payload: bytes) -> Any:
    event = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant)
    if _SURROGATE_ESCAPE.search(payload) is not None:
        try:
            json.dumps(event, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ValueError("it holds a lone surrogate (\\ud800 to \\udfff)") from None
    return event


def _parse_event(payload: bytes, loads: Callable[[bytes], Any]) -> dict[str, Any]:
    try:
        event = loads(payload)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise UnreadableEventError(f"the Stripe event body is not UTF-8 JSON ({reason})") from exc
    if not isinstance(event, dict):
        raise SignatureError("the Stripe event body is not a JSON object")
    event_id = event.get("id")
    if not (isinstance(event_id, str) and event_id.startswith("evt_") and _ID.fullmatch(event_id)):
        raise SignatureError("the Stripe event has no evt_ id")
    if not isinstance(event.get("type"), str) or not event["type"]:
        raise SignatureError(f"Stripe event {event_id} has no type")
    if event.get("object") == "v2.core.event":
        raise SignatureError(
            f"Stripe event {event_id} is a thin (v2) notification; send snapshot events"
        )
    data = event.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("object"), dict):
        raise SignatureError(f"Stripe event {event_id} has no data.object")
    return event


@dataclass(frozen=True, slots=True)
class PaymentNotice:
    """One Stripe payment event, as the wallet and the ``payment.*`` events need it."""

    #: Stripe's ``evt_...`` id: the idempotency key of this event.
    event_id: str
    kind: Literal["succeeded", "failed"]
    workspace_id: str
    #: In Stripe's minor units of ``currency`` (cents for ``usd``; yen for zero-decimal ``jpy``).
    amount_minor: int
    #: Lower-case ISO 4217 code.
    currency: str
    #: The invoice (``in_...``), else the Checkout Session's own id (``cs_...``).
    invoice_id: str
    #: What the wallet credits at most once (module docstring); ``None`` for failed notices.
    credit_key: str | None
    #: For failed notices: the invoice's ``last_finalization_error.code``, else the failure code
    #: of an expanded ``charge`` or ``payment_intent``, else ``"unknown"`` (Stripe's webhooks
    #: carry those two as bare ids, so ``"unknown"`` is common); ``None`` for succeeded ones.
    failure_code: str | None = None
    #: The invoice's ``attempt_count``, at least 1 (1 for Checkout Sessions).
    attempt_count: int = 1

    @property
    def micro_usd(self) -> int | None:
        """The amount in micro-USD, or ``None`` unless the currency is ``usd``.

        The wallet is USD-only: other currencies, zero-decimal ones included, are not converted.
        """
        return self.amount_minor * 10_000 if self.currency == "usd" else None


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def _first_text(
    obj: Mapping[str, Any], *paths: tuple[str, ...], pattern: re.Pattern[str] | None = None
) -> str | None:
    for path in paths:
        found = _text(_get(obj, *path))
        if found is not None and (pattern is None or pattern.fullmatch(found)):
            return found
    return None


def _money(obj: Mapping[str, Any], field: str, event_id: str) -> tuple[int, str]:
    amount = obj.get(field)
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        raise SignatureError(f"Stripe event {event_id}: {field} is not a non-negative integer")
    if amount > _MAX_AMOUNT:
        raise SignatureError(
            f"Stripe event {event_id}: {field} has more than 12 digits, which no Stripe amount has"
        )
    currency = obj.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency.lower()):
        raise SignatureError(f"Stripe event {event_id}: currency is not an ISO 4217 code")
    return amount, currency.lower()


def _object_id(obj: Mapping[str, Any], event_id: str) -> str:
    found = _id(obj.get("id"))
    if found is None:
        raise SignatureError(f"Stripe event {event_id}: data.object has no id")
    return found


def parse_payment(event: Mapping[str, Any]) -> PaymentNotice | None:
    """The payment a verified Stripe event reports, or ``None`` for one to acknowledge and ignore.

    Succeeded: ``invoice.paid`` and ``invoice.payment_succeeded`` (``amount_paid``),
    ``checkout.session.completed`` once ``payment_status`` is ``paid`` and
    ``checkout.session.async_payment_succeeded`` (``amount_total``). Failed:
    ``invoice.payment_failed`` (``amount_due``). See the module docstring for the workspace and
    ``credit_key`` rules.
    """
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in _HANDLED:
        return None
    event_id = _text(event.get("id"))
    obj = _get(event, "data", "object")
    if event_id is None or not isinstance(obj, Mapping):
        raise SignatureError("the Stripe event has no id or no data.object")
    if kind in _SUCCEEDED_CHECKOUT:
        return _checkout_notice(event_id, kind, obj)
    return _invoice_notice(event_id, kind == _FAILED_INVOICE, obj)


def _invoice_notice(
    event_id: str, failed: bool, invoice: Mapping[str, Any]
) -> PaymentNotice | None:
    workspace_id = _first_text(
        invoice,
        ("metadata", "workspace_id"),
        ("parent", "subscription_details", "metadata", "workspace_id"),
        ("subscription_details", "metadata", "workspace_id"),
    )
    if workspace_id is None:
        return None
    amount, currency = _money(invoice, "amount_due" if failed else "amount_paid", event_id)
    if amount == 0 and not failed:
        return None
    invoice_id = _object_id(invoice, event_id)
    attempts = invoice.get("attempt_count")
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        attempts = 1
    attempts = attempts if 1 <= attempts <= _MAX_ATTEMPTS else 1
    failure_code = None
    if failed:
        failure_code = (
            _first_text(
                invoice,
                ("last_finalization_error", "code"),
                ("charge", "failure_code"),
                ("payment_intent", "last_payment_error", "code"),
                pattern=_CODE,
            )
            or "unknown"
        )
    return PaymentNotice(
        event_id=event_id,
        kind="failed" if failed else "succeeded",
        workspace_id=workspace_id,
        amount_minor=amount,
        currency=currency,
        invoice_id=invoice_id,
        credit_key=None if failed else f"invoice:{invoice_id}",
        failure_code=failure_code,
        attempt_count=attempts,
    )


def _checkout_notice(event_id: str, kind: str, session: Mapping[str, Any]) -> PaymentNotice | None:
    if kind == "checkout.session.completed" and session.get("payment_status") != "paid":
        return None  # async methods (bank debits) follow with async_payment_succeeded
    workspace_id = _first_text(session, ("metadata", "workspace_id"), ("client_reference_id",))
    if workspace_id is None:
        return None
    amount, currency = _money(session, "amount_total", event_id)
    if amount == 0:
        return None
    session_id = _object_id(session, event_id)
    # ``invoice`` is an id, or the invoice itself when expanded.
    invoice_id = _id(session.get("invoice")) or _id(_get(session, "invoice", "id"))
    return PaymentNotice(
        event_id=event_id,
        kind="succeeded",
        workspace_id=workspace_id,
        amount_minor=amount,
        currency=currency,
        invoice_id=invoice_id or session_id,
        credit_key=f"invoice:{invoice_id}" if invoice_id else f"checkout:{session_id}",
    )
