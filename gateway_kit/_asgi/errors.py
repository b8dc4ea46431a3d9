"""OpenAI-shaped error responses, sent rather than raised (DESIGN.md section 3)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from gateway_kit._asgi.types import Send

__all__ = [
    "INTERNAL_ERROR",
    "JSON_HEADERS",
    "NOT_RUNNING",
    "error_body",
    "send_error",
    "send_not_running",
]

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


#: What a fault inside the gateway answers (a 500 ``internal_error``).
INTERNAL_ERROR = "The gateway failed to handle the request."

#: What a route of a ``Gateway`` that was never entered answers (an embedding mistake).
NOT_RUNNING = "The gateway is not running: enter the Gateway in the application's lifespan."


async def send_not_running(send: Send) -> None:
    """``503 gateway_not_running``: the app's lifespan never entered the ``Gateway``, so its
    storage is not open. Said as such, rather than a 500 from whatever touched it first."""
    await send_error(send, 503, NOT_RUNNING, type="api_error", code="gateway_not_running")
