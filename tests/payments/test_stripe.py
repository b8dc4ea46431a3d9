"""Stripe webhooks: our verifier and signer against Stripe's own library, and payment parsing."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest
import stripe

from gateway_kit.exceptions import GatewayError, SignatureError
from gateway_kit.payments import (
    PaymentNotice,
    parse_payment,
    sign_stripe_payload,
    verify_stripe_event,
)
from gateway_kit.payments.stripe import UnreadableEventError
from tests.payments.stripe_events import (
    event,
    failed_invoice,
    invoice,
    session,
    subscription_invoice,
)

# The README's test vector; the header was computed once and is checked here against this
# package, an independent HMAC and Stripe's own library.
VECTOR_SECRET = "whsec_readme_vector_not_a_real_secret"
VECTOR_TIMESTAMP = 1777636800
VECTOR_PAYLOAD = (
    b'{"id":"evt_readme_vector","object":"event","type":"invoice.paid","data":{"object":'
    b'{"id":"in_readme_vector","object":"invoice","amount_paid":2000,"currency":"usd",'
    b'"metadata":{"workspace_id":"ws_sample"}}}}'
)
VECTOR_HEADER = "t=1777636800,v1=dafe574a79301d19d77b06fd27959093811ee97bf05a8f5a098a35d82ce92bee"

SECRET = "whsec_Jd8qS0vXo3nT6kYb1Lr4Wm7Pz2Hc5Fg9"
NOW = 1_777_636_800
PAYLOAD = json.dumps(event("invoice.paid", invoice(), event_id="evt_1SGk3iLkdIwHu7ixR5hY")).encode()


def official_header(payload: bytes, secret: str, timestamp: int, *extra: str) -> str:
    """A header made with the official library's own signing code, plus ``extra`` elements."""
    signature = stripe.WebhookSignature._compute_signature(
        f"{timestamp}.{payload.decode()}", secret
    )
    return ",".join([f"t={timestamp}", f"v1={signature}", *extra])


