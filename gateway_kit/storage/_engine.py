"""The operations of ``MemoryStorage`` and ``SQLiteStorage``, written once.

Each function runs inside the caller's atomic section (a lock, or a ``BEGIN IMMEDIATE``
transaction) against ``Tx``, a few synchronous primitives that a backend maps onto its tables.
Arguments arrive checked. Expired entries are treated as absent here, whatever a backend has
purged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Protocol

from gateway_kit.exceptions import StorageError
from gateway_kit.storage.base import (
    THROTTLED,
    ClaimedItem,
    DeadItem,
    Increment,
    IncrManyResult,
    IncrResult,
    LogEntry,
    QueueSize,
    Throttle,
    ThrottleResult,
    gcra,
    to_us,
)
from gateway_kit.storage.checks import INT64_MAX, INT64_MIN


class Kind(IntEnum):
    """What a key holds."""

    VALUE = 0
    MAP = 1
    LOG = 2


class State(IntEnum):
    """Where a queue item is."""

    QUEUED = 0
    LEASED = 1
    DEAD = 2


@dataclass(slots=True)
class Entry:
    """A key's header: maps and logs keep their fields and entries beside it."""

    kind: Kind
    value: bytes | None = None
    expires_at: float | None = None
    #: A counter a bounded store may drop early (``Increment.evictable``).
    evictable: bool = False


@dataclass(slots=True)
class Item:
    """A queue item. ``available_at`` is its due time when queued, its lease end when leased."""

    item_id: str
    payload: bytes
    state: State
    available_at: float
    due_at: float
    attempts: int = 0
    token: int | None = None
    reason: str = ""
    failed_at: float = 0.0


class Tx(Protocol):
    """The primitives a backend provides inside one atomic section."""

    def read(self, key: str) -> Entry | None: ...
    def write(self, key: str, entry: Entry) -> None: ...
    def remove(self, key: str) -> None: ...
    def map_put(self, key: str, field: str, value: bytes) -> None: ...
    def map_get(self, key: str, field: str) -> bytes | None: ...
    def map_pop(self, key: str, field: str) -> bool: ...
    def map_all(self, key: str) -> dict[str, bytes]: ...
    def log_push(self, key: str, values: Sequence[bytes], max_len: int) -> None: ...
    def log_read(self, key: str, limit: int) -> list[bytes]: ...
    def log_page(self, key: str, limit: int, before: int | None) -> list[tuple[int, bytes]]: ...
    def item(self, queue: str, item_id: str) -> Item | None: ...
    def item_by_token(self, queue: str, token: int) -> Item | None: ...
    def put_item(self, queue: str, item: Item) -> None: ...
    def drop_item(self, queue: str, item_id: str) -> None: ...
    def due_items(self, queue: str, now: float, limit: int) -> list[Item]: ...
    def dead_items(self, queue: str, limit: int) -> list[Item]: ...
    def count_items(self, queue: str) -> dict[State, int]: ...
    def next_token(self, queue: str) -> int: ...
    def drop_prefix(self, prefix: str) -> int: ...


# Counters are stored as canonical ASCII decimal, as Redis stores them (no sign, no zeros).
_COUNTER = re.compile(rb"0|-?[1-9][0-9]{0,18}")


def _live(tx: Tx, key: str, now: float, kind: Kind | None) -> Entry | None:
    entry = tx.read(key)
    if entry is None or (entry.expires_at is not None and entry.expires_at <= now):
        return None
    if kind is not None and entry.kind != kind:
        held, wanted = entry.kind.name.lower(), kind.name.lower()
        raise StorageError(f"storage key {key!r} holds a {held}, not a {wanted}")
    return entry


def _expiry(now: float, ttl: float | None) -> float | None:
    return None if ttl is None else now + ttl


def _counter(key: str, entry: Entry | None) -> int:
    if entry is None:
        return 0
    assert entry.value is not None
    if not _COUNTER.fullmatch(entry.value) or not INT64_MIN <= int(entry.value) <= INT64_MAX:
        raise StorageError(f"storage key {key!r} holds a value that is not a 64-bit counter")
    return int(entry.value)


