"""Signing webhook deliveries, and verifying them on the receiving side.

Two schemes travel on every delivery (DESIGN.md section 5):

- ``X-Service-Signature`` (spec section 5): lowercase hex HMAC-SHA256 of the exact body bytes.
  The key is the UTF-8 bytes of the whole secret string, ``whsec_`` prefix included.
- Standard Webhooks (https://www.standardwebhooks.com): ``webhook-id``, ``webhook-timestamp``
  and ``webhook-signature: v1,<base64>`` over ``{id}.{timestamp}.{body}``, re-signed per
  attempt. Its key follows that spec: for ``whsec_<base64>`` secrets the decoded bytes (so
  off-the-shelf verifiers work); for any other secret the UTF-8 bytes of the whole string.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import time
from collections.abc import Mapping

__all__ = [
    "delivery_headers",
    "generate_secret",
    "sign",
    "standard_webhooks_headers",
    "standard_webhooks_key",
    "verify_signature",
    "verify_standard_webhook",
]

SECRET_PREFIX = "whsec_"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
# Standard alphabet, padding optional: the reference verifiers decode unpadded secrets too.
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def sign(body: bytes, secret: str) -> str:
    """The ``X-Service-Signature`` of ``body``: lowercase hex HMAC-SHA256."""
    if not secret:
        raise ValueError("a webhook secret must not be empty")
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(body: bytes, header: str, secret: str) -> bool:
    """Whether ``header`` is the ``X-Service-Signature`` of the raw ``body`` under ``secret``.

    Constant time. Tolerates surrounding whitespace and upper-case hex; anything malformed
    (empty, wrong length, not hex, not a string) is simply ``False``.
    """
    if not isinstance(header, str) or not isinstance(secret, str) or not secret:
        return False
    candidate = header.strip().lower()
    if not _HEX_DIGEST.fullmatch(candidate):
        return False
    try:
        expected = sign(body, secret)
    except TypeError:
        return False
    return hmac.compare_digest(expected, candidate)


def standard_webhooks_key(secret: str) -> bytes:
    """The Standard Webhooks HMAC key for ``secret`` (see the module docstring)."""
    if secret.startswith(SECRET_PREFIX):
        encoded = secret[len(SECRET_PREFIX) :]
        if _BASE64.fullmatch(encoded) and len(encoded.rstrip("=")) % 4 != 1:
            try:
                # Re-padded, as the reference implementations do for unpadded secrets.
                key = base64.b64decode(encoded.rstrip("=") + "==")
            except binascii.Error:  # pragma: no cover - excluded by the checks above
                key = b""
            if key:
                return key
    return secret.encode()


def _standard_signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def standard_webhooks_headers(
    msg_id: str, timestamp: int, body: bytes, secret: str
) -> dict[str, str]:
    """``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` for one attempt."""
    if not secret:
        raise ValueError("a webhook secret must not be empty")
    digest = _standard_signature(standard_webhooks_key(secret), msg_id, timestamp, body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def verify_standard_webhook(
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
    *,
    tolerance: int = 300,
    now: float | None = None,
) -> bool:
    """Whether a Standard Webhooks delivery is authentic and fresh.

    Header names are case-insensitive. The timestamp must be within ``tolerance`` seconds of
    ``now`` (default: the clock) either way; any ``v1`` signature in the space-separated list
    may match. Never raises on bad input.
    """
    if not isinstance(secret, str) or not secret:
        return False
    lowered = {str(name).lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    stamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not (isinstance(msg_id, str) and isinstance(stamp, str) and isinstance(signatures, str)):
        return False
    stamp = stamp.strip()
    if not msg_id or not stamp.isascii() or not stamp.isdigit():
        return False
    timestamp = int(stamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    try:
        expected = _standard_signature(standard_webhooks_key(secret), msg_id, timestamp, body)
    except TypeError:
        return False
    matched = False
    for item in signatures.split():
        version, _, encoded = item.partition(",")
        if version != "v1":
            continue
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            continue
        # Check every entry, so the time taken does not reveal which one matched.
        matched |= hmac.compare_digest(expected, candidate)
    return matched


def delivery_headers(event_id: str, body: bytes, secret: str, *, now: float) -> dict[str, str]:
    """Every header one delivery attempt sends, signed with that attempt's time ``now``."""
    return {
        "Content-Type": "application/json",
        "X-Service-Signature": sign(body, secret),
        "X-Service-Event-Id": event_id,
        **standard_webhooks_headers(event_id, int(now), body, secret),
    }


def generate_secret() -> str:
    """A new secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode()
