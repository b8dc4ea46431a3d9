"""OpenAI-shaped error responses, sent rather than raised (DESIGN.md section 3)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from gateway_kit._asgi.types import Send

__all__ = ["JSON_HEADERS", "error_body", "send_error"]

JSON_HEADERS = ((b"content-type", b"application/json"),)


def error_body(message: str, *, type: str, code: str | None, param: str | None = None) -> bytes:
    """An OpenAI-shaped error body: ``{"error": {"message", "type", "code", "param"}}``."""
    error = {"message": message, "type": type, "param": param, "code": code}
    return json.dumps({"error": error}).encode()


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    type: str,
    code: str | None,
    param: str | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with an OpenAI-shaped JSON error. Layers call this and return; never raise."""
    body = error_body(message, type=type, code=code, param=param)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *JSON_HEADERS,
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