def rejection(payload: bytes, header: str, secret: str = SECRET, **kwargs: float) -> str:
    with pytest.raises(SignatureError) as caught:
        verify_stripe_event(payload, header, secret, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    if secret.strip():
        assert secret not in message
    return message


# -- the fixed vector ---------------------------------------------------------------------------


def test_the_readme_test_vector() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for value in (VECTOR_SECRET, str(VECTOR_TIMESTAMP), VECTOR_PAYLOAD.decode(), VECTOR_HEADER):
        assert value in readme
    assert sign_stripe_payload(VECTOR_PAYLOAD, VECTOR_SECRET, timestamp=VECTOR_TIMESTAMP) == (
        VECTOR_HEADER
    )
    independent = hmac.new(
        VECTOR_SECRET.encode(), f"{VECTOR_TIMESTAMP}.".encode() + VECTOR_PAYLOAD, hashlib.sha256
    ).hexdigest()
    assert f"t={VECTOR_TIMESTAMP},v1={independent}" == VECTOR_HEADER
    assert (
        stripe.WebhookSignature.generate_signature_header(
            VECTOR_PAYLOAD.decode(), VECTOR_SECRET, VECTOR_TIMESTAMP
        )
        == VECTOR_HEADER
    )
    verified = verify_stripe_event(
        VECTOR_PAYLOAD, VECTOR_HEADER, VECTOR_SECRET, now=VECTOR_TIMESTAMP
    )
    notice = parse_payment(verified)
    assert notice is not None
    assert (notice.workspace_id, notice.micro_usd) == ("ws_sample", 20_000_000)


# -- interoperability with the official library -------------------------------------------------

BODIES = [
    PAYLOAD,
    json.dumps(event("customer.created", {"id": "cus_1", "name": "Zoë 🚀"}, event_id="evt_u"))
    .replace(" ", "")
    .encode(),
    json.dumps(
        {"id": "evt_x", "type": "x", "data": {"object": {"n": "é"}}}, ensure_ascii=False
    ).encode(),
]


@pytest.mark.parametrize("payload", BODIES, ids=["invoice", "escaped-unicode", "raw-utf8"])
def test_our_headers_verify_with_the_official_library(payload: bytes) -> None:
    header = sign_stripe_payload(payload, SECRET, timestamp=int(time.time()))
    assert stripe.WebhookSignature.verify_header(payload, header, SECRET, tolerance=300)
    constructed = stripe.Webhook.construct_event(payload, header, SECRET)
    assert constructed.id == json.loads(payload)["id"]


@pytest.mark.parametrize("payload", BODIES, ids=["invoice", "escaped-unicode", "raw-utf8"])
def test_official_headers_verify_with_ours(payload: bytes) -> None:
    generated = stripe.WebhookSignature.generate_signature_header(payload.decode(), SECRET, NOW)
    assert verify_stripe_event(payload, generated, SECRET, now=NOW) == json.loads(payload)
    computed = official_header(payload, SECRET, NOW, "v0=" + "0" * 64)
    assert (
        verify_stripe_event(payload, computed, SECRET, now=NOW)["id"] == json.loads(payload)["id"]
    )


def test_an_older_secret_during_a_roll_still_verifies() -> None:
    """While a secret is rolled Stripe signs with both: one header, two v1 elements."""
    old = official_header(PAYLOAD, "whsec_old", NOW)
    new = official_header(PAYLOAD, SECRET, NOW).split(",")[1]
    header = f"{old},{new}"
    assert verify_stripe_event(PAYLOAD, header, SECRET, now=NOW)["type"] == "invoice.paid"
    assert verify_stripe_event(PAYLOAD, header, "whsec_old", now=NOW)["type"] == "invoice.paid"


def _tampered() -> bytes:
    changed = bytearray(PAYLOAD)
    changed[len(changed) // 2] ^= 0x01
    return bytes(changed)


@pytest.mark.parametrize(
    ("payload", "header", "secret"),
    [
        (_tampered(), official_header(PAYLOAD, SECRET, NOW), SECRET),
        (PAYLOAD, official_header(PAYLOAD, SECRET, NOW), "whsec_another"),
        (PAYLOAD, f"t={NOW},v1={official_header(PAYLOAD, SECRET, NOW)[-64:].upper()}", SECRET),
        (PAYLOAD, official_header(PAYLOAD, SECRET, NOW - 301), SECRET),
        (PAYLOAD, f"t={NOW}", SECRET),
        (PAYLOAD, f"t={NOW},v0={'0' * 64}", SECRET),
        (PAYLOAD, "", SECRET),
        (PAYLOAD, official_header(PAYLOAD, SECRET, NOW), ""),
    ],
    ids=[
        "tampered",
        "wrong-secret",
        "upper-case-hex",
        "expired",
        "no-v1",
        "only-v0",
        "no-header",
        "no-secret",
    ],
)
def test_both_verifiers_refuse_the_same_headers(
    payload: bytes, header: str, secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: float(NOW))
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(payload, header, secret, tolerance=300)
    rejection(payload, header, secret)


# -- verification -------------------------------------------------------------------------------


def test_a_fresh_signed_event_is_returned_parsed() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    assert verify_stripe_event(PAYLOAD, header, SECRET, now=NOW) == json.loads(PAYLOAD)


def test_now_defaults_to_the_clock() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=int(time.time()))
    assert verify_stripe_event(PAYLOAD, header, SECRET)["object"] == "event"
    stale = sign_stripe_payload(PAYLOAD, SECRET, timestamp=int(time.time()) - 10_000)
    assert "old" in rejection(PAYLOAD, stale)


@pytest.mark.parametrize("position", [0, 1, len(PAYLOAD) // 2, len(PAYLOAD) - 1])
def test_a_one_byte_change_to_the_body_fails(position: int) -> None:
    changed = bytearray(PAYLOAD)
    changed[position] ^= 0x01
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    assert "no Stripe-Signature v1 signature matches" in rejection(bytes(changed), header, now=NOW)


def test_a_whitespace_reformat_of_the_body_fails() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    reformatted = json.dumps(json.loads(PAYLOAD), indent=2).encode()
    assert "matches" in rejection(reformatted, header, now=NOW)


def test_the_key_is_the_whole_secret_not_its_decoded_tail() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    rejection(PAYLOAD, header, SECRET.removeprefix("whsec_"), now=NOW)


def test_the_timestamp_is_signed_too() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    replayed = header.replace(f"t={NOW}", f"t={NOW + 60}")
    assert "matches" in rejection(PAYLOAD, replayed, now=NOW)


@pytest.mark.parametrize(("offset", "tolerance"), [(300, 300), (-300, 300), (0, 0), (5, 10)])
def test_timestamps_within_the_tolerance_either_way_pass(offset: int, tolerance: int) -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW + offset)
    assert verify_stripe_event(PAYLOAD, header, SECRET, tolerance=tolerance, now=NOW)


def test_an_event_older_than_the_tolerance_fails() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW - 301)
    assert "301 s old" in rejection(PAYLOAD, header, now=NOW)
    assert "old" in rejection(PAYLOAD, header, now=NOW - 0.5, tolerance=0)


def test_an_event_from_beyond_the_tolerance_in_the_future_fails() -> None:
    """Stripe's library only refuses old timestamps; a future one is a clock off or a forgery."""
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW + 301)
    assert "301 s in the future" in rejection(PAYLOAD, header, now=NOW)
    assert "future" in rejection(PAYLOAD, header, now=NOW + 290, tolerance=10)


