"""How the response leaves: ``http.response.start`` exactly once."""

from __future__ import annotations

from gateway_kit._asgi.types import Message, Send

__all__ = ["ResponseTracker"]


class ResponseTracker:
    """Wraps ``send``: knows whether the response started or ended, refuses a second start.

    A layer or endpoint that must answer an error after calling inner code checks ``started``:
    before the start it can still send a proper error response, after it only an in-band one.
    """

    __slots__ = ("_send", "ended", "started", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.ended = False
        self.status = 0

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            self.status = message["status"]
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self._send(message)