def _sum(key: str, current: int, amount: int) -> int:
    total = current + amount
    if not INT64_MIN <= total <= INT64_MAX:
        raise StorageError(f"incrementing {key!r} would overflow a signed 64-bit counter")
    return total


# Values and counters.


def get(tx: Tx, now: float, key: str) -> bytes | None:
    entry = _live(tx, key, now, Kind.VALUE)
    return None if entry is None else entry.value


def set_(tx: Tx, now: float, key: str, value: bytes, ttl: float | None, if_absent: bool) -> bool:
    entry = _live(tx, key, now, None)
    if entry is not None and if_absent:
        return False
    if entry is not None and entry.kind != Kind.VALUE:
        tx.remove(key)
    tx.write(key, Entry(Kind.VALUE, value, _expiry(now, ttl)))
    return True


def delete(tx: Tx, now: float, key: str) -> bool:
    present = _live(tx, key, now, None) is not None
    tx.remove(key)
    return present


def cas(
    tx: Tx, now: float, key: str, expected: bytes | None, new: bytes | None, ttl: float | None
) -> bool:
    entry = _live(tx, key, now, Kind.VALUE)
    if (None if entry is None else entry.value) != expected:
        return False
    if new is None:
        tx.remove(key)
    else:
        tx.write(key, Entry(Kind.VALUE, new, _expiry(now, ttl)))
    return True


def incr_many(
    tx: Tx,
    now: float,
    increments: Sequence[Increment],
    throttle: Throttle | None,
    reads: Sequence[str] = (),
) -> IncrManyResult:
    # The reads come first: they see the state before the step, and one that raises (a map
    # or a log) does so before anything is written.
    read = {key: get(tx, now, key) for key in reads} if reads else {}
    entries = [_live(tx, inc.key, now, Kind.VALUE) for inc in increments]
    current = {inc.key: _counter(inc.key, e) for inc, e in zip(increments, entries, strict=True)}
    verdict: ThrottleResult | None = None
    tat: int | None = None
    refused: str | None = None
    if throttle is not None:
        state = _live(tx, throttle.key, now, Kind.VALUE)
        stored = None if state is None else _counter(throttle.key, state)
        tat, verdict = gcra(throttle, stored, to_us(now))
        if not verdict.allowed:
            refused = THROTTLED
        else:
            refused = next((i.key for i in increments if i.refuses(current[i.key])), None)
            if refused is not None:
                # Nothing is consumed: report the throttle as it stands.
                _, verdict = gcra(replace(throttle, cost=0), stored, to_us(now))
    else:
        refused = next((i.key for i in increments if i.refuses(current[i.key])), None)
    if refused is not None:
        return IncrManyResult(False, current, refused, verdict, read)
    # Every sum is checked before the first write: all or nothing.
    totals = {i.key: _sum(i.key, current[i.key], i.amount) for i in increments}
    for inc, entry in zip(increments, entries, strict=True):
        if entry is None:
            new = Entry(Kind.VALUE, b"%d" % totals[inc.key], _expiry(now, inc.ttl), inc.evictable)
        else:
            new = Entry(Kind.VALUE, b"%d" % totals[inc.key], entry.expires_at, entry.evictable)
        tx.write(inc.key, new)
    if throttle is not None and tat is not None:
        tx.write(throttle.key, Entry(Kind.VALUE, b"%d" % tat, tat / 1e6))
    return IncrManyResult(True, totals, None, verdict, read)


def incr(tx: Tx, now: float, increment: Increment) -> IncrResult:
    result = incr_many(tx, now, [increment], None)
    return IncrResult(result.allowed, result.values[increment.key])


def throttle(tx: Tx, now: float, rate: Throttle) -> ThrottleResult:
    verdict = incr_many(tx, now, [], rate).throttle
    assert verdict is not None
    return verdict


# Maps and logs.


def map_set(tx: Tx, now: float, key: str, field: str, value: bytes) -> None:
    if _live(tx, key, now, Kind.MAP) is None:
        tx.write(key, Entry(Kind.MAP))
    tx.map_put(key, field, value)


def map_get(tx: Tx, now: float, key: str, field: str) -> bytes | None:
    return None if _live(tx, key, now, Kind.MAP) is None else tx.map_get(key, field)


