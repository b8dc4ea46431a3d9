"""``CacheCounts``: the answer cache's per-workspace counters, added up in the process and
written to the storage once a second (``run``), not by every request.

Every chat request is counted (a hit, a semantic hit, a miss, a bypass), so writing each count
at once would add a storage round trip to every request that has nothing else to settle. The
counts are statistics, not money: they are kept here and flushed in one ``incr_many`` per
workspace a second, and at shutdown. The process's own reads add what it has not flushed yet
(``pending``), so it always sees its own counts; other processes see them within a second. A
flush that fails keeps its counts for the next one; a process that crashes loses at most the
last second's.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import anyio

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Increment, Storage
from gateway_kit.storage.checks import partition_of

__all__ = ["FLUSH_INTERVAL_S", "CacheCounters"]

logger = logging.getLogger("gateway_kit.cache")

#: Seconds between two flushes.
FLUSH_INTERVAL_S = 1.0
#: Counters kept unflushed at most (a storage down for long): past it, new counts are dropped.
_MAX_PENDING = 100_000


class CacheCounters:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._pending: Counter[str] = Counter()
        self.dropped = 0

    def add(self, key: str, amount: int = 1) -> None:
        if key not in self._pending and len(self._pending) >= _MAX_PENDING:
            self.dropped += amount
            return
        self._pending[key] += amount

    def pending(self, key: str) -> int:
        """What this process counted under ``key`` and has not written yet."""
        return self._pending.get(key, 0)

    async def flush(self) -> None:
        """Write what is pending, one step per workspace; keep what could not be written."""
        pending, self._pending = self._pending, Counter()
        groups: dict[str, list[Increment]] = {}
        for key, amount in pending.items():
            groups.setdefault(partition_of(key), []).append(Increment(key, amount))
        for increments in groups.values():
            try:
                await self._storage.incr_many(increments)
            except StorageError as exc:
                logger.warning("cache counts not written yet (kept for the next try): %s", exc)
                for inc in increments:
                    self.add(inc.key, inc.amount)

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Flush every ``FLUSH_INTERVAL_S`` until cancelled, then once more (shielded)."""
        task_status.started()
        try:
            while True:
                await anyio.sleep(FLUSH_INTERVAL_S)
                await self.flush()
        finally:
            with anyio.CancelScope(shield=True):
                await self.flush()