def test_tolerance_zero_is_this_second_not_no_check() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW - 86_400)
    assert "old" in rejection(PAYLOAD, header, now=NOW, tolerance=0)


def test_a_negative_tolerance_is_a_programming_error() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    with pytest.raises(ValueError, match="tolerance"):
        verify_stripe_event(PAYLOAD, header, SECRET, tolerance=-1, now=NOW)


def test_the_signature_is_checked_before_the_time() -> None:
    """As in Stripe's library: an unauthenticated header learns nothing about the clock."""
    header = sign_stripe_payload(PAYLOAD, "whsec_another", timestamp=NOW - 10_000)
    assert "matches" in rejection(PAYLOAD, header, now=NOW)


def test_multiple_v1_with_one_valid_pass() -> None:
    valid = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW).split(",")[1]
    for header in (
        f"t={NOW},v1={'a' * 64},{valid},v1=",
        f"{valid},t={NOW},v0={'b' * 64},v1=nothex",
        f"t={NOW},v1=é,{valid}",
    ):
        assert verify_stripe_event(PAYLOAD, header, SECRET, now=NOW)["id"].startswith("evt_")


def test_spaces_around_elements_are_tolerated() -> None:
    signature = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW).split("v1=")[1]
    header = f" t = {NOW} , v1 = {signature} "
    assert verify_stripe_event(PAYLOAD, header, SECRET, now=NOW)


def test_unknown_elements_are_ignored() -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW) + ",v2=whatever,x,=,,"
    assert verify_stripe_event(PAYLOAD, header, SECRET, now=NOW)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("", "missing"),
        ("   ", "missing"),
        (None, "missing"),
        ("garbage", "t=<unix seconds>"),
        (f"v1={'a' * 64}", "t=<unix seconds>"),
        (f"t=,v1={'a' * 64}", "t=<unix seconds>"),
        (f"t,v1={'a' * 64}", "t=<unix seconds>"),
        (f"t=abc,v1={'a' * 64}", "t=<unix seconds>"),
        (f"t=-5,v1={'a' * 64}", "t=<unix seconds>"),
        (f"t=1.5,v1={'a' * 64}", "t=<unix seconds>"),
        (f"t=+{NOW},v1={'a' * 64}", "t=<unix seconds>"),
        (f"t=\uff11\uff12\uff13,v1={'a' * 64}", "t=<unix seconds>"),
        (f"t={'9' * 5000},v1={'a' * 64}", "t=<unix seconds>"),
        (f"t={NOW},t={NOW},v1={'a' * 64}", "t=<unix seconds>"),
        (f"t={NOW}", "no v1 signature"),
        (f"t={NOW},v0={'a' * 64}", "no v1 signature"),
        (f"t={NOW};v1={'a' * 64}", "t=<unix seconds>"),
        (f"t={NOW},v1", "matches"),
        (f"t={NOW},v1=", "matches"),
        (f"t={NOW},v1={'a' * 63}", "matches"),
    ],
    ids=[
        "empty",
        "blank",
        "none",
        "garbage",
        "no-t",
        "empty-t",
        "bare-t",
        "t-not-digits",
        "t-negative",
        "t-fraction",
        "t-plus-sign",
        "t-full-width-digits",
        "t-huge",
        "t-twice",
        "t-only",
        "v0-only",
        "semicolons",
        "bare-v1",
        "empty-v1",
        "short-v1",
    ],
)
def test_malformed_headers_fail_with_a_reason(header: str, reason: str) -> None:
    assert reason in rejection(PAYLOAD, header, now=NOW)


