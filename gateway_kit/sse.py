"""Server-sent events: the one model of the format, for providers, metering and every layer.

``SSEParser`` turns a byte stream into ``SSEEvent`` objects as the WHATWG HTML standard reads
an event stream ("9.2.6 Interpreting an event stream"): lines end with CRLF, LF or CR (a CR at
the end of one chunk and an LF at the start of the next are one line end, or an empty line that
dispatches nothing); a leading byte-order mark is dropped; a line starting with ``:`` is a
comment; ``field: value`` loses one optional space after the colon, a line without a colon is a
field with an empty value; ``data`` lines join with LF; ``id`` containing NUL and ``retry`` that
is not all ASCII digits are ignored, as are unknown fields; a blank line ends the event, and an
event cut off by the end of the stream is not dispatched (it is left in ``pending``).

Two differences from a browser, because a gateway relays rather than consumes: an event with
no ``data`` (a keep-alive comment, an ``id`` alone) is still returned, so it can be forwarded;
and each event keeps the exact bytes it arrived as (``raw``), so an event nobody changed leaves
byte for byte as it came. Changing an event (``set_data``, ``set_json``) drops ``raw``, and
``encode`` writes the event anew in the canonical form (``field: value`` lines, LF line ends).

OpenAI-style streams end with ``data: [DONE]`` (some servers write ``data:[DONE]``); both are
``event.done``.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["DONE", "MAX_EVENT_BYTES", "EventTooLarge", "SSEEvent", "SSEParser"]

#: The data of the event that ends an OpenAI-style stream.
DONE = "[DONE]"

_LINE_END = re.compile(rb"\r\n|\r|\n")
_TEXT_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
_UNSET: Any = object()


class SSEEvent:
    """One server-sent event. ``data`` is ``None`` when the event has no ``data`` field.

    ``raw`` holds the bytes the event arrived as (blank lines before it included), ``None``
    for an event made here or changed since.
    """

    __slots__ = ("_json", "comments", "data", "event", "id", "raw", "retry")

    def __init__(
        self,
        data: str | None = None,
        *,
        event: str | None = None,
        id: str | None = None,
        retry: int | None = None,
        comments: tuple[str, ...] = (),
        raw: bytes | None = None,
    ) -> None:
        self.data = data
        self.event = event
        self.id = id
        self.retry = retry
        #: Comment lines, each the text after its ``:`` (a space included, if any).
        self.comments = comments
        self.raw = raw
        self._json: Any = _UNSET

    @classmethod
    def of_json(cls, value: Any) -> SSEEvent:
        """A ``data`` event carrying ``value`` as compact JSON."""
        event = cls(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        event._json = value
        return event

    @classmethod
    def comment(cls, text: str) -> SSEEvent:
        """A comment-only event (``: text``): clients ignore it, proxies pass it on."""
        return cls(comments=(" " + text,))

    @property
    def done(self) -> bool:
        """Whether this is the ``[DONE]`` event that ends an OpenAI-style stream."""
        return self.data == DONE

    def json(self) -> Any:
        """The ``data`` parsed as JSON (parsed once). ``ValueError`` when it is not JSON."""
        if self._json is _UNSET:
            if self.data is None:
                raise ValueError("the event has no data")
            self._json = json.loads(self.data)
        return self._json

    def set_data(self, data: str | None) -> None:
        self.data = data
        self.raw = None
        self._json = _UNSET

    def set_json(self, value: Any) -> None:
        """Replace ``data`` with ``value`` as compact JSON (after changing a parsed chunk)."""
        self.set_data(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        self._json = value

    def encode(self) -> bytes:
        """The event on the wire: as received if unchanged, else written anew."""
        if self.raw is not None:
            return self.raw
        lines = [":" + comment for comment in self.comments]
        if self.event is not None:
            lines.append("event: " + self.event)
        if self.id is not None:
            lines.append("id: " + self.id)
        if self.retry is not None:
            lines.append(f"retry: {self.retry}")
        if self.data is not None:
            lines += ["data: " + line for line in _TEXT_LINE_END.split(self.data)]
        if not lines:
            return b""
        return ("\n".join(lines) + "\n\n").encode()

    def _key(self) -> tuple[object, ...]:
        return (self.data, self.event, self.id, self.retry, self.comments)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SSEEvent):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = [f"{name}={value!r}" for name, value in zip(_FIELDS, self._key(), strict=True)]
        return f"SSEEvent({', '.join(f for f in fields if not f.endswith(('=None', '=()')))})"


_FIELDS = ("data", "event", "id", "retry", "comments")


def parse_event(block: bytes) -> SSEEvent:
    """The event of one complete block (its lines and the blank line that ends it)."""
    # The common case (OpenAI and most providers): one `data:` line, LF line ends.
    if (
        block.startswith(b"data:")
        and block.endswith(b"\n\n")
        and b"\n" not in block[5:-2]
        and b"\r" not in block
    ):
        data_line = block[6:-2] if block[5:6] == b" " else block[5:-2]
        return SSEEvent(data_line.decode("utf-8", "replace"), raw=block)
    data: list[str] = []
    comments: list[str] = []
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    for line in _TEXT_LINE_END.split(block.decode("utf-8", "replace")):
        if not line:
            continue
        if line[0] == ":":
            comments.append(line[1:])
            continue
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)
    return SSEEvent(
        "\n".join(data) if data else None,
        event=event,
        id=id,
        retry=retry,
        comments=tuple(comments),
        raw=block,
    )


#: The largest event a parser holds (16 MiB): an upstream sending bytes without ever ending an
#: event was buffered without end, its timeout never firing while bytes kept coming.
MAX_EVENT_BYTES = 16 * 1024 * 1024


class EventTooLarge(ValueError):
    """A stream's event ran past ``SSEParser.max_event_bytes``."""


