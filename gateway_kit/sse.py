"""Server-sent events: the one model of the format, for providers, metering and layers."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["SSEFramer", "sse_data", "sse_event"]

_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEFramer:
    """Splits a byte stream into complete server-sent events.

    Events end with a blank line; lines end with LF, CRLF or CR (the SSE grammar). Splitting
    happens only at those ASCII bytes, which never occur inside a multi-byte UTF-8 sequence, so
    a character split between two chunks comes out whole. Events are returned byte for byte
    as received, terminating blank line included; the concatenation of the events is the
    stream (blank lines between events travel at the front of the next event).
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" not in buffer:
            # The common case (OpenAI and most providers): LF line ends only.
            *events, self._buffer = buffer.split(b"\n\n")
            return [event + b"\n\n" for event in events if event]
        events = []
        start = line_start = 0
        has_content = False
        for match in _LINE_END.finditer(buffer):
            # A CR at the end of a chunk may be half of a CRLF. Either way it ends the line,
            # so the event goes out now; an LF arriving next is an empty line, ignored.
            if match.start() == line_start:  # a blank line ends the event
                if has_content:
                    events.append(buffer[start : match.end()])
                    start = match.end()
                    has_content = False
            else:
                has_content = True
            line_start = match.end()
        self._buffer = buffer[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated (what a cut stream leaves behind)."""
        return self._buffer


def sse_data(event: bytes) -> str | None:
    """The ``data`` of one framed event (joined lines), or ``None`` if it has none."""
    data_lines = [
        line[5:].removeprefix(" ")
        for line in event.decode("utf-8", "replace").splitlines()
        if line.startswith("data:")
    ]
    return "\n".join(data_lines) if data_lines else None


def sse_event(data: dict[str, Any] | str) -> bytes:
    """Frame one ``data:`` event."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