@pytest.mark.parametrize("secret", ["", "  \n"])
def test_a_missing_secret_fails(secret: str) -> None:
    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    assert "secret" in rejection(PAYLOAD, header, secret, now=NOW)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "not UTF-8 JSON"),
        (b"", "not UTF-8 JSON"),
        (b'{"id": "evt_1", "type": "x", "data": {"object": {}}', "not UTF-8 JSON"),
        (b'\xff{"id": "evt_1"}', "not UTF-8 JSON"),
        ('{"id":"evt_1"}'.encode("utf-16"), "not UTF-8 JSON"),
        (b'{"id": "evt_1", "type": "x", "data": {"object": {"n": NaN}}}', "not UTF-8 JSON"),
        (b"[" * 100_000, "not UTF-8 JSON"),
        (b'{"id": "evt_1\\ud800", "type": "x", "data": {"object": {}}}', "lone surrogate"),
        (b'{"id": "evt_1", "type": "x\\uDFFF", "data": {"object": {}}}', "lone surrogate"),
        (b'{"id": "evt_' + b"1" * 300 + b'", "type": "x", "data": {"object": {}}}', "no evt_ id"),
        (b'["evt_1"]', "not a JSON object"),
        (b'"evt_1"', "not a JSON object"),
        (b'{"type": "invoice.paid", "data": {"object": {}}}', "no evt_ id"),
        (b'{"id": 7, "type": "invoice.paid", "data": {"object": {}}}', "no evt_ id"),
        (b'{"id": "in_1", "type": "invoice.paid", "data": {"object": {}}}', "no evt_ id"),
        (b'{"id": "evt_1", "data": {"object": {}}}', "has no type"),
        (b'{"id": "evt_1", "type": "", "data": {"object": {}}}', "has no type"),
        (b'{"id": "evt_1", "type": ["x"], "data": {"object": {}}}', "has no type"),
        (b'{"id": "evt_1", "type": "invoice.paid"}', "no data.object"),
        (b'{"id": "evt_1", "type": "invoice.paid", "data": {}}', "no data.object"),
        (b'{"id": "evt_1", "type": "invoice.paid", "data": {"object": "in_1"}}', "no data.object"),
        (
            b'{"id": "evt_1", "object": "v2.core.event", "type": "v1.billing.meter.error_report",'
            b' "related_object": {"id": "mtr_1"}}',
            "thin (v2)",
        ),
    ],
    ids=[
        "not-json",
        "empty",
        "truncated",
        "not-utf8",
        "utf16",
        "nan",
        "deeply-nested",
        "surrogate-id",
        "surrogate-type",
        "long-id",
        "array",
        "string",
        "no-id",
        "id-not-string",
        "id-not-evt",
        "no-type",
        "empty-type",
        "type-not-string",
        "no-data",
        "no-object",
        "object-not-object",
        "thin-event",
    ],
)
def test_authentic_bodies_that_are_not_stripe_events_fail(payload: bytes, reason: str) -> None:
    header = sign_stripe_payload(payload, SECRET, timestamp=NOW)
    assert reason in rejection(payload, header, now=NOW)


def test_signature_errors_are_gateway_errors_and_value_errors() -> None:
    error = SignatureError("x")
    assert isinstance(error, GatewayError)
    assert isinstance(error, ValueError)


# -- signing ------------------------------------------------------------------------------------


