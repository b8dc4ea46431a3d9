"""``EventLog``: each workspace's recent events, as its webhooks receive them.

Subscribed to the ``Gateway``'s event bus, it keeps the last ``MAX_EVENTS`` events of each
workspace in a capped log (``{ws}:events``), whether or not the workspace has webhooks, so the
dashboard and ``GET .../events`` can show what happened. An event is kept as the exact body a
webhook is sent (no secret is ever in one).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Storage

__all__ = ["MAX_EVENTS", "EventLog"]

logger = logging.getLogger("gateway_kit.events")

#: Events kept per workspace, the oldest dropped first.
MAX_EVENTS = 200


def _key(workspace_id: str) -> str:
    return f"{workspace_id}:events"


class EventLog:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    async def __call__(self, event: Any) -> None:
        try:
            await self._storage.log_append(
                _key(event.workspace_id), event.to_bytes(), max_len=MAX_EVENTS
            )
        except StorageError as exc:
            logger.warning("event %s not kept in the event log: %s", event.event_id, exc)

    async def recent(self, workspace_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """The workspace's last ``limit`` events, newest first."""
        return [
            json.loads(raw)
            for raw in await self._storage.log_range(_key(workspace_id), limit=limit)
        ]
