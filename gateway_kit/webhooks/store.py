"""Webhook records, their delivery state, attempt logs and the index of held or failed
deliveries, all in storage.

Layout (``<ws>`` a workspace id, ``<id>`` a ``wh_...`` id):

- ``<ws>:webhook:<id>``   the configuration (JSON), changed by compare-and-set only, so an
  edit through the API and a worker marking the webhook stale never overwrite each other;
- ``<ws>:webhooks``       map of the workspace's webhook ids (listing);
- ``<ws>:whstate:<id>``   ``last_fired_at`` and ``last_status``, written per attempt;
- ``<ws>:whlog:<id>``     capped log of attempts (``GET .../deliveries``);
- ``<ws>:whdead:<id>``    map of deliveries held or failed, for ``POST .../replay``.

The secret is stored as given (it must sign every delivery) and never shown back in full.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

import anyio

from gateway_kit.events.models import format_timestamp
from gateway_kit.exceptions import InvalidRequestError, NotFoundError
from gateway_kit.storage import Storage
from gateway_kit.storage.lock import held

_ID_ALPHABET = string.ascii_lowercase + string.digits
Status = Literal["active", "paused", "stale"]


def new_webhook_id() -> str:
    return "wh_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


def iso(moment: float | None) -> str | None:
    return None if moment is None else format_timestamp(datetime.fromtimestamp(moment, UTC))


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    workspace_id: str
    name: str
    url: str
    secret: str
    #: ``None``: every event type; empty: paused; else only these.
    events: tuple[str, ...] | None
    created_at: float
    stale_at: float | None = None

    @property
    def status(self) -> Status:
        if self.stale_at is not None:
            return "stale"
        return "paused" if self.events == () else "active"

    def receives(self, event_type: str) -> bool:
        return self.events is None or event_type in self.events

    def secret_hint(self) -> str:
        """What the API shows of the secret: its scheme prefix and last four characters."""
        prefix = "whsec_" if self.secret.startswith("whsec_") else ""
        return f"{prefix}...{self.secret[-4:]}"


@dataclass(frozen=True, slots=True)
class DeliveryState:
    last_fired_at: float | None = None
    #: The HTTP status of the last attempt; 0 when no response came.
    last_status: int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery attempt, as the attempt log keeps it."""

    event_id: str
    event: str
    attempt: int
    started_at: float
    duration_ms: float
    status: int
    error_class: str | None

    def public(self) -> dict[str, Any]:
        return {**asdict(self), "started_at": iso(self.started_at)}


def public_view(hook: Webhook, state: DeliveryState) -> dict[str, Any]:
    """The webhook as the API shows it: never the secret in full."""
    return {
        "id": hook.id,
        "object": "webhook",
        "name": hook.name,
        "url": hook.url,
        "events": None if hook.events is None else list(hook.events),
        "status": hook.status,
        "secret_hint": hook.secret_hint(),
        "last_fired_at": iso(state.last_fired_at),
        "last_status": state.last_status,
        "created_at": iso(hook.created_at),
        "stale_at": iso(hook.stale_at),
    }


