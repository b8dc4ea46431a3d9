"""``ASGIRecorder``: drive an ASGI app with raw messages and record what it sends, when.

``TestClient`` and ``httpx.ASGITransport`` hand back whole bodies, which hides whether a
response was streamed. The recorder keeps every message with a timestamp, so a test can assert
that events arrived one by one, and before the upstream finished.

    recorder = ASGIRecorder(app)
    response = await recorder.request("POST", "/v1/chat/completions", json={...})
    assert len(response.body_messages) >= 50
"""

from __future__ import annotations

import inspect
import json as jsonlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from gateway_kit._asgi import ASGIApp, Message
from gateway_kit.sse import SSEParser


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """One message the app sent, and when (``time.perf_counter()``)."""

    at: float
    message: Message


@dataclass(slots=True)
class RecordedResponse:
    """Everything the app sent for one request."""

    messages: list[RecordedMessage] = field(default_factory=list)
    disconnected_at: float | None = None

    @property
    def start(self) -> Message:
        starts = [m.message for m in self.messages if m.message["type"] == "http.response.start"]
        if len(starts) != 1:
            raise AssertionError(f"expected one http.response.start, got {len(starts)}")
        return starts[0]

    @property
    def status(self) -> int:
        status: int = self.start["status"]
        return status

    @property
    def headers(self) -> dict[str, str]:
        """Response headers, lower-case names; the last value wins for repeated names."""
        return {k.decode().lower(): v.decode() for k, v in self.start.get("headers", [])}

    def header_values(self, name: str) -> list[str]:
        key = name.lower().encode()
        return [v.decode() for k, v in self.start.get("headers", []) if k.lower() == key]

    @property
    def body_messages(self) -> list[RecordedMessage]:
        """``http.response.body`` messages that carried bytes."""
        return [
            m
            for m in self.messages
            if m.message["type"] == "http.response.body" and m.message.get("body")
        ]

    @property
    def body(self) -> bytes:
        return b"".join(m.message["body"] for m in self.body_messages)

    @property
    def complete(self) -> bool:
        """True when the app sent its final body message (``more_body`` false)."""
        return any(
            m.message["type"] == "http.response.body" and not m.message.get("more_body", False)
            for m in self.messages
        )

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    def events(self) -> list[str]:
        """The ``data`` of every server-sent event in the body."""
        return [e.data for e in SSEParser().feed(self.body) if e.data is not None]


OnSend = Callable[[Message], Awaitable[None] | None]


class ASGIRecorder:
    """Runs one request at a time through ``app`` with a scripted ``receive``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def request(
        self,
        method: str = "GET",
        path: str = "/",
        *,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        json: Any = None,
        body: bytes = b"",
        body_chunks: Iterable[bytes] | None = None,
        disconnect_after: int | None = None,
        disconnect: anyio.Event | None = None,
        on_send: OnSend | None = None,
    ) -> RecordedResponse:
        """Send one request and record the response.

        ``body_chunks`` sends the body in several ``http.request`` messages. The client
        disconnects after ``disconnect_after`` body messages carrying bytes, or when
        ``disconnect`` is set; otherwise once the response is complete. ``on_send`` is called
        (and awaited if it returns an awaitable) with each message as it is sent.
        """
        if json is not None:
            body = jsonlib.dumps(json).encode()
        chunks = list(body_chunks) if body_chunks is not None else [body]
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        names = {k.lower() for k, _ in pairs}
        if json is not None and "content-type" not in names:
            pairs.append(("content-type", "application/json"))
        if "content-length" not in names and body_chunks is None:
            pairs.append(("content-length", str(len(body))))
        path_part, _, query = path.partition("?")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method.upper(),
            "scheme": "http",
            "path": path_part,
            "raw_path": path_part.encode(),
            "root_path": "",
            "query_string": query.encode(),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        recorded = RecordedResponse()
        gone = disconnect or anyio.Event()
        pending = list(chunks)

        async def receive() -> Message:
            if pending:
                chunk = pending.pop(0)
                return {"type": "http.request", "body": chunk, "more_body": bool(pending)}
            await gone.wait()
            if recorded.disconnected_at is None:
                recorded.disconnected_at = time.perf_counter()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if recorded.disconnected_at is not None:
                return  # like a server after the client left: messages go nowhere
            recorded.messages.append(RecordedMessage(time.perf_counter(), dict(message)))
            if on_send is not None:
                result = on_send(message)
                if inspect.isawaitable(result):
                    await result
            if message["type"] == "http.response.body" and (
                not message.get("more_body", False)
                or (
                    disconnect_after is not None and len(recorded.body_messages) >= disconnect_after
                )
            ):
                gone.set()

        await self.app(scope, receive, send)
        return recorded
