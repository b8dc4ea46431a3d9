"""``POST /v1/payments/stripe``: the payment processor's signed events credit wallets.

Stripe (or anything signing the way it does) posts events here; no API key, the
``Stripe-Signature`` header with the configured endpoint secret is the authentication. A paid
invoice or checkout session credits the workspace named in its metadata and publishes
``payment.succeeded``; a failed invoice payment publishes ``payment.failed``.

Answers: ``400`` for a bad signature (``invalid_signature``), an expired or future timestamp, or
an event that cannot be read (``invalid_json`` when the authentic body is no JSON to read;
nothing changes, Stripe shows the failure), and for a payment larger than the wallet's
largest single top-up (``MAX_TOPUP_USD``; logged: credit it by hand); ``200`` otherwise,
including events that are ignored (other types, an unknown workspace, a currency other than
USD), which are logged, and events already handled: a re-sent event never credits twice
(credits are idempotent by invoice or session, failures by event id).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway_kit.accounts.wallet import MAX_TOPUP_USD
from gateway_kit.api._common import ApiError, json_response
from gateway_kit.events.models import Event, PaymentFailedData, PaymentSucceededData, usd
from gateway_kit.exceptions import SignatureError
from gateway_kit.gateway import Gateway
from gateway_kit.payments import PaymentNotice, parse_payment, verify_stripe_event
from gateway_kit.payments.stripe import UnreadableEventError
from gateway_kit.pipeline.body import parse_json

logger = logging.getLogger("gateway_kit.payments")

#: Stripe events are a few kilobytes; anything much bigger is not one.
MAX_EVENT_BYTES = 256 * 1024


def stripe_endpoint(gateway: Gateway) -> Callable[[Request], Awaitable[Response]]:
    async def stripe_events(request: Request) -> Response:
        config = gateway.config.payments
        if config.stripe_webhook_secret is None:
            return ApiError(
                404, "Payments are not configured on this gateway.", code="not_found"
            ).response()
        try:
            body = await _body(request)
            event = verify_stripe_event(
                body,
                request.headers.get("stripe-signature", ""),
                config.stripe_webhook_secret.get_secret_value(),
                tolerance=config.stripe_tolerance_s,
                now=gateway.clock(),
                loads=parse_json,  # as strict as every JSON body: depth, 1e400, surrogates
            )
            notice = parse_payment(event)
        except ApiError as exc:
            return exc.response()
        except UnreadableEventError as exc:
            return ApiError(400, str(exc), code="invalid_json").response()
        except SignatureError as exc:
            return ApiError(400, str(exc), code="invalid_signature").response()
        if notice is None:
            return json_response({"received": True, "handled": False})
        too_large = _too_large(notice)
        if too_large is not None:
            return too_large.response()
        outcome = await _apply(gateway, notice)
        return json_response({"received": True, **outcome})

    return stripe_events


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_EVENT_BYTES:
        raise ApiError(413, "The event is too large.", code="request_too_large")
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_EVENT_BYTES:
                raise ApiError(413, "The event is too large.", code="request_too_large")
    except ClientDisconnect:
        raise ApiError(400, "The client disconnected.", code="client_disconnected") from None
    return body


def _too_large(notice: PaymentNotice) -> ApiError | None:
    """A payment past what the wallet credits at once: refused, so that it shows in Stripe's
    dashboard (and is retried) rather than being lost or overflowing the balance."""
    micro = notice.micro_usd
    if notice.kind != "succeeded" or micro is None or micro <= MAX_TOPUP_USD * 1_000_000:
        return None
    logger.warning(
        "payment event %s of %s USD exceeds the largest top-up (%s USD): refused",
        notice.event_id,
        notice.amount_minor / 100,
        MAX_TOPUP_USD,
    )
    return ApiError(
        400,
        f"Stripe event {notice.event_id}: the payment exceeds the largest single top-up the "
        f"wallet takes ({MAX_TOPUP_USD:,} USD); credit it by hand.",
        code="amount_too_large",
    )


def _now(gateway: Gateway) -> datetime:
    return datetime.fromtimestamp(gateway.clock(), UTC)


async def _apply(gateway: Gateway, notice: PaymentNotice) -> dict[str, object]:
    """Credit or report the payment; what happened, for the answer."""
    if await gateway.workspaces.get(notice.workspace_id) is None:
        logger.warning("payment event %s for unknown workspace: ignored", notice.event_id)
        return {"handled": False, "reason": "unknown_workspace"}
    # Amounts in major units: Stripe's minor units of two-decimal currencies.
    amount = notice.amount_minor / 100
    if notice.kind == "failed":
        # Kept 30 days: far past Stripe's 3 days of retries, and it does not grow forever.
        first = await gateway.storage.set(
            f"{notice.workspace_id}:payments:event:{notice.event_id}",
            b"1",
            ttl=30 * 86_400,
            if_absent=True,
        )
        if not first:
            return {"handled": True, "duplicate": True}
        data = PaymentFailedData(
            amount=amount,
            currency=notice.currency,
            failure_code=notice.failure_code or "unknown",
            attempt_count=notice.attempt_count,
        )
        await gateway.events.publish(
            Event.create(data, workspace_id=notice.workspace_id, now=_now(gateway))
        )
        return {"handled": True, "duplicate": False}
    micro = notice.micro_usd
    if micro is None or notice.credit_key is None:
        logger.warning(
            "payment event %s in %s: the wallet is USD only, ignored",
            notice.event_id,
            notice.currency,
        )
        return {"handled": False, "reason": "currency"}
    balance = await gateway.wallet.credit(
        notice.workspace_id,
        micro,
        key=f"stripe:{notice.credit_key}",
        source="stripe",
        reference=notice.invoice_id,
    )
    if balance is None:
        return {"handled": True, "duplicate": True}
    data_ok = PaymentSucceededData(
        amount=usd(micro),
        currency=notice.currency,
        invoice_id=notice.invoice_id,
        new_balance=usd(balance),
    )
    await gateway.events.publish(
        Event.create(data_ok, workspace_id=notice.workspace_id, now=_now(gateway))
    )
    return {"handled": True, "duplicate": False}