class WebhookStore:
    """Webhooks of every workspace; every method takes the workspace id first."""

    def __init__(self, storage: Storage, *, max_per_workspace: int, log_size: int) -> None:
        self._storage = storage
        self._max = max_per_workspace
        self._log_size = log_size

    # -- configuration -----------------------------------------------------------------------

    async def create(
        self,
        workspace_id: str,
        *,
        name: str,
        url: str,
        secret: str,
        events: tuple[str, ...] | None,
    ) -> Webhook:
        # One at a time: creations at once would each count the others out and pass the cap.
        async with held(self._storage, f"{workspace_id}:lock:webhooks"):
            if len(await self._storage.map_items(f"{workspace_id}:webhooks")) >= self._max:
                raise InvalidRequestError(
                    f"a workspace has at most {self._max} webhooks; delete one first"
                )
            hook = Webhook(
                new_webhook_id(),
                workspace_id,
                name,
                url,
                secret,
                events,
                await self._storage.now(),
            )
            await self._storage.set(
                self._key(hook.workspace_id, hook.id), _dump(hook), if_absent=True
            )
            await self._storage.map_set(f"{workspace_id}:webhooks", hook.id, b"")
        return hook

    async def get(self, workspace_id: str, webhook_id: str) -> Webhook | None:
        if not webhook_id.startswith("wh_") or len(webhook_id) > 100:
            return None
        raw = await self._storage.get(self._key(workspace_id, webhook_id))
        return None if raw is None else _load(raw)

    async def for_workspace(self, workspace_id: str) -> list[Webhook]:
        ids = sorted(await self._storage.map_items(f"{workspace_id}:webhooks"))
        hooks: list[Webhook | None] = [None] * len(ids)

        async def read(index: int) -> None:
            hooks[index] = await self.get(workspace_id, ids[index])

        if len(ids) == 1:
            await read(0)
        else:  # concurrently: RedisStorage sends calls made together as one pipeline
            async with anyio.create_task_group() as tasks:
                for index in range(len(ids)):
                    tasks.start_soon(read, index)
        return sorted((h for h in hooks if h is not None), key=lambda h: h.created_at)

    async def update(
        self, workspace_id: str, webhook_id: str, change: Callable[[Webhook], Webhook | None]
    ) -> Webhook | None:
        """Apply ``change`` atomically (compare-and-set, retried on a concurrent edit).

        ``change`` returns the new webhook, or ``None`` to leave it as it is. Returns the
        webhook as stored afterwards; raises ``NotFoundError`` if there is none.
        """
        key = self._key(workspace_id, webhook_id)
        while True:
            raw = await self._storage.get(key)
            if raw is None:
                raise NotFoundError(f"no webhook {webhook_id} in workspace {workspace_id}")
            current = _load(raw)
            new = change(current)
            if new is None:
                return current
            if await self._storage.cas(key, raw, _dump(new)):
                return new

    async def mark_stale(self, workspace_id: str, webhook_id: str, *, at: float) -> bool:
        """Make the webhook stale; ``True`` only for the caller that made the transition."""
        made: list[bool] = []

        def to_stale(hook: Webhook) -> Webhook | None:
            made.clear()
            if hook.stale_at is not None:
                return None
            made.append(True)
            return replace(hook, stale_at=at)

        try:
            await self.update(workspace_id, webhook_id, to_stale)
        except NotFoundError:
            return False
        return bool(made)

    async def delete(self, workspace_id: str, webhook_id: str) -> bool:
        removed = await self._storage.delete(self._key(workspace_id, webhook_id))
        await self._storage.map_delete(f"{workspace_id}:webhooks", webhook_id)
        for part in ("whstate", "whlog", "whdead"):
            await self._storage.delete(f"{workspace_id}:{part}:{webhook_id}")
        return removed

    # -- delivery state, log and replay index -------------------------------------------------

    async def state(self, workspace_id: str, webhook_id: str) -> DeliveryState:
        raw = await self._storage.get(f"{workspace_id}:whstate:{webhook_id}")
        return DeliveryState(**json.loads(raw)) if raw else DeliveryState()

    async def record_attempt(self, workspace_id: str, webhook_id: str, attempt: Attempt) -> None:
        state = DeliveryState(attempt.started_at, attempt.status)
        await self._storage.set(
            f"{workspace_id}:whstate:{webhook_id}", json.dumps(asdict(state)).encode()
        )
        await self._storage.log_append(
            f"{workspace_id}:whlog:{webhook_id}",
            json.dumps(asdict(attempt)).encode(),
            max_len=self._log_size,
        )

    async def attempts(self, workspace_id: str, webhook_id: str, *, limit: int) -> list[Attempt]:
        raw = await self._storage.log_range(f"{workspace_id}:whlog:{webhook_id}", limit=limit)
        return [Attempt(**json.loads(entry)) for entry in raw]

    async def index_dead(
        self, workspace_id: str, webhook_id: str, item_id: str, entry: dict[str, Any]
    ) -> None:
        await self._storage.map_set(
            f"{workspace_id}:whdead:{webhook_id}", item_id, json.dumps(entry).encode()
        )

    async def dead(self, workspace_id: str, webhook_id: str) -> dict[str, dict[str, Any]]:
        raw = await self._storage.map_items(f"{workspace_id}:whdead:{webhook_id}")
        return {item_id: json.loads(value) for item_id, value in raw.items()}

    async def unindex_dead(self, workspace_id: str, webhook_id: str, item_id: str) -> None:
        await self._storage.map_delete(f"{workspace_id}:whdead:{webhook_id}", item_id)

    @staticmethod
    def _key(workspace_id: str, webhook_id: str) -> str:
        return f"{workspace_id}:webhook:{webhook_id}"


def _dump(hook: Webhook) -> bytes:
    return json.dumps(asdict(hook)).encode()


def _load(raw: bytes) -> Webhook:
    data = json.loads(raw)
    events = data.get("events")
    data["events"] = None if events is None else tuple(events)
    return Webhook(**data)
