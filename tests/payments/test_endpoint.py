"""``POST /v1/payments/stripe``: signed Stripe events credit wallets exactly once and publish
``payment.succeeded`` / ``payment.failed``; anything unauthentic changes nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import stripe

from gateway_kit.events.bus import EventRecorder
from gateway_kit.payments import sign_stripe_payload
from gateway_kit.testing import RecordedResponse
from tests.fakes import Env, provisioned
from tests.payments.stripe_events import event, failed_invoice, invoice, session

pytestmark = pytest.mark.anyio

SECRET = "whsec_Jd8qS0vXo3nT6kYb1Lr4Wm7Pz2Hc5Fg9"
PATH = "/v1/payments/stripe"
INVOICE_ID = invoice()["id"]
SESSION_ID = session()["id"]
TOLERANCE = 300  # the default stripe_tolerance_s


@asynccontextmanager
async def stripe_gateway(**config: Any) -> AsyncIterator[tuple[Env, EventRecorder]]:
    """A provisioned gateway with the payments endpoint on, and a recorder of its events."""
    fields = {"payments": {"stripe_webhook_secret": SECRET}, **config}
    async with provisioned(**fields) as env:
        recorder = EventRecorder()
        env.gateway.events.subscribe(recorder)
        yield env, recorder


def payload(
    env: Env, event_type: str, obj: dict[str, Any], *, event_id: str, workspace: str | None = None
) -> bytes:
    """The event's JSON for ``env``'s workspace (the samples name ``ws_acme``)."""
    obj = {**obj, "metadata": {"workspace_id": workspace or env.workspace_id}}
    return json.dumps(event(event_type, obj, event_id=event_id)).encode()


def paid(env: Env, event_id: str = "evt_1SGk3iLkdIwHu7ixR5hY", **changes: Any) -> bytes:
    return payload(env, "invoice.paid", invoice(**changes), event_id=event_id)


async def post(
    env: Env,
    body: bytes,
    *,
    secret: str = SECRET,
    timestamp: int | None = None,
    header: str | None = None,
) -> RecordedResponse:
    """POST ``body`` signed with ``secret`` at ``timestamp`` (default: the gateway's now)."""
    if header is None:
        stamp = int(env.clock()) if timestamp is None else timestamp
        header = sign_stripe_payload(body, secret, timestamp=stamp)
    response: RecordedResponse = await env.recorder.request(
        "POST",
        PATH,
        body=body,
        headers={"stripe-signature": header, "content-type": "application/json"},
    )
    return response


async def balance(env: Env) -> int:
    return (await env.gateway.wallet.status(env.workspace_id)).balance_micro_usd


def of_type(recorder: EventRecorder, name: str) -> list[Any]:
    return [e for e in recorder.events if e.event == name]


async def test_a_paid_invoice_credits_the_wallet_exactly_and_publishes_payment_succeeded() -> None:
    async with stripe_gateway() as (env, recorder):
        response = await post(env, paid(env))
        assert response.status == 200
        assert response.json() == {"received": True, "handled": True, "duplicate": False}
        assert await balance(env) == 20_000_000
        [succeeded] = recorder.events
        assert succeeded.event == "payment.succeeded"
        assert succeeded.workspace_id == env.workspace_id
        assert succeeded.data.model_dump() == {
            "amount": 20.0,
            "currency": "usd",
            "invoice_id": INVOICE_ID,
            "new_balance": 20.0,
        }
        status = await env.gateway.wallet.status(env.workspace_id)
        assert (status.last_topup_micro_usd, status.topups) == (20_000_000, 1)


async def test_the_new_balance_adds_up_over_several_invoices() -> None:
    async with stripe_gateway() as (env, recorder):
        assert (await post(env, paid(env))).status == 200
        second = paid(env, "evt_1SGk9zLkdIwHu7ixAb3Q", id="in_second", amount_paid=1999)
        assert (await post(env, second)).status == 200
        assert await balance(env) == 20_000_000 + 19_990_000
        last = of_type(recorder, "payment.succeeded")[-1].data
        assert (last.amount, last.invoice_id, last.new_balance) == (19.99, "in_second", 39.99)


@pytest.mark.parametrize(
    ("cents", "micro"),
    [(1, 10_000), (99, 990_000), (99_999_999, 999_999_990_000), (100_000_000, 10**12)],
)
async def test_cents_become_micro_dollars_exactly(cents: int, micro: int) -> None:
    async with stripe_gateway() as (env, _):
        assert (await post(env, paid(env, amount_paid=cents))).status == 200
        assert await balance(env) == micro


@pytest.mark.parametrize(
    ("cents", "code"),
    [
        (100_000_001, "amount_too_large"),  # a cent past the wallet's largest top-up
        (10**12 - 1, "amount_too_large"),
        (10**12, "invalid_signature"),  # more digits than any Stripe amount
        (10**15, "invalid_signature"),  # once a 500: past int64 in micro-USD
        (10**19, "invalid_signature"),
        (10**400, "invalid_signature"),
    ],
    ids=["past-max-topup", "12-digits", "13-digits", "1e15", "1e19", "1e400"],
)
async def test_amounts_past_the_wallets_bounds_are_refused_and_credit_nothing(
    cents: int, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with stripe_gateway() as (env, recorder):
        answer = await post(env, paid(env, amount_paid=cents))
        assert answer.status == 400
        assert answer.json()["error"]["code"] == code
        assert await balance(env) == 0
        assert of_type(recorder, "payment.succeeded") == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("old", "new", "code"),
    [
        (b'"amount_paid": 2000', b'"amount_paid": NaN', "invalid_json"),
        (b'"amount_paid": 2000', b'"amount_paid": 1e400', "invalid_json"),
        (b'"amount_paid": 2000', b'"amount_paid": -Infinity', "invalid_json"),
        (b'"id": "evt_1SGk', b'"id": "evt_\\ud800', "invalid_json"),
        (b'"id": "in_1SGk2hLkdIwHu7ixQq0pTz9a"', b'"id": "in_\\udfff"', "invalid_json"),
        (
            b'"id": "in_1SGk2hLkdIwHu7ixQq0pTz9a"',
            b'"id": "in_' + b"x" * 300 + b'"',
            "invalid_signature",
        ),
        (b'"id": "in_1SGk2hLkdIwHu7ixQq0pTz9a"', b'"id": "in_\\u001b[2J"', "invalid_signature"),
        # The UTF-8 bytes of a surrogate.
        (b'"currency": "usd"', b'"currency": "\xed\xa0\x80sd"', "invalid_json"),
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity",
        "surrogate-event-id",
        "surrogate-invoice-id",
        "long-invoice-id",
        "escape-in-invoice-id",
        "encoded-surrogate",
    ],
)
async def test_signed_but_hostile_events_are_a_400_not_a_server_error(
    old: bytes, new: bytes, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with stripe_gateway() as (env, recorder):
        body = paid(env)
        assert old in body
        answer = await post(env, body.replace(old, new, 1))
        assert answer.status == 400
        # Authentic, but no JSON to read (invalid_json), or no Stripe event (invalid_signature).
        assert answer.json()["error"]["code"] == code
        assert await balance(env) == 0
        assert recorder.events == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        deep = await post(env, b"[" * 5000 + b"]" * 5000)
        assert deep.json()["error"]["code"] == "invalid_json"


async def test_a_resent_event_is_acknowledged_but_credits_once() -> None:
    async with stripe_gateway() as (env, recorder):
        body = paid(env)
        assert (await post(env, body)).status == 200
        again = await post(env, body)  # Stripe's redelivery: same event, signed anew
        assert again.status == 200
        assert again.json() == {"received": True, "handled": True, "duplicate": True}
        assert await balance(env) == 20_000_000
        assert len(of_type(recorder, "payment.succeeded")) == 1


async def test_payment_succeeded_for_an_invoice_already_paid_credits_nothing() -> None:
    async with stripe_gateway() as (env, recorder):
        assert (await post(env, paid(env))).status == 200
        # Stripe sends both for one paid invoice, each with its own event id.
        twin = payload(env, "invoice.payment_succeeded", invoice(), event_id="evt_1SGk3jOther")
        response = await post(env, twin)
        assert response.status == 200
        assert response.json()["duplicate"] is True
        assert await balance(env) == 20_000_000
        assert len(recorder.events) == 1


async def test_a_paid_checkout_session_credits_the_wallet() -> None:
    async with stripe_gateway() as (env, recorder):
        body = payload(env, "checkout.session.completed", session(), event_id="evt_cs_paid_1")
        response = await post(env, body)
        assert response.status == 200
        assert response.json()["handled"] is True
        assert await balance(env) == 20_000_000
        [succeeded] = of_type(recorder, "payment.succeeded")
        assert succeeded.data.invoice_id == SESSION_ID


async def test_a_checkout_session_for_an_invoice_already_credited_credits_nothing() -> None:
    async with stripe_gateway() as (env, recorder):
        assert (await post(env, paid(env))).status == 200
        obj = session(invoice=INVOICE_ID, mode="subscription")
        body = payload(env, "checkout.session.completed", obj, event_id="evt_cs_same_invoice")
        assert (await post(env, body)).json()["duplicate"] is True
        assert await balance(env) == 20_000_000
        assert len(recorder.events) == 1


async def test_an_unpaid_checkout_session_credits_nothing() -> None:
    async with stripe_gateway() as (env, recorder):
        obj = session(payment_status="unpaid")  # a bank debit still on its way
        body = payload(env, "checkout.session.completed", obj, event_id="evt_cs_unpaid")
        response = await post(env, body)
        assert response.status == 200
        assert response.json() == {"received": True, "handled": False}
        assert await balance(env) == 0
        assert recorder.events == []


async def test_a_failed_payment_publishes_payment_failed_once_per_event() -> None:
    async with stripe_gateway() as (env, recorder):
        first = payload(env, "invoice.payment_failed", failed_invoice(), event_id="evt_fail_2")
        assert (await post(env, first)).json() == {
            "received": True,
            "handled": True,
            "duplicate": False,
        }
        assert (await post(env, first)).json()["duplicate"] is True
        declined = failed_invoice(
            attempt_count=3,
            payment_intent={"id": "pi_1", "last_payment_error": {"code": "card_declined"}},
        )
        third = payload(env, "invoice.payment_failed", declined, event_id="evt_fail_3")
        assert (await post(env, third)).status == 200
        failed = [e.data.model_dump() for e in of_type(recorder, "payment.failed")]
        assert failed == [
            {"amount": 20.0, "currency": "usd", "failure_code": "unknown", "attempt_count": 2},
            {
                "amount": 20.0,
                "currency": "usd",
                "failure_code": "card_declined",
                "attempt_count": 3,
            },
        ]
        assert len(recorder.events) == 2
        assert await balance(env) == 0


def _tampered(env: Env) -> tuple[bytes, str]:
    body = paid(env)
    header = sign_stripe_payload(body, SECRET, timestamp=int(env.clock()))
    return body.replace(b'"amount_paid": 2000', b'"amount_paid": 9000'), header


def _one_byte(env: Env) -> tuple[bytes, str]:
    body = paid(env)
    header = sign_stripe_payload(body, SECRET, timestamp=int(env.clock()))
    changed = body.replace(b"credit top-up", b"credit top-uq")
    assert len(changed) == len(body)
    assert changed != body
    return changed, header


def _signed(env: Env, body: bytes, *, secret: str = SECRET, shift: int = 0) -> tuple[bytes, str]:
    return body, sign_stripe_payload(body, secret, timestamp=int(env.clock()) + shift)


REJECTED: dict[str, Callable[[Env], tuple[bytes, str]]] = {
    "tampered amount": _tampered,
    "one byte changed": _one_byte,
    "wrong secret": lambda env: _signed(env, paid(env), secret="whsec_someone_elses_secret"),
    "expired": lambda env: _signed(env, paid(env), shift=-TOLERANCE - 1),
    "future": lambda env: _signed(env, paid(env), shift=TOLERANCE + 1),
    "missing header": lambda env: (paid(env), ""),
    "malformed header": lambda env: (paid(env), "v1=abc"),
    "not JSON": lambda env: _signed(env, b"this is not json"),
    "not an event": lambda env: _signed(env, b'{"id": "in_1", "object": "invoice"}'),
}


@pytest.mark.parametrize("case", list(REJECTED))
async def test_unauthentic_or_unreadable_events_are_refused_and_change_nothing(case: str) -> None:
    async with stripe_gateway() as (env, recorder):
        body, header = REJECTED[case](env)
        headers = {"content-type": "application/json"}
        if header:
            headers["stripe-signature"] = header
        response = await env.recorder.request("POST", PATH, body=body, headers=headers)
        assert response.status == 400
        assert response.headers["content-type"] == "application/json"
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        code = "invalid_json" if case == "not JSON" else "invalid_signature"
        assert (error["type"], error["code"]) == ("invalid_request_error", code)
        assert SECRET not in error["message"]
        assert await balance(env) == 0
        assert recorder.events == []


async def test_the_timestamp_is_checked_against_the_gateways_clock() -> None:
    async with stripe_gateway() as (env, _):
        now = int(env.clock())
        # At the edge of the tolerance, both ways, the event is accepted.
        assert (await post(env, paid(env, "evt_edge_old"), timestamp=now - TOLERANCE)).status == 200
        edge_new = paid(env, "evt_edge_new", id="in_edge_new")
        assert (await post(env, edge_new, timestamp=now + TOLERANCE)).status == 200
        # A capture replayed once the tolerance has passed is refused.
        body = paid(env, "evt_replayed", id="in_replayed")
        header = sign_stripe_payload(body, SECRET, timestamp=now)
        env.clock.advance(TOLERANCE + 1)
        assert (await post(env, body, header=header)).status == 400
        assert await balance(env) == 40_000_000  # the two invoices at the edges


@pytest.mark.parametrize(
    ("case", "reason"),
    [("unknown workspace", "unknown_workspace"), ("euros", "currency")],
)
async def test_events_that_cannot_credit_are_acknowledged_and_ignored(
    case: str, reason: str
) -> None:
    async with stripe_gateway() as (env, recorder):
        if case == "unknown workspace":
            body = payload(env, "invoice.paid", invoice(), event_id="evt_x", workspace="ws_nosuch")
        else:
            body = paid(env, currency="eur")
        response = await post(env, body)
        assert response.status == 200
        assert response.json() == {"received": True, "handled": False, "reason": reason}
        assert await balance(env) == 0
        assert recorder.events == []
        assert await env.gateway.wallet.topups(env.workspace_id) == []


@pytest.mark.parametrize(
    "body_of",
    [
        lambda env: payload(env, "customer.created", {"id": "cus_1"}, event_id="evt_cus"),
        lambda env: paid(env, amount_paid=0),  # a trial or a 100 % coupon: no money moved
        lambda env: json.dumps(event("invoice.paid", invoice(metadata={}), event_id="evt_n")),
    ],
    ids=["other type", "zero amount", "no workspace"],
)
async def test_events_without_a_payment_are_acknowledged_and_ignored(body_of: Any) -> None:
    async with stripe_gateway() as (env, recorder):
        body = body_of(env)
        response = await post(env, body if isinstance(body, bytes) else body.encode())
        assert response.status == 200
        assert response.json() == {"received": True, "handled": False}
        assert await balance(env) == 0
        assert recorder.events == []


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_an_oversized_body_is_refused_with_413(declared: bool) -> None:
    async with stripe_gateway() as (env, recorder):
        body = paid(env, description="x" * 300_000)
        header = sign_stripe_payload(body, SECRET, timestamp=int(env.clock()))
        response = await env.recorder.request(
            "POST",
            PATH,
            headers={"stripe-signature": header},
            **(
                {"body": body}
                if declared
                else {"body_chunks": [body[i : i + 65536] for i in range(0, len(body), 65536)]}
            ),
        )
        assert response.status == 413
        assert response.json()["error"]["code"] == "request_too_large"
        assert await balance(env) == 0
        assert recorder.events == []


async def test_without_a_secret_configured_the_endpoint_does_not_exist() -> None:
    async with provisioned() as env:
        body = paid(env)
        response = await post(env, body)
        assert response.status == 404
        assert response.json()["error"]["type"] == "not_found_error"
        assert await balance(env) == 0


def official_header(body: bytes, secret: str, timestamp: int, *extra: str) -> str:
    """A header made with the ``stripe`` package's own signing code, plus ``extra`` elements."""
    signature = stripe.WebhookSignature._compute_signature(f"{timestamp}.{body.decode()}", secret)
    return ",".join([f"t={timestamp}", f"v1={signature}", *extra])


async def test_headers_made_by_stripes_own_code_are_accepted() -> None:
    async with stripe_gateway() as (env, recorder):
        now = int(env.clock())
        body = paid(env)
        response = await post(env, body, header=official_header(body, SECRET, now))
        assert response.status == 200
        assert await balance(env) == 20_000_000
        # While a secret is rolled Stripe signs with both, and a legacy v0 may follow.
        other = paid(env, "evt_rolled", id="in_rolled")
        rolled = official_header(other, "whsec_the_old_one", now)
        both = official_header(other, SECRET, now, rolled.split(",")[1], "v0=deadbeef")
        assert (await post(env, other, header=both)).status == 200
        assert await balance(env) == 40_000_000
        assert len(of_type(recorder, "payment.succeeded")) == 2


async def test_the_same_event_posted_concurrently_credits_once() -> None:
    async with stripe_gateway() as (env, recorder):
        body = paid(env)
        answers: list[dict[str, Any]] = []

        async def deliver() -> None:
            response = await post(env, body)
            assert response.status == 200
            answers.append(response.json())

        async with anyio.create_task_group() as tasks:
            for _ in range(20):
                tasks.start_soon(deliver)
        assert sorted(a["duplicate"] for a in answers) == [False] + [True] * 19
        assert await balance(env) == 20_000_000
        assert len(recorder.events) == 1


async def test_every_notice_of_one_payment_posted_concurrently_credits_once() -> None:
    async with stripe_gateway() as (env, recorder):
        bodies = [
            paid(env),
            payload(env, "invoice.payment_succeeded", invoice(), event_id="evt_twin"),
            payload(
                env,
                "checkout.session.completed",
                session(invoice=INVOICE_ID, mode="subscription"),
                event_id="evt_checkout",
            ),
        ]
        async with anyio.create_task_group() as tasks:
            for body in bodies * 5:
                tasks.start_soon(post, env, body)
        assert await balance(env) == 20_000_000
        assert len(of_type(recorder, "payment.succeeded")) == 1


async def test_a_failed_payment_posted_concurrently_is_reported_once() -> None:
    async with stripe_gateway() as (env, recorder):
        body = payload(env, "invoice.payment_failed", failed_invoice(), event_id="evt_fail_c")
        async with anyio.create_task_group() as tasks:
            for _ in range(20):
                tasks.start_soon(post, env, body)
        assert len(of_type(recorder, "payment.failed")) == 1
