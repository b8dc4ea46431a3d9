"""The ASGI types every module speaks, and one helper to read a request header."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "Header", "Message", "Receive", "Scope", "Send", "header"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: One header: lower-case name and value, as bytes.
Header = tuple[bytes, bytes]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (``name`` lower-case)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
