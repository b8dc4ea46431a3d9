"""The webhook receiver the ``webhooks`` benchmark delivers to, run in its own process.

It answers every POST 200 at once and notes when each ``X-Service-Event-Id`` arrived, on
``time.monotonic`` (one clock for every process on Linux, so the benchmark compares it with
its own publish times). ``serve_asgi`` runs any benchmark server (this one included) the same
way: one uvicorn worker on loopback, uvloop, httptools, no access log.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, Literal
from urllib.parse import parse_qsl

import anyio

__all__ = ["Key", "Receiver", "serve_asgi", "serve_receiver"]

#: (webhook path, event id): one delivery.
Key = tuple[str, str]


class Receiver:
    """A raw ASGI app keeping ``(path, event id, arrival)`` per run.

    A run is the first path segment (``/<run>/<webhook>``). ``GET /_arrivals?run=R&count=N&
    within=S`` answers once N distinct deliveries of run R arrived, or S seconds passed, with
    every arrival of the run so far (JSON).
    """

    def __init__(self) -> None:
        self.arrivals: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        self.distinct: dict[str, set[Key]] = defaultdict(set)
        self.waiting: tuple[str, int, anyio.Event] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        at = time.monotonic()
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        body = b""
        if scope["path"] == "/_arrivals":
            query = dict(parse_qsl(scope["query_string"].decode()))
            run, count = query["run"], int(query["count"])
            if len(self.distinct[run]) < count:
                self.waiting = (run, count, anyio.Event())
                with anyio.move_on_after(float(query["within"])):
                    await self.waiting[2].wait()
                self.waiting = None
            body = json.dumps(self.arrivals[run]).encode()
        else:
            path = scope["path"]
            run = path.split("/")[1]
            event_id = dict(scope["headers"]).get(b"x-service-event-id", b"").decode()
            self.arrivals[run].append((path, event_id, at))
            self.distinct[run].add((path, event_id))
            waiting = self.waiting
            if waiting and waiting[0] == run and len(self.distinct[run]) >= waiting[1]:
                waiting[2].set()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def serve_receiver(port: int) -> int:
    return serve_asgi(Receiver(), port)


def serve_asgi(app: Any, port: int, *, lifespan: Literal["auto", "on", "off"] = "off") -> int:
    """Run ``app`` on loopback as every benchmark server runs: one uvicorn worker, uvloop,
    httptools, no access log."""
    import uvicorn

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        access_log=False,
        loop="uvloop",
        http="httptools",
        lifespan=lifespan,
    )
    return 0
