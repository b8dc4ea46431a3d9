"""One delivery attempt, and what its outcome means (spec section 8, DESIGN.md section 5).

The exact stored bytes are POSTed with ``X-Service-Signature``, ``X-Service-Event-Id`` and the
Standard Webhooks headers signed for this attempt, under one total deadline, redirects never
followed, the response body never read. 2xx and 3xx are success; 408, 429, 5xx and failures to
get a response (``status`` 0: timeout, DNS, connection, TLS, an address the SSRF guard
refuses) are retried; any other 4xx ends the delivery.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import anyio
import httpx

from gateway_kit.webhooks.signing import delivery_headers

#: The header a test delivery carries (``POST .../webhooks/{id}/test``).
TEST_HEADER = "X-Service-Test"

Outcome = Literal["success", "retry", "reject"]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    started_at: float
    duration_ms: float
    #: The HTTP status; 0 when no response came.
    status: int
    #: ``None`` on success, else why: ``http_status``, ``timeout``, ``dns_error``,
    #: ``connection_error``, ``tls_error``, ``blocked_address``.
    error_class: str | None

    @property
    def outcome(self) -> Outcome:
        return classify(self.status)


def classify(status: int) -> Outcome:
    if 200 <= status < 400:
        return "success"
    if status == 0 or status in (408, 429) or status >= 500:
        return "retry"
    return "reject"


async def attempt(
    client: httpx.AsyncClient,
    *,
    url: str,
    body: bytes,
    secret: str,
    event_id: str,
    attempt_number: int,
    deadline_s: float,
    clock: Callable[[], float] = time.time,
    test: bool = False,
) -> AttemptResult:
    """One delivery attempt. ``test``: a sample event sent on request (``POST .../test``),
    marked ``X-Service-Test: true`` so that a receiver can tell it from a real one (a signed
    sample ``payment.succeeded`` read as a payment)."""
    started_at = clock()
    headers = delivery_headers(event_id, body, secret, now=started_at)
    headers["X-Service-Delivery-Attempt"] = str(attempt_number)
    if test:
        headers[TEST_HEADER] = "true"
    request = client.build_request("POST", url, content=body, headers=headers)
    begun = time.perf_counter()
    status, error = 0, None
    try:
        with anyio.fail_after(deadline_s):
            response = await client.send(request, stream=True)
            await response.aclose()  # the body is none of our business
        status = response.status_code
        error = None if classify(status) == "success" else "http_status"
    except TimeoutError:
        error = "timeout"
    except httpx.TimeoutException:
        error = "timeout"
    except httpx.HTTPError as exc:
        error = _error_class(exc)
    duration_ms = (time.perf_counter() - begun) * 1000
    return AttemptResult(started_at, round(duration_ms, 3), status, error)


def _error_class(exc: httpx.HTTPError) -> str:
    text = str(exc)
    if "SSRF guard" in text:
        return "blocked_address"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return "tls_error"
        if isinstance(cause, OSError) and "Name or service not known" in str(cause):
            return "dns_error"
        cause = cause.__cause__ or cause.__context__
    if "does not resolve" in text or "getaddrinfo" in text:
        return "dns_error"
    return "connection_error"
