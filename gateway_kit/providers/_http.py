"""What the HTTP providers share: sending one request upstream with failures mapped to the
error contract (``providers.base``), and reading an upstream's ``Retry-After``."""

from __future__ import annotations

import email.utils
import math

import httpx

from gateway_kit.exceptions import UpstreamUnavailableError

__all__ = ["retry_after_seconds", "send_upstream"]


async def send_upstream(
    client: httpx.AsyncClient, request: httpx.Request, provider: str
) -> httpx.Response:
    """Send ``request`` (the body is left unread); timeouts and connection errors raise
    ``UpstreamUnavailableError`` (status 0)."""
    try:
        return await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        failure: BaseException = exc
        if isinstance(exc, httpx.TimeoutException):
            failure = _aiohttp_non_timeout(exc) or exc
            if failure is exc:
                raise UpstreamUnavailableError(
                    f"Upstream provider '{provider}' timed out.", provider=provider
                ) from exc
        raise UpstreamUnavailableError(
            f"Upstream provider '{provider}' is unreachable ({type(failure).__name__}).",
            provider=provider,
        ) from exc


def _aiohttp_non_timeout(exc: httpx.TimeoutException) -> BaseException | None:
    """The aiohttp error behind a "timeout" that was none (``transport = "auto"``): httpx_aiohttp
    maps every aiohttp connection error to ``ConnectTimeout``, a refused connection
    (``ClientConnectorError``) included. aiohttp's own timeouts are ``TimeoutError``s."""
    cause = exc.__cause__
    if cause is None or isinstance(cause, TimeoutError):
        return None
    return cause if type(cause).__module__.startswith("aiohttp") else None


def retry_after_seconds(
    value: bytes | str, now: float, *, milliseconds: bool = False
) -> float | None:
    """A ``Retry-After`` value (seconds, or an HTTP date) as seconds from ``now``; a
    ``retry-after-ms`` value with ``milliseconds``. ``None`` when unreadable."""
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    try:
        seconds = float(text) / (1000 if milliseconds else 1)
    except ValueError:
        if milliseconds:
            return None
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now
    return max(0.0, seconds) if math.isfinite(seconds) else None
