"""Response transforms: how a layer acts on the answer, per SSE event or on the whole body.

A layer registers a ``ResponseTransform`` on the request context (``ctx.transforms``); the
endpoint runs them as one chain over the upstream's answer. The chain runs in the reverse of
the order the transforms were registered, as responses unwind an onion: the innermost layer's
transform sees the upstream's answer first, the outermost's sees it last, and metering
(registered by the endpoint itself) is always first.

For a stream, each transform sees each event and returns the events to pass on: the same one
(pass), a changed one, none (hold it back, or drop it), or several (what it held plus the new
one, or an added event). A transform that holds text back must give it out when it sees the
``[DONE]`` event, before passing that on, and in ``close`` for a stream that ends without one.
``close`` is called exactly once per response: at the end of a stream (complete, cut by the
upstream, or abandoned by the client: then what it returns goes nowhere, but its own
bookkeeping still runs), and after a JSON body.

For a JSON answer, ``body`` sees the whole ``JSONBody`` once and may change it; the response
then goes out with the right ``content-length``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gateway_kit.sse import SSEEvent

__all__ = ["JSONBody", "ResponseTransform", "TransformChain"]

_UNSET: Any = object()


class JSONBody:
    """A whole response body: the bytes as received, parsed on first use."""

    __slots__ = ("_value", "changed", "raw")

    def __init__(self, raw: bytes, parsed: Any = None) -> None:
        """``parsed``: the body as already parsed (a provider checking it was the API's
        answer), so that it is parsed once per response."""
        self.raw = raw
        self._value: Any = _UNSET if parsed is None else parsed
        self.changed = False

    def json(self) -> Any:
        """The body parsed (once); ``ValueError`` when it is not JSON."""
        if self._value is _UNSET:
            self._value = json.loads(self.raw)
        return self._value

    def set_json(self, value: Any) -> None:
        """Replace the body; it is serialized once, when the response goes out."""
        self._value = value
        self.changed = True

    def encode(self) -> bytes:
        if not self.changed:
            return self.raw
        return json.dumps(self._value, separators=(",", ":"), ensure_ascii=False).encode()


class ResponseTransform:
    """A transform that passes everything through; subclass and override what you need."""

    def start(self, status: int) -> None:
        """The upstream's status, before any body or event."""

    def body(self, body: JSONBody) -> None:
        """The whole JSON body (once); change it with ``body.set_json``."""

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        """One stream event in; the events to pass on out."""
        return (event,)

    def close(self) -> Sequence[SSEEvent]:
        """The response is over: the events still held, to go out last."""
        return ()


class TransformChain:
    """Transforms in the order they see the answer (first: nearest the upstream)."""

    __slots__ = ("_closed", "_transforms")

    def __init__(self, transforms: Sequence[ResponseTransform]) -> None:
        self._transforms = tuple(transforms)
        self._closed = False

    def start(self, status: int) -> None:
        for transform in self._transforms:
            transform.start(status)

    def body(self, body: JSONBody) -> None:
        for transform in self._transforms:
            transform.body(body)

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        return self._through(0, (event,))

    def _through(self, first: int, events: Sequence[SSEEvent]) -> Sequence[SSEEvent]:
        for transform in self._transforms[first:] if first else self._transforms:
            if len(events) == 1:
                events = transform.event(events[0])
            else:
                events = [out for event in events for out in transform.event(event)]
            if not events:
                break
        return events

    def close(self) -> Sequence[SSEEvent]:
        """Close each transform in order; what one gives out passes through those after it
        (before they close). Only the first call does anything."""
        if self._closed:
            return ()
        self._closed = True
        out: list[SSEEvent] = []
        for index, transform in enumerate(self._transforms):
            out.extend(self._through(index + 1, transform.close()))
        return out
