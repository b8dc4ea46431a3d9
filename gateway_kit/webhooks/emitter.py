"""``WebhookEmitter``: every event on the bus becomes one durable delivery per matching webhook.

The deliveries go into the storage queue (the outbox) before ``publish`` returns, so a restart
loses nothing: the worker of any gateway process picks them up. Each delivery's id is
``<event_id>.<webhook_id>``, so a repeated fan-out of the same event queues nothing twice.
A stale webhook still gets its delivery (the worker holds it for a replay); a paused one
(``events`` empty) gets nothing; ``webhook.stale`` never goes to the webhook it is about.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime

import anyio

from gateway_kit.events.models import Event, WebhookStaleData, format_timestamp
from gateway_kit.storage import Storage
from gateway_kit.webhooks.store import WebhookStore

#: The storage queue every webhook delivery goes through.
QUEUE = "webhooks"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A queued delivery: one event to one webhook, with the attempts made so far."""

    workspace_id: str
    webhook_id: str
    event_id: str
    event: str
    #: The event's own timestamp (ISO 8601): what a replay ``since`` is compared with.
    timestamp: str
    #: The event's bytes, exactly as every attempt sends them (stored as UTF-8 text).
    body: str
    attempts: int = 0

    @property
    def item_id(self) -> str:
        return f"{self.event_id}.{self.webhook_id}"

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Delivery:
        return cls(**json.loads(raw))

    def fresh(self) -> Delivery:
        """The same delivery with no attempts made: what a replay queues."""
        return replace(self, attempts=0)


class WebhookEmitter:
    """A bus subscriber; ``on_queued`` is called after deliveries were queued (wakes a worker)."""

    def __init__(
        self,
        store: WebhookStore,
        storage: Storage,
        *,
        on_queued: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._storage = storage
        self._on_queued = on_queued

    async def __call__(self, event: object) -> None:
        if not isinstance(event, Event):
            return
        about = event.data.webhook_id if isinstance(event.data, WebhookStaleData) else None
        targets = [
            hook
            for hook in await self._store.for_workspace(event.workspace_id)
            if hook.id != about and hook.receives(event.event)
        ]
        if not targets:
            return
        body = event.to_bytes().decode()
        now = await self._storage.now()
        deliveries = [
            Delivery(
                event.workspace_id,
                hook.id,
                event.event_id,
                event.event,
                format_timestamp(event.timestamp),
                body,
            )
            for hook in targets
        ]
        if len(deliveries) == 1:
            await self._enqueue(deliveries[0], now)
        else:  # concurrently: RedisStorage sends calls made together as one pipeline
            async with anyio.create_task_group() as tasks:
                for delivery in deliveries:
                    tasks.start_soon(self._enqueue, delivery, now)
        if self._on_queued is not None:
            self._on_queued()

    async def _enqueue(self, delivery: Delivery, now: float) -> None:
        await self._storage.enqueue(QUEUE, delivery.item_id, delivery.to_bytes(), due_at=now)


async def replay(
    storage: Storage,
    store: WebhookStore,
    workspace_id: str,
    webhook_id: str,
    *,
    since: datetime,
) -> list[str]:
    """Queue again the webhook's held and failed deliveries of events since ``since``.

    Same ids, same ``event_id``s, attempts counted afresh. Returns the event ids queued.
    """
    now = await storage.now()
    held = sorted((await store.dead(workspace_id, webhook_id)).items(), key=_by_time)
    replayed = []
    for item_id, entry in held:
        if datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")) < since:
            continue
        queued = await storage.requeue(
            QUEUE, item_id, due_at=now, payload=entry["delivery"].encode()
        )
        # Not dead any more (delivered, or replayed already): the index entry was stale.
        await store.unindex_dead(workspace_id, webhook_id, item_id)
        if queued:
            replayed.append(entry["event_id"])
    return replayed


def _by_time(item: tuple[str, dict[str, str]]) -> str:
    return item[1]["timestamp"]


async def drop_held(
    storage: Storage, store: WebhookStore, workspace_id: str, webhook_id: str
) -> int:
    """Discard the webhook's held and failed deliveries (before it is deleted: nobody could
    replay them any more); how many were discarded."""
    dropped = 0
    for item_id in await store.dead(workspace_id, webhook_id):
        dropped += await storage.discard(QUEUE, item_id)
    return dropped
