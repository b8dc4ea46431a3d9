"""Private ASGI plumbing: the types, OpenAI-shaped errors, and cancelling on a disconnect.

Nothing here knows about the request context, the layers or the chat format; the request
pipeline (``gateway_kit.pipeline``) builds on it.
"""

from __future__ import annotations

from gateway_kit._asgi.disconnect import CancelOnDisconnect
from gateway_kit._asgi.errors import JSON_HEADERS, error_body, send_error
from gateway_kit._asgi.types import ASGIApp, Header, Message, Receive, Scope, Send, header

__all__ = [
    "JSON_HEADERS",
    "ASGIApp",
    "CancelOnDisconnect",
    "Header",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "error_body",
    "header",
    "send_error",
]