class SSEParser:
    """Splits a byte stream into events at any chunk boundary; see the module docstring.

    Splitting happens only at CR and LF bytes, which never occur inside a multi-byte UTF-8
    sequence, so a character split between two chunks comes out whole. The events' ``raw``
    bytes, concatenated, are the stream (blank lines between events travel at the front of the
    next one), less a leading byte-order mark and what is still ``pending``.
    """

    __slots__ = ("_buffer", "_cr", "_parts", "_size", "_started", "max_event_bytes")

    def __init__(self, *, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        #: Chunks of an event still open, not joined yet: a large event arriving in many
        #: chunks was joined and split again on each, in time growing with its size squared
        #: (16 MB took 12 s of CPU). They are joined once, with the chunk that ends it.
        self._parts: list[bytes] = []
        self._size = 0
        #: Whether what is pending holds a CR (then every chunk is split as it comes).
        self._cr = False
        self._started = False
        self.max_event_bytes = max_event_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._size and not self._cr and b"\r" not in chunk and not self._ends_in(chunk):
            self._parts.append(chunk)  # no event ends here: kept, not scanned again
            self._size += len(chunk)
            self._check_size()
            return []
        buffer = b"".join((*self._parts, chunk)) if self._parts else chunk
        self._parts.clear()
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._keep(buffer)  # perhaps the start of a byte-order mark
                return []
            self._started = True
            buffer = buffer.removeprefix(_BOM)
        events = [parse_event(block) for block in self._split(buffer)]
        self._keep(self._buffer)
        return events

    def _ends_in(self, chunk: bytes) -> bool:
        """Whether an LF-only event can end in ``chunk``: a blank line in it, or across the
        boundary (the pending bytes end with an LF and the chunk starts with one)."""
        if b"\n\n" in chunk:
            return True
        if chunk[:1] != b"\n":
            return False
        last = self._parts[-1] if self._parts else self._buffer
        return last[-1:] == b"\n"

    def _keep(self, pending: bytes) -> None:
        """``pending`` is what is left of the stream after its last complete event."""
        self._buffer = b""
        self._parts = [pending] if pending else []
        self._size = len(pending)
        self._cr = b"\r" in pending
        self._check_size()

    def _check_size(self) -> None:
        if self._size > self.max_event_bytes:
            raise EventTooLarge(
                f"an event of more than {self.max_event_bytes:,} bytes (no blank line ends it)"
            )

    def _split(self, buffer: bytes) -> list[bytes]:
        if b"\r" not in buffer:
            # LF line ends only: a blank line is "\n\n".
            *blocks, self._buffer = buffer.split(b"\n\n")
            events: list[bytes] = []
            carry = b""
            for block in blocks:
                if block.strip(b"\n"):
                    events.append(carry + block + b"\n\n")
                    carry = b""
                else:
                    carry += block + b"\n\n"  # blank lines: they go with the next event
            self._buffer = carry + self._buffer
            return events
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
        """Bytes of an event not yet ended by a blank line (what a cut stream leaves behind)."""
        return b"".join(self._parts)