def map_delete(tx: Tx, now: float, key: str, field: str) -> bool:
    if _live(tx, key, now, Kind.MAP) is None or not tx.map_pop(key, field):
        return False
    if not tx.map_all(key):
        tx.remove(key)  # as in Redis, a map ends with its last field
    return True


def map_items(tx: Tx, now: float, key: str) -> dict[str, bytes]:
    return {} if _live(tx, key, now, Kind.MAP) is None else tx.map_all(key)


def log_append(tx: Tx, now: float, key: str, values: Sequence[bytes], max_len: int) -> None:
    if _live(tx, key, now, Kind.LOG) is None:
        tx.write(key, Entry(Kind.LOG))
    tx.log_push(key, values, max_len)


def log_range(tx: Tx, now: float, key: str, limit: int) -> list[bytes]:
    return [] if _live(tx, key, now, Kind.LOG) is None else tx.log_read(key, limit)


def log_page(tx: Tx, now: float, key: str, limit: int, before: int | None) -> list[LogEntry]:
    if _live(tx, key, now, Kind.LOG) is None:
        return []
    return [LogEntry(seq, value) for seq, value in tx.log_page(key, limit, before)]


# The queue.


def enqueue(tx: Tx, queue: str, item_id: str, payload: bytes, due_at: float) -> bool:
    if tx.item(queue, item_id) is not None:
        return False
    tx.put_item(queue, Item(item_id, payload, State.QUEUED, due_at, due_at))
    return True


def claim(tx: Tx, now: float, queue: str, limit: int, lease: float) -> list[ClaimedItem]:
    claimed = []
    for item in tx.due_items(queue, now, limit):
        item.state, item.available_at = State.LEASED, now + lease
        item.token, item.attempts = tx.next_token(queue), item.attempts + 1
        tx.put_item(queue, item)
        claimed.append(
            ClaimedItem(item.item_id, item.payload, item.token, item.attempts, item.due_at)
        )
    return claimed


def _leased(tx: Tx, queue: str, token: int) -> Item | None:
    item = tx.item_by_token(queue, token)
    return item if item is not None and item.state == State.LEASED else None


def ack(tx: Tx, queue: str, token: int) -> bool:
    item = _leased(tx, queue, token)
    if item is None:
        return False
    tx.drop_item(queue, item.item_id)
    return True


def retry(tx: Tx, queue: str, token: int, due_at: float, payload: bytes | None) -> bool:
    item = _leased(tx, queue, token)
    if item is None:
        return False
    item.state, item.available_at, item.due_at, item.token = State.QUEUED, due_at, due_at, None
    if payload is not None:
        item.payload = payload
    tx.put_item(queue, item)
    return True


def dead(tx: Tx, now: float, queue: str, token: int, reason: str) -> bool:
    item = _leased(tx, queue, token)
    if item is None:
        return False
    item.state, item.token, item.reason, item.failed_at = State.DEAD, None, reason, now
    tx.put_item(queue, item)
    return True


def dead_items(tx: Tx, queue: str, limit: int) -> list[DeadItem]:
    return [
        DeadItem(i.item_id, i.payload, i.attempts, i.reason, i.failed_at)
        for i in tx.dead_items(queue, limit)
    ]


def requeue(tx: Tx, queue: str, item_id: str, due_at: float, payload: bytes | None) -> bool:
    item = tx.item(queue, item_id)
    if item is None or item.state != State.DEAD:
        return False
    new_payload = item.payload if payload is None else payload
    tx.put_item(queue, Item(item_id, new_payload, State.QUEUED, due_at, due_at))
    return True


def drop_partition(tx: Tx, partition: str) -> int:
    return tx.drop_prefix(f"{partition}:")


def queue_size(tx: Tx, queue: str) -> QueueSize:
    counts = tx.count_items(queue)
    return QueueSize(
        counts.get(State.QUEUED, 0), counts.get(State.LEASED, 0), counts.get(State.DEAD, 0)
    )


def discard(tx: Tx, queue: str, item_id: str) -> bool:
    if tx.item(queue, item_id) is None:
        return False
    tx.drop_item(queue, item_id)
    return True
