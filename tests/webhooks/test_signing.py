"""Delivery signatures: X-Service-Signature and Standard Webhooks, checked independently."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from gateway_kit.events import sample_event
from gateway_kit.webhooks import (
    delivery_headers,
    generate_secret,
    sign,
    standard_webhooks_headers,
    standard_webhooks_key,
    verify_signature,
    verify_standard_webhook,
)

README = Path(__file__).resolve().parents[2] / "README.md"

# The README's test vector; the expected values were computed once and are checked here
# against both this package and an independent HMAC.
VECTOR_SECRET = "whsec_c2VjcmV0LWZvci10aGUtcmVhZG1lLXZlY3Rvci0zMmI="
VECTOR_BODY = (
    b'{"event":"key.rotated","event_id":"evt_01hzy3k8c5qv7m2n4p6r8t0w9x",'
    b'"workspace_id":"ws_sample","timestamp":"2026-05-01T12:00:00.000Z",'
    b'"data":{"key_id":"kid_sample","key_prefix":"gk_live_ab12",'
    b'"rotated_at":"2026-05-01T12:00:00.000Z","action":"rotated"}}'
)
VECTOR_SIGNATURE = "37c32046d718b4f717e59333f6542bb352d4f414af08f0c7937d557e103e3b6d"
VECTOR_MSG_ID = "evt_01hzy3k8c5qv7m2n4p6r8t0w9x"
VECTOR_TIMESTAMP = 1777636800
VECTOR_STANDARD_SIGNATURE = "v1,82gNqa0BQsc6bFdrZyMDSAPJ5WQtqZVG8nggCaHUYi4="

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
BODY = sample_event("budget.alert").to_bytes()


def independent_signature(body: bytes, secret: str) -> str:
    """Spec section 5 as a receiver would write it: HMAC-SHA256 of the raw bytes, hex."""
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def independent_standard_signature(msg_id: str, timestamp: int, body: bytes, key: bytes) -> str:
    """The Standard Webhooks scheme: base64 HMAC-SHA256 of ``id.timestamp.body``."""
    content = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


# -- X-Service-Signature ------------------------------------------------------------------------


def test_signature_matches_an_independent_hmac_over_the_raw_bytes() -> None:
    assert sign(BODY, SECRET) == independent_signature(BODY, SECRET)
    assert verify_signature(BODY, independent_signature(BODY, SECRET), SECRET)


def test_the_key_is_the_whole_secret_prefix_included() -> None:
    without_prefix = SECRET.removeprefix("whsec_")
    assert sign(BODY, SECRET) != independent_signature(BODY, without_prefix)
    assert not verify_signature(BODY, sign(BODY, SECRET), without_prefix)


def test_the_readme_test_vector() -> None:
    assert sign(VECTOR_BODY, VECTOR_SECRET) == VECTOR_SIGNATURE
    assert independent_signature(VECTOR_BODY, VECTOR_SECRET) == VECTOR_SIGNATURE
    readme = README.read_text()
    for value in (VECTOR_SECRET, VECTOR_BODY.decode(), VECTOR_SIGNATURE, VECTOR_STANDARD_SIGNATURE):
        assert value in readme


@pytest.mark.parametrize("position", [0, 1, len(BODY) // 2, len(BODY) - 1])
def test_a_one_byte_change_fails(position: int) -> None:
    signature = sign(BODY, SECRET)
    changed = bytearray(BODY)
    changed[position] ^= 0x01
    assert not verify_signature(bytes(changed), signature, SECRET)


def test_a_whitespace_reformat_fails() -> None:
    reformatted = json.dumps(json.loads(BODY), indent=2).encode()
    assert json.loads(reformatted) == json.loads(BODY)
    assert not verify_signature(reformatted, sign(BODY, SECRET), SECRET)


def test_another_secret_fails() -> None:
    assert not verify_signature(BODY, sign(BODY, SECRET), generate_secret())


def test_header_whitespace_and_upper_case_hex_are_tolerated() -> None:
    signature = sign(BODY, SECRET)
    assert verify_signature(BODY, f"  {signature.upper()}\n", SECRET)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "   ",
        "zz" * 32,
        "ab" * 31 + "a",
        "ab" * 33,
        "sha256=" + "ab" * 32,
        None,
        b"ab" * 32,
        12,
    ],
    ids=["empty", "blank", "not-hex", "63-chars", "66-chars", "prefixed", "none", "bytes", "int"],
)
def test_malformed_headers_are_false_not_errors(header: object) -> None:
    assert verify_signature(BODY, header, SECRET) is False  # type: ignore[arg-type]


def test_bad_bodies_and_secrets_are_false_not_errors() -> None:
    signature = sign(BODY, SECRET)
    assert verify_signature(BODY.decode(), signature, SECRET) is False  # type: ignore[arg-type]
    assert verify_signature(5, signature, SECRET) is False  # type: ignore[arg-type]
    assert verify_signature(BODY, signature, "") is False


def test_signing_with_an_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        sign(BODY, "")


# -- Standard Webhooks --------------------------------------------------------------------------


def test_standard_signature_matches_an_independent_implementation() -> None:
    headers = standard_webhooks_headers("evt_1", 1_700_000_000, BODY, SECRET)
    expected = independent_standard_signature("evt_1", 1_700_000_000, BODY, b"k" * 32)
    assert headers == {
        "webhook-id": "evt_1",
        "webhook-timestamp": "1700000000",
        "webhook-signature": expected,
    }


def test_the_readme_standard_webhooks_vector() -> None:
    headers = standard_webhooks_headers(VECTOR_MSG_ID, VECTOR_TIMESTAMP, VECTOR_BODY, VECTOR_SECRET)
    assert headers["webhook-signature"] == VECTOR_STANDARD_SIGNATURE
    key = base64.b64decode(VECTOR_SECRET.removeprefix("whsec_"))
    assert (
        independent_standard_signature(VECTOR_MSG_ID, VECTOR_TIMESTAMP, VECTOR_BODY, key)
        == VECTOR_STANDARD_SIGNATURE
    )


@pytest.mark.parametrize(
    "secret",
    [
        SECRET,
        generate_secret(),
        "whsec_" + base64.b64encode(b"twenty-four-byte-secret!").decode().rstrip("="),
        "whsec_mysecret123",
    ],
    ids=["padded", "generated", "unpadded", "word"],
)
def test_the_standardwebhooks_package_verifies_our_headers(secret: str) -> None:
    import time

    now = int(time.time())
    headers = standard_webhooks_headers("evt_1", now, BODY, secret)
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    tampered = BODY.replace(b"warn", b"bloc")
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(tampered, headers)


@pytest.mark.parametrize(
    ("secret", "key"),
    [
        ("whsec_" + base64.b64encode(b"k" * 32).decode(), b"k" * 32),
        ("whsec_a2V5", b"key"),
        ("whsec_not base64!", b"whsec_not base64!"),
        ("whsec_abcde", b"whsec_abcde"),
        ("whsec_", b"whsec_"),
        ("plain-secret", b"plain-secret"),
    ],
)
def test_standard_webhooks_key_rule(secret: str, key: bytes) -> None:
    assert standard_webhooks_key(secret) == key


def verified(headers: dict[str, str], body: bytes = BODY, **options: float) -> bool:
    return verify_standard_webhook(headers, body, SECRET, **options)  # type: ignore[arg-type]


def test_verify_standard_webhook_accepts_a_fresh_delivery() -> None:
    headers = standard_webhooks_headers("evt_1", 1_700_000_000, BODY, SECRET)
    assert verified(headers, now=1_700_000_000)
    assert verified({name.title(): value for name, value in headers.items()}, now=1_700_000_000)


@pytest.mark.parametrize(
    ("offset", "fresh"), [(-300, True), (300, True), (-301, False), (301, False)]
)
def test_verify_standard_webhook_checks_the_timestamp(offset: int, fresh: bool) -> None:
    headers = standard_webhooks_headers("evt_1", 1_700_000_000, BODY, SECRET)
    assert verified(headers, now=1_700_000_000 + offset) is fresh


def test_verify_standard_webhook_accepts_any_listed_v1_signature() -> None:
    good = standard_webhooks_headers("evt_1", 1_700_000_000, BODY, SECRET)
    listed = {**good, "webhook-signature": "v1,AAAA v2,BBBB " + good["webhook-signature"]}
    assert verified(listed, now=1_700_000_000)


@pytest.mark.parametrize(
    "change",
    [
        {"webhook-signature": "v2," + "A" * 44},
        {"webhook-signature": "v1,not base64!"},
        {"webhook-signature": ""},
        {"webhook-timestamp": "soon"},
        {"webhook-timestamp": "-1700000000"},
        {"webhook-id": "evt_2"},
        {"webhook-id": ""},
    ],
)
def test_verify_standard_webhook_refuses_bad_headers(change: dict[str, str]) -> None:
    headers = standard_webhooks_headers("evt_1", 1_700_000_000, BODY, SECRET)
    assert not verified({**headers, **change}, now=1_700_000_000)


def test_verify_standard_webhook_refuses_a_changed_body_or_missing_headers() -> None:
    headers = standard_webhooks_headers("evt_1", 1_700_000_000, BODY, SECRET)
    assert not verified(headers, BODY + b" ", now=1_700_000_000)
    assert not verified({"webhook-id": "evt_1"}, now=1_700_000_000)
    assert not verify_standard_webhook(headers, BODY, "", now=1_700_000_000)


# -- what an attempt sends ----------------------------------------------------------------------


def test_delivery_headers_carry_both_schemes_and_the_event_id() -> None:
    headers = delivery_headers("evt_abc", BODY, SECRET, now=1_700_000_000.9)
    assert headers == {
        "Content-Type": "application/json",
        "X-Service-Signature": independent_signature(BODY, SECRET),
        "X-Service-Event-Id": "evt_abc",
        "webhook-id": "evt_abc",
        "webhook-timestamp": "1700000000",
        "webhook-signature": independent_standard_signature(
            "evt_abc", 1_700_000_000, BODY, b"k" * 32
        ),
    }


def test_each_attempt_is_re_signed_with_its_own_time() -> None:
    first = delivery_headers("evt_abc", BODY, SECRET, now=1_700_000_000)
    retry = delivery_headers("evt_abc", BODY, SECRET, now=1_700_000_005)
    assert first["X-Service-Signature"] == retry["X-Service-Signature"]
    assert first["webhook-id"] == retry["webhook-id"]
    assert first["webhook-signature"] != retry["webhook-signature"]
    assert verify_standard_webhook(retry, BODY, SECRET, now=1_700_000_005)


def test_generated_secrets_are_32_random_bytes_behind_the_prefix() -> None:
    secrets = {generate_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
        assert standard_webhooks_key(secret) == base64.b64decode(secret.removeprefix("whsec_"))