def test_signing_is_stripes_format() -> None:
    header = sign_stripe_payload(b"{}", SECRET, timestamp=1)
    stamp, signature = header.split(",")
    assert stamp == "t=1"
    assert signature.startswith("v1=")
    assert len(signature) == 3 + 64
    assert signature[3:] == signature[3:].lower()


@pytest.mark.parametrize("secret", ["", " "])
def test_signing_with_an_empty_secret_is_refused(secret: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        sign_stripe_payload(PAYLOAD, secret, timestamp=NOW)


@pytest.mark.parametrize("timestamp", [-1, True, 1.5])
def test_signing_needs_whole_unix_seconds(timestamp: int) -> None:
    with pytest.raises(ValueError, match="timestamp"):
        sign_stripe_payload(PAYLOAD, SECRET, timestamp=timestamp)


# -- parse_payment ------------------------------------------------------------------------------


def test_a_paid_invoice_is_a_succeeded_notice() -> None:
    notice = parse_payment(event("invoice.paid", invoice(), event_id="evt_paid"))
    assert notice == PaymentNotice(
        event_id="evt_paid",
        kind="succeeded",
        workspace_id="ws_acme",
        amount_minor=2000,
        currency="usd",
        invoice_id="in_1SGk2hLkdIwHu7ixQq0pTz9a",
        credit_key="invoice:in_1SGk2hLkdIwHu7ixQq0pTz9a",
        failure_code=None,
        attempt_count=1,
    )
    assert notice.micro_usd == 20_000_000


def test_paid_and_payment_succeeded_for_one_invoice_share_the_credit_key() -> None:
    """Stripe sends both for one payment: the wallet must credit the invoice once."""
    paid = parse_payment(event("invoice.paid", invoice(), event_id="evt_a"))
    succeeded = parse_payment(event("invoice.payment_succeeded", invoice(), event_id="evt_b"))
    assert paid is not None
    assert succeeded is not None
    assert paid.event_id != succeeded.event_id
    assert paid.credit_key == succeeded.credit_key == "invoice:in_1SGk2hLkdIwHu7ixQq0pTz9a"
    assert dataclasses.replace(succeeded, event_id="evt_a") == paid


def test_the_amount_credited_is_amount_paid() -> None:
    notice = parse_payment(
        event("invoice.paid", invoice(amount_due=2500, amount_paid=2000), event_id="evt_1")
    )
    assert notice is not None
    assert notice.amount_minor == 2000


def test_a_failed_payment_carries_the_attempt_count_and_amount_due() -> None:
    notice = parse_payment(
        event("invoice.payment_failed", failed_invoice(amount_due=4200), event_id="evt_fail")
    )
    assert notice is not None
    assert (notice.kind, notice.amount_minor, notice.attempt_count) == ("failed", 4200, 2)
    assert notice.invoice_id == "in_1SGk2hLkdIwHu7ixQq0pTz9a"
    assert notice.credit_key is None
    assert notice.failure_code == "unknown"  # the charge is a bare id, as webhooks send it


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"charge": "ch_3SGk5aLkdIwHu7ix1"}, "unknown"),
        ({"charge": {"id": "ch_1", "failure_code": "card_declined"}}, "card_declined"),
        (
            {"payment_intent": {"id": "pi_1", "last_payment_error": {"code": "expired_card"}}},
            "expired_card",
        ),
        (
            {"last_finalization_error": {"code": "customer_tax_location_invalid"}},
            "customer_tax_location_invalid",
        ),
        ({"charge": {"id": "ch_1", "failure_code": None}}, "unknown"),
    ],
    ids=["charge-id", "expanded-charge", "expanded-intent", "finalization", "no-code"],
)
def test_the_failure_code_comes_from_what_the_invoice_carries(
    changes: dict[str, object], code: str
) -> None:
    notice = parse_payment(event("invoice.payment_failed", failed_invoice(**changes), event_id="e"))
    assert notice is not None
    assert notice.failure_code == code


