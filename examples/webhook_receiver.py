"""Receive gateway-kit webhooks: verify, deduplicate, acknowledge, then work in the background.

    WEBHOOK_SECRET=whsec_... uvicorn examples.webhook_receiver:app

Point a webhook at http://<host>:8000/webhooks with the same secret. Each delivery goes
through three steps, in this order:

1. The ``X-Service-Signature`` is checked against the raw body bytes (constant time) before
   anything parses them. A forged or altered body gets 401 and nothing else happens.
2. The envelope's ``event_id`` is looked up among the ids already seen. Delivery is
   at-least-once, and retries and replays carry the same id, so a repeat is acknowledged and
   dropped.
3. The event is queued and 200 goes back at once. A background task does the real work, so a
   slow handler never runs into the gateway's 5 s timeout and triggers a retry.

The queue and the seen ids live in memory, so a restart forgets them, and an event that was
acknowledged but not yet handled is lost. In production, insert each event into a table with
a unique constraint on ``event_id`` before answering: that gives both the deduplication and a
durable queue, and workers take the events from there.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from cachetools import TTLCache
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway_kit import verify_signature

Handler = Callable[[dict[str, Any]], Awaitable[None]]

logger = logging.getLogger("webhook_receiver")


async def print_event(event: dict[str, Any]) -> None:
    """The default work: print a line. Yours goes here (update a ledger, page someone...)."""
    print("handled", event["event"], event["event_id"], flush=True)


def create_app(secret: str, handle: Handler | None = None) -> Starlette:
    """A receiver for webhooks signed with ``secret``; ``handle`` does the work per event."""
    work = handle or print_event
    # Retries span about 36 minutes (spec section 8); a day covers most manual replays too.
    seen: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=24 * 3600)
    send_stream, receive_stream = anyio.create_memory_object_stream[dict[str, Any]](
        max_buffer_size=1000
    )

    async def webhook(request: Request) -> JSONResponse:
        body = await request.body()
        signature = request.headers.get("x-service-signature", "")
        if not verify_signature(body, signature, secret):
            return JSONResponse({"error": "invalid signature"}, status_code=401)
        try:
            event = json.loads(body)
        except ValueError:
            event = None
        # The id from the signed body: the X-Service-Event-Id header carries the same value,
        # but it is not covered by the signature.
        event_id = event.get("event_id") if isinstance(event, dict) else None
        if not isinstance(event_id, str):
            return JSONResponse({"error": "not an event"}, status_code=400)
        if event_id in seen:
            return JSONResponse({"received": True, "duplicate": True})
        try:
            send_stream.send_nowait(event)
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            return JSONResponse({"error": "busy"}, status_code=503)  # the gateway retries
        # No await since the lookup, so two copies arriving together cannot both get here.
        seen[event_id] = True
        return JSONResponse({"received": True, "duplicate": False})

    async def consume(events: MemoryObjectReceiveStream[dict[str, Any]]) -> None:
        async with events:
            async for event in events:
                try:
                    await work(event)
                except Exception:
                    # Acknowledged already, so the gateway will not retry it. Forget the id
                    # so that a replay (POST .../webhooks/<id>/replay) is handled.
                    seen.pop(event["event_id"], None)
                    logger.exception("handling %s failed", event["event_id"])

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not secret:
            raise RuntimeError("set WEBHOOK_SECRET to the webhook's secret")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(consume, receive_stream)
            yield
            send_stream.close()  # the consumer finishes what is queued, then stops

    return Starlette(routes=[Route("/webhooks", webhook, methods=["POST"])], lifespan=lifespan)


app = create_app(os.environ.get("WEBHOOK_SECRET", ""))
