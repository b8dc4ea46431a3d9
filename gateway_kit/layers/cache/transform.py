"""``StoreTransform``: keeps a missed request's answer once it is whole.

Registered by the cache layer on a miss, it is the innermost layer's transform: it sees the
answer right after metering, before PII restore, so what it keeps is what the model wrote
(placeholders, when masking is on in ``full`` scope). A JSON answer is kept at once; a stream
is put back together event by event (nothing is held: every event passes on as it came) and
kept at ``[DONE]`` only: a stream cut by the upstream or left by the client never is. Only a
200 with one choice that finished with ``stop`` or ``tool_calls`` is kept, with the usage
metering read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway_kit.cache.answer import CachedAnswer, StreamAssembler
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.transforms import JSONBody, ResponseTransform
from gateway_kit.sse import SSEEvent

__all__ = ["StoreTransform"]


class StoreTransform(ResponseTransform):
    def __init__(self, ctx: RequestContext, keep: Callable[[CachedAnswer], None]) -> None:
        self._ctx = ctx
        self._keep = keep
        self._ok = False
        self._stream: StreamAssembler | None = None

    def start(self, status: int) -> None:
        self._ok = status == 200

    def body(self, body: JSONBody) -> None:
        cost = self._ctx.cost
        if not self._ok or cost is None:
            return
        try:
            document: Any = body.json()
        except ValueError:
            return
        answer = CachedAnswer.of_body(document, cost.usage)
        if answer is not None:
            self._keep(answer)

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        if not self._ok:
            return (event,)
        if self._stream is None:
            self._stream = StreamAssembler()
        if event.done:
            cost = self._ctx.cost  # metering priced the stream before passing [DONE] on
            answer = self._stream.answer(cost.usage) if cost is not None else None
            if answer is not None:
                self._keep(answer)
            self._ok = False
        elif event.data is not None:
            try:
                self._stream.add(event.json())
            except ValueError:
                self._stream.broken = True
        return (event,)