@pytest.mark.parametrize("attempts", [None, 0, "3", True, 1001, 10**19])
def test_the_attempt_count_is_at_least_one(attempts: object) -> None:
    obj = failed_invoice(attempt_count=attempts)
    if attempts is None:
        del obj["attempt_count"]
    notice = parse_payment(event("invoice.payment_failed", obj, event_id="evt_1"))
    assert notice is not None
    assert notice.attempt_count == 1


@pytest.mark.parametrize("code", ["\x1b[2Jcard_declined", "x" * 101, "card declined", 7])
def test_a_failure_code_that_is_no_code_reads_as_unknown(code: object) -> None:
    obj = failed_invoice(last_finalization_error={"code": code})
    notice = parse_payment(event("invoice.payment_failed", obj, event_id="evt_1"))
    assert notice is not None
    assert notice.failure_code == "unknown"


@pytest.mark.parametrize("invoice_id", ["in_\x1b[2J", "in_\ud800", "in_" + "x" * 200, "in 1", ""])
def test_an_invoice_id_that_is_no_stripe_id_fails(invoice_id: str) -> None:
    with pytest.raises(SignatureError, match="has no id"):
        parse_payment(event("invoice.paid", invoice(id=invoice_id), event_id="evt_1"))


@pytest.mark.parametrize(
    ("field", "amount"), [("amount_paid", 10**12), ("amount_paid", 10**19), ("amount_due", 10**15)]
)
def test_amounts_of_more_than_twelve_digits_fail(field: str, amount: int) -> None:
    kind, obj = (
        ("invoice.paid", invoice(amount_paid=amount))
        if field == "amount_paid"
        else ("invoice.payment_failed", failed_invoice(amount_due=amount))
    )
    with pytest.raises(SignatureError, match=f"{field} has more than 12 digits"):
        parse_payment(event(kind, obj, event_id="evt_1"))


def test_twelve_digits_are_read_and_fit_a_counter_in_micro_usd() -> None:
    notice = parse_payment(event("invoice.paid", invoice(amount_paid=10**12 - 1), event_id="e"))
    assert notice is not None
    assert notice.micro_usd == (10**12 - 1) * 10_000 < 2**63


def test_a_subscription_invoice_finds_the_workspace_in_the_subscription_metadata() -> None:
    notice = parse_payment(event("invoice.paid", subscription_invoice(), event_id="evt_sub"))
    assert notice is not None
    assert notice.workspace_id == "ws_acme"
    assert notice.credit_key == "invoice:in_1SHr7uLkdIwHu7ixW2s9KbLm"


def test_pre_2025_subscription_details_are_read_too() -> None:
    obj = subscription_invoice(parent=None)
    obj["subscription_details"] = {"metadata": {"workspace_id": "ws_legacy"}}
    notice = parse_payment(event("invoice.paid", obj, event_id="evt_old"))
    assert notice is not None
    assert notice.workspace_id == "ws_legacy"


def test_the_invoices_own_metadata_wins() -> None:
    obj = subscription_invoice(metadata={"workspace_id": "ws_invoice"})
    notice = parse_payment(event("invoice.paid", obj, event_id="evt_1"))
    assert notice is not None
    assert notice.workspace_id == "ws_invoice"


def test_a_paid_checkout_session_is_a_succeeded_notice() -> None:
    cs = session()
    notice = parse_payment(event("checkout.session.completed", cs, event_id="evt_cs"))
    assert notice == PaymentNotice(
        event_id="evt_cs",
        kind="succeeded",
        workspace_id="ws_acme",
        amount_minor=2000,
        currency="usd",
        invoice_id=cs["id"],
        credit_key=f"checkout:{cs['id']}",
    )


def test_a_checkout_session_falls_back_to_client_reference_id() -> None:
    cs = session(metadata={}, client_reference_id="ws_from_ref")
    notice = parse_payment(event("checkout.session.completed", cs, event_id="evt_cs"))
    assert notice is not None
    assert notice.workspace_id == "ws_from_ref"
    cs = session(client_reference_id="ws_from_ref")
    notice = parse_payment(event("checkout.session.completed", cs, event_id="evt_cs"))
    assert notice is not None
    assert notice.workspace_id == "ws_acme"


