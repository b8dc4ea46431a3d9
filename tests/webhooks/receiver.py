"""A scriptable webhook receiver for tests, served by uvicorn on loopback.

Each path answers by its script: ``receiver.script("/a", [503, 503, 200])`` answers the first
two hits 503 and every later one 200 (the last entry repeats). An entry may be a status, or a
``(status, seconds_to_wait_first)`` pair. Every hit is recorded with its arrival time, headers
and exact body; ``wait_for`` blocks until enough hits arrived (a condition, not a timer).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

Answer = int | tuple[int, float]


@dataclass(frozen=True)
class Hit:
    at: float
    path: str
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    base_url: str = ""
    hits: list[Hit] = field(default_factory=list)
    scripts: dict[str, list[Answer]] = field(default_factory=dict)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def script(self, path: str, answers: Sequence[Answer]) -> str:
        """Set how ``path`` answers; returns its URL."""
        self.scripts[path] = list(answers)
        return self.base_url + path

    def hits_for(self, path: str) -> list[Hit]:
        with self._changed:
            return [hit for hit in self.hits if hit.path == path]

    async def wait_for(self, path: str, count: int, within: float = 20.0) -> list[Hit]:
        def enough() -> bool:
            return sum(1 for hit in self.hits if hit.path == path) >= count

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(enough, within)

        if not await anyio.to_thread.run_sync(wait):
            raise AssertionError(
                f"{path}: {len(self.hits_for(path))} hit(s) within {within} s, wanted {count}"
            )
        return self.hits_for(path)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        answers = self.scripts.get(path, [200])
        with self._changed:
            seen = sum(1 for hit in self.hits if hit.path == path)
            answer = answers[min(seen, len(answers) - 1)]
            status, delay = answer if isinstance(answer, tuple) else (answer, 0.0)
            self.hits.append(Hit(time.monotonic(), path, status, headers, body))
            self._changed.notify_all()
        if delay:
            await anyio.sleep(delay)
        extra = [(b"location", b"/redirected")] if 300 <= status < 400 else []
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": b"receiver's private body"})
