"""The request body: read once under a size cap, replayed to the inner app (DESIGN.md 3).

The replaying ``receive`` hands over to the original one afterwards, so ``http.disconnect``
still arrives. A layer that changes the parsed request calls ``replace_json``.
"""

from __future__ import annotations

import json
from typing import Any

from gateway_kit._asgi.types import Message, Receive, Scope, header
from gateway_kit.pipeline.context import RequestContext, get_context

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "BodyTooLarge",
    "ClientDisconnected",
    "read_body",
    "replace_json",
]

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024


class BodyTooLarge(Exception):
    """The body passed the cap; the layer answers 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeds the limit of {limit} bytes.")
        self.limit = limit


class ClientDisconnected(Exception):
    """The client went away while the body was being read."""


class _ReplayReceive:
    """Replays the buffered body once, then hands over to the original ``receive``."""

    __slots__ = ("_ctx", "_receive", "_replayed")

    def __init__(self, ctx: RequestContext, receive: Receive) -> None:
        self._ctx = ctx
        self._receive = receive
        self._replayed = False

    async def __call__(self) -> Message:
        if not self._replayed:
            self._replayed = True
            return {"type": "http.request", "body": self._ctx.body or b"", "more_body": False}
        return await self._receive()


async def read_body(
    scope: Scope, receive: Receive, *, limit: int = DEFAULT_MAX_BODY_BYTES
) -> tuple[bytes, Receive]:
    """Read the request body once and return it with a ``receive`` that replays it.

    A second call (an inner layer) gets the buffered body and the same replaying ``receive``
    without touching the network. Raises ``BodyTooLarge`` past ``limit`` (checked against
    ``content-length`` first, then while reading) and ``ClientDisconnected``.
    """
    ctx = get_context(scope)
    if ctx.body is not None and isinstance(receive, _ReplayReceive) and not receive._replayed:
        return ctx.body, receive
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    ctx.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return ctx.body, _ReplayReceive(ctx, receive)


def replace_json(scope: Scope, payload: dict[str, Any]) -> None:
    """Replace the request's JSON body for the layers and the app inside.

    Re-serializes once and fixes ``content-length`` in the scope, so an inner app reading
    ``receive`` sees a consistent request.
    """
    ctx = get_context(scope)
    ctx.json = payload
    ctx.body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    length = str(len(ctx.body)).encode()
    scope["headers"] = [(k, length if k == b"content-length" else v) for k, v in scope["headers"]]