def test_a_subscription_checkout_and_its_first_invoice_credit_once() -> None:
    """Checkout in subscription mode also sends invoice.paid for the same money."""
    first = subscription_invoice()
    cs = session(
        mode="subscription",
        invoice=first["id"],
        subscription="sub_1SHr7tLkdIwHu7ixpP3mN0xZ",
        payment_intent=None,
    )
    via_session = parse_payment(event("checkout.session.completed", cs, event_id="evt_1"))
    via_invoice = parse_payment(event("invoice.paid", first, event_id="evt_2"))
    assert via_session is not None
    assert via_invoice is not None
    assert via_session.credit_key == via_invoice.credit_key == f"invoice:{first['id']}"
    assert via_session.invoice_id == first["id"]
    expanded = session(invoice={"id": first["id"], "object": "invoice"})
    notice = parse_payment(event("checkout.session.completed", expanded, event_id="evt_3"))
    assert notice is not None
    assert notice.credit_key == f"invoice:{first['id']}"


@pytest.mark.parametrize("status", ["unpaid", "no_payment_required", None])
def test_a_completed_but_unpaid_checkout_session_is_ignored(status: str | None) -> None:
    cs = session(payment_status=status)
    assert parse_payment(event("checkout.session.completed", cs, event_id="evt_1")) is None


def test_an_async_payment_that_succeeds_later_is_a_succeeded_notice() -> None:
    cs = session(payment_method_types=["us_bank_account"])
    completed = parse_payment(
        event("checkout.session.completed", {**cs, "payment_status": "unpaid"}, event_id="evt_1")
    )
    later = parse_payment(event("checkout.session.async_payment_succeeded", cs, event_id="evt_2"))
    assert completed is None
    assert later is not None
    assert (later.kind, later.event_id, later.credit_key) == (
        "succeeded",
        "evt_2",
        f"checkout:{cs['id']}",
    )


@pytest.mark.parametrize(
    ("event_type", "obj"),
    [
        ("customer.created", {"id": "cus_1", "object": "customer", "metadata": {}}),
        ("charge.succeeded", {"id": "ch_1", "object": "charge", "amount": 2000}),
        ("payment_intent.succeeded", {"id": "pi_1", "object": "payment_intent"}),
        ("invoice.finalized", invoice()),
        ("invoice.created", invoice()),
        ("checkout.session.async_payment_failed", session(payment_status="unpaid")),
        ("checkout.session.expired", session(payment_status="unpaid", status="expired")),
    ],
)
def test_other_event_types_are_ignored(event_type: str, obj: dict[str, object]) -> None:
    assert parse_payment(event(event_type, obj, event_id="evt_1")) is None


@pytest.mark.parametrize(
    ("event_type", "obj"),
    [
        ("invoice.paid", invoice(metadata={})),
        ("invoice.paid", invoice(metadata=None)),
        ("invoice.paid", invoice(metadata={"workspace_id": ""})),
        ("invoice.paid", invoice(metadata={"workspace_id": 42})),
        ("invoice.payment_failed", failed_invoice(metadata={"other": "x"})),
        ("invoice.paid", subscription_invoice(parent={"type": "quote_details"})),
        ("checkout.session.completed", session(metadata={})),
        ("checkout.session.async_payment_succeeded", session(metadata=None)),
    ],
)
def test_events_without_a_workspace_are_ignored(event_type: str, obj: dict[str, object]) -> None:
    assert parse_payment(event(event_type, obj, event_id="evt_1")) is None


@pytest.mark.parametrize(
    ("event_type", "obj"),
    [
        ("invoice.paid", invoice(amount_paid=0)),
        ("checkout.session.completed", session(amount_total=0)),
    ],
)
def test_zero_amount_payments_are_ignored(event_type: str, obj: dict[str, object]) -> None:
    assert parse_payment(event(event_type, obj, event_id="evt_1")) is None


def test_other_currencies_keep_minor_units_and_have_no_micro_usd() -> None:
    """The wallet is USD-only; jpy is zero-decimal, so 2000 means ¥2000."""
    notice = parse_payment(event("invoice.paid", invoice(currency="JPY"), event_id="evt_1"))
    assert notice is not None
    assert (notice.amount_minor, notice.currency, notice.micro_usd) == (2000, "jpy", None)


