"""Reading token usage off responses: whole JSON bodies, and SSE streams event by event.

A stream reports usage only when the request asks for it (``stream_options.include_usage``), in
one last chunk with empty ``choices``. ``ask_for_usage`` asks upstream when the client did not,
and the ``StreamMeter`` then strips that chunk (and any ``usage`` field) before forwarding, so
the client gets exactly the stream it asked for. Events without ``"usage"`` in their data are
passed on untouched, without being parsed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gateway_kit.cost.usage import Usage
from gateway_kit.sse import SSEEvent

__all__ = ["StreamMeter", "ask_for_usage", "usage_of_body"]


def ask_for_usage(payload: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``payload`` asking for streamed usage, and whether the client did not (strip it then)."""
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return payload, False
    merged = {**options, "include_usage": True} if isinstance(options, dict) else None
    return {**payload, "stream_options": merged or {"include_usage": True}}, True


def usage_of_body(body: bytes, parse: Callable[[], Any] | None = None) -> Usage | None:
    """The usage of a whole chat-completion body, ``None`` when it has none. ``parse`` gives
    the body parsed (once, by whoever parsed it first); by default it is parsed here."""
    if b'"usage"' not in body:
        return None
    try:
        document = parse() if parse is not None else json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return Usage.from_openai(document.get("usage")) if isinstance(document, dict) else None


class StreamMeter:
    """Follows a stream's events: the reported usage, and how many chunks carried output."""

    def __init__(self, *, strip_usage: bool) -> None:
        self.strip_usage = strip_usage
        self.usage: Usage | None = None
        #: Data events seen before the end: about one output token each, for estimates.
        self.chunks = 0

    def process(self, event: SSEEvent) -> SSEEvent | None:
        """The event to forward (possibly changed), or ``None`` to drop it. ``[DONE]`` and
        events without data pass untouched."""
        data = event.data
        if data is None or event.done:
            return event
        if '"usage"' not in data:
            self.chunks += 1
            return event
        try:
            chunk = event.json()
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict) or "usage" not in chunk:
            self.chunks += 1
            return event
        usage = chunk["usage"]
        if usage is not None:
            self.usage = Usage.from_openai(usage) or self.usage
        if not self.strip_usage:
            if usage is None:
                self.chunks += 1
            return event
        if not chunk.get("choices") and usage is not None:
            return None  # the usage-only chunk the client did not ask for
        # Asking for usage makes OpenAI add `"usage": null` to every other chunk: gone too.
        self.chunks += 1
        del chunk["usage"]
        event.set_json(chunk)
        return event
