"""``MemoryStorage``: bounded, in-process, for embedding and tests."""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import islice
from typing import TypeVar

from gateway_kit.exceptions import StorageError
from gateway_kit.storage._engine import Entry, Item, State, Tx
from gateway_kit.storage._local import LocalStorage
from gateway_kit.storage.checks import check_count

__all__ = ["MemoryStorage"]

T = TypeVar("T")


class MemoryStorage(LocalStorage):
    """State in this process's memory, lost when it exits. Safe to share between threads.

    At most ``max_keys`` keys and queue items are held. Expired keys are dropped first, then
    the oldest evictable counters (``Increment.evictable``: Guardian's windows); when none is
    left, a write that needs a new key raises ``StorageError`` rather than evict a live
    counter (a quota that silently restarted at zero would admit what it must refuse).
    """

    def __init__(self, *, max_keys: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self._tx = _MemoryTx(check_count(max_keys, "max_keys"))
        self._clock = clock
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStorage(max_keys={self._tx.max_keys})"

    async def now(self) -> float:
        return self._clock()

    async def _run(self, fn: Callable[[Tx, float], T], *, write: bool = True) -> T:
        # Every operation is a short run of dict work: holding a lock (for other threads) and
        # never awaiting inside it keeps each one atomic without blocking the event loop.
        with self._lock:
            now = self._clock()
            self._tx.now = now
            return fn(self._tx, now)

    async def aclose(self) -> None:
        """Nothing to release; the data stays until the object is dropped."""


class _MemoryTx:
    """The engine's primitives over dicts, with a heap of expiry times for cheap purging."""

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self.now = 0.0
        self._entries: dict[str, Entry] = {}
        self._maps: dict[str, dict[str, bytes]] = {}
        self._logs: dict[str, deque[bytes]] = {}
        self._log_tops: dict[str, int] = {}
        self._expiries: list[tuple[float, str]] = []
        self._queues: dict[str, dict[str, Item]] = {}
        self._tokens: dict[str, dict[int, str]] = {}
        self._seqs: dict[str, int] = {}
        self._items = 0
        #: The live evictable counters, oldest first.
        self._evictable: dict[str, None] = {}

    def _make_room(self) -> None:
        self._purge()
        if len(self._entries) + self._items < self.max_keys:
            return
        if not self._evictable:
            raise StorageError(
                f"memory storage is full ({self.max_keys} keys and queue items, none expired)"
            )
        self.remove(next(iter(self._evictable)))

    def _purge(self) -> None:
        heap = self._expiries
        while heap and heap[0][0] <= self.now:
            expires_at, key = heapq.heappop(heap)
            entry = self._entries.get(key)
            # A stale heap row (the key was rewritten since) must not drop the new entry.
            if entry is not None and entry.expires_at == expires_at:
                self.remove(key)
        if len(heap) > 2 * len(self._entries) + 64:
            self._expiries = [
                (e.expires_at, k) for k, e in self._entries.items() if e.expires_at is not None
            ]
            heapq.heapify(self._expiries)

    def read(self, key: str) -> Entry | None:
        return self._entries.get(key)

    def write(self, key: str, entry: Entry) -> None:
        old = self._entries.get(key)
        if old is None:
            self._make_room()
        elif self._expiries and self._expiries[0][0] <= self.now:
            self._purge()
        self._entries[key] = entry
        if entry.evictable:
            if old is None:
                self._evictable[key] = None
        elif old is not None and old.evictable:
            del self._evictable[key]
        # A counter rewritten with its TTL unchanged keeps its heap row: one row per expiry,
        # not one per write.
        if entry.expires_at is not None and (old is None or old.expires_at != entry.expires_at):
            heapq.heappush(self._expiries, (entry.expires_at, key))

    def remove(self, key: str) -> None:
        self._entries.pop(key, None)
        self._evictable.pop(key, None)
        self._maps.pop(key, None)
        self._logs.pop(key, None)
        self._log_tops.pop(key, None)

    def map_put(self, key: str, field: str, value: bytes) -> None:
        self._maps.setdefault(key, {})[field] = value

    def map_get(self, key: str, field: str) -> bytes | None:
        return self._maps.get(key, {}).get(field)

    def map_pop(self, key: str, field: str) -> bool:
        return self._maps.get(key, {}).pop(field, None) is not None

    def map_all(self, key: str) -> dict[str, bytes]:
        return dict(self._maps.get(key, {}))

    def log_push(self, key: str, values: Sequence[bytes], max_len: int) -> None:
        log = self._logs.setdefault(key, deque())
        log.extendleft(values)  # the last value ends up first: the newest
        while len(log) > max_len:
            log.pop()
        self._log_tops[key] = self._log_tops.get(key, 0) + len(values)

    def log_read(self, key: str, limit: int) -> list[bytes]:
        return list(islice(self._logs.get(key, ()), limit))

    def log_page(self, key: str, limit: int, before: int | None) -> list[tuple[int, bytes]]:
        log = self._logs.get(key)
        if not log:
            return []
        top = self._log_tops[key]  # the newest entry's position
        start = 0 if before is None else max(0, top - before + 1)
        entries = islice(log, start, start + limit)
        return [(top - i, value) for i, value in enumerate(entries, start)]

    # Items are handed out as copies: the engine edits them, then puts them back, and the token
    # index needs the stored (old) token to stay right.
    def item(self, queue: str, item_id: str) -> Item | None:
        item = self._queues.get(queue, {}).get(item_id)
        return None if item is None else replace(item)

    def item_by_token(self, queue: str, token: int) -> Item | None:
        item_id = self._tokens.get(queue, {}).get(token)
        return None if item_id is None else self.item(queue, item_id)

    def put_item(self, queue: str, item: Item) -> None:
        items = self._queues.setdefault(queue, {})
        old = items.get(item.item_id)
        if old is None:
            self._make_room()
            self._items += 1
        elif old.token is not None:
            del self._tokens[queue][old.token]
        if item.token is not None:
            self._tokens.setdefault(queue, {})[item.token] = item.item_id
        items[item.item_id] = replace(item)

    def drop_prefix(self, prefix: str) -> int:
        # Maps and logs have a header entry too: the entries are every key there is.
        doomed = [key for key in self._entries if key.startswith(prefix)]
        for key in doomed:
            self.remove(key)
        return len(doomed)

    def drop_item(self, queue: str, item_id: str) -> None:
        old = self._queues.get(queue, {}).pop(item_id, None)
        if old is not None:
            self._items -= 1
            if old.token is not None:
                del self._tokens[queue][old.token]

    def count_items(self, queue: str) -> dict[State, int]:
        counts: dict[State, int] = {}
        for item in self._queues.get(queue, {}).values():
            counts[item.state] = counts.get(item.state, 0) + 1
        return counts

    def due_items(self, queue: str, now: float, limit: int) -> list[Item]:
        due = (
            i
            for i in self._queues.get(queue, {}).values()
            if i.state != State.DEAD and i.available_at <= now
        )
        return [replace(i) for i in heapq.nsmallest(limit, due, key=lambda i: i.available_at)]

    def dead_items(self, queue: str, limit: int) -> list[Item]:
        dead = (i for i in self._queues.get(queue, {}).values() if i.state == State.DEAD)
        return [replace(i) for i in heapq.nsmallest(limit, dead, key=lambda i: i.failed_at)]

    def next_token(self, queue: str) -> int:
        self._seqs[queue] = token = self._seqs.get(queue, 0) + 1
        return token