@pytest.mark.parametrize(
    ("event_type", "obj", "reason"),
    [
        ("invoice.paid", invoice(amount_paid=None), "amount_paid"),
        ("invoice.paid", invoice(amount_paid="2000"), "amount_paid"),
        ("invoice.paid", invoice(amount_paid=20.0), "amount_paid"),
        ("invoice.paid", invoice(amount_paid=-1), "amount_paid"),
        ("invoice.paid", invoice(amount_paid=True), "amount_paid"),
        ("invoice.payment_failed", failed_invoice(amount_due=None), "amount_due"),
        ("invoice.paid", invoice(currency=None), "currency"),
        ("invoice.paid", invoice(currency="usdollar"), "currency"),
        ("invoice.paid", invoice(id=None), "no id"),
        ("checkout.session.completed", session(amount_total=None), "amount_total"),
        ("checkout.session.completed", session(id=""), "no id"),
    ],
)
def test_handled_events_with_malformed_money_raise_rather_than_vanish(
    event_type: str, obj: dict[str, object], reason: str
) -> None:
    with pytest.raises(SignatureError, match=reason):
        parse_payment(event(event_type, obj, event_id="evt_1"))


def test_events_of_any_shape_with_other_types_are_ignored() -> None:
    assert parse_payment({}) is None
    assert parse_payment({"type": ["invoice.paid"], "data": None}) is None


def test_a_handled_type_without_an_object_raises() -> None:
    with pytest.raises(SignatureError):
        parse_payment({"id": "evt_1", "type": "invoice.paid", "data": {}})
    with pytest.raises(SignatureError):
        parse_payment({"type": "invoice.paid", "data": {"object": invoice()}})


def test_a_notice_is_immutable() -> None:
    notice = parse_payment(event("invoice.paid", invoice(), event_id="evt_1"))
    assert notice is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        notice.amount_minor = 1  # type: ignore[misc]


def test_signed_verified_and_parsed_end_to_end() -> None:
    body = json.dumps(
        event("invoice.payment_failed", failed_invoice(), event_id="evt_1SGk9zLkdIwHu7ix")
    ).encode()
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), SECRET, NOW)
    notice = parse_payment(verify_stripe_event(body, header, SECRET, now=NOW + 42))
    assert notice is not None
    assert (notice.kind, notice.workspace_id, notice.attempt_count) == ("failed", "ws_acme", 2)


@pytest.mark.parametrize(
    "payload",
    [b"{nope", b"[" * 5000, b'{"n": NaN}', b'"\\ud800"', b'"\xed\xa0\x80"'],
    ids=["not-json", "deep", "nan", "surrogate", "encoded-surrogate"],
)
def test_an_authentic_body_that_is_no_json_to_read_is_told_apart(payload: bytes) -> None:
    header = sign_stripe_payload(payload, SECRET, timestamp=NOW)
    with pytest.raises(UnreadableEventError):
        verify_stripe_event(payload, header, SECRET, now=NOW)
    other = b'{"id": "in_1", "type": "invoice.paid", "data": {"object": {}}}'
    with pytest.raises(SignatureError) as caught:
        verify_stripe_event(
            other, sign_stripe_payload(other, SECRET, timestamp=NOW), SECRET, now=NOW
        )
    assert not isinstance(caught.value, UnreadableEventError)


def test_an_application_reads_the_authentic_body_with_its_own_parser() -> None:
    def strict(payload: bytes) -> object:
        raise ValueError("it nests too deep for us")

    header = sign_stripe_payload(PAYLOAD, SECRET, timestamp=NOW)
    with pytest.raises(UnreadableEventError, match="it nests too deep for us"):
        verify_stripe_event(PAYLOAD, header, SECRET, now=NOW, loads=strict)
    with pytest.raises(SignatureError, match="no Stripe-Signature v1 signature matches"):
        # The signature is checked first: a forged body never reaches the parser.
        verify_stripe_event(PAYLOAD + b" ", header, SECRET, now=NOW, loads=strict)
