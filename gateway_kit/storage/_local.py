"""The public operations of the in-process backends: check the arguments, run the engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TypeVar

from gateway_kit.storage import _engine as engine
from gateway_kit.storage._engine import Tx
from gateway_kit.storage.base import (
    ClaimedItem,
    DeadItem,
    Increment,
    IncrManyResult,
    IncrResult,
    LogEntry,
    QueueSize,
    Storage,
    Throttle,
    ThrottleResult,
)
from gateway_kit.storage.checks import (
    check_batch,
    check_count,
    check_key,
    check_name,
    check_partition,
    check_queue,
    check_seconds,
    check_time,
    check_value,
    check_values,
)

T = TypeVar("T")


def _ttl(ttl: float | None) -> float | None:
    return None if ttl is None else check_seconds(ttl, "ttl")


class LocalStorage(Storage, ABC):
    """Shared by ``MemoryStorage`` and ``SQLiteStorage``: each op is one engine call in ``_run``."""

    @abstractmethod
    async def _run(self, fn: Callable[[Tx, float], T], *, write: bool = True) -> T:
        """Run ``fn(tx, now)`` atomically, ``now`` read inside the atomic section."""

    @abstractmethod
    async def now(self) -> float: ...

    @abstractmethod
    async def aclose(self) -> None: ...

    async def get(self, key: str) -> bytes | None:
        check_key(key)
        return await self._run(lambda tx, now: engine.get(tx, now, key), write=False)

    async def set(
        self, key: str, value: bytes, *, ttl: float | None = None, if_absent: bool = False
    ) -> bool:
        check_key(key)
        check_value(value)
        ttl = _ttl(ttl)
        return await self._run(lambda tx, now: engine.set_(tx, now, key, value, ttl, if_absent))

    async def delete(self, key: str) -> bool:
        check_key(key)
        return await self._run(lambda tx, now: engine.delete(tx, now, key))

    async def cas(
        self, key: str, expected: bytes | None, new: bytes | None, *, ttl: float | None = None
    ) -> bool:
        check_key(key)
        for value in (expected, new):
            if value is not None:
                check_value(value)
        ttl = _ttl(ttl)
        return await self._run(lambda tx, now: engine.cas(tx, now, key, expected, new, ttl))

    async def incr(
        self, key: str, amount: int, *, ttl: float | None = None, limit: int | None = None
    ) -> IncrResult:
        inc = Increment(key, amount, ttl, limit)
        return await self._run(lambda tx, now: engine.incr(tx, now, inc))

    async def incr_many(
        self,
        increments: Sequence[Increment],
        *,
        throttle: Throttle | None = None,
        reads: Sequence[str] = (),
    ) -> IncrManyResult:
        incs = list(increments)
        keys = check_batch(incs, throttle, reads)
        if keys and not incs and throttle is None:  # reads alone: a read transaction
            return await self._run(
                lambda tx, now: engine.incr_many(tx, now, [], None, keys), write=False
            )
        return await self._run(lambda tx, now: engine.incr_many(tx, now, incs, throttle, keys))

    async def throttle(
        self, key: str, *, limit: int, period: float, burst: int | None = None, cost: int = 1
    ) -> ThrottleResult:
        rate = Throttle(key, limit, period, burst, cost)
        return await self._run(lambda tx, now: engine.throttle(tx, now, rate))

    async def map_set(self, key: str, field: str, value: bytes) -> None:
        check_key(key)
        check_name(field, "map field")
        check_value(value)
        await self._run(lambda tx, now: engine.map_set(tx, now, key, field, value))

    async def map_get(self, key: str, field: str) -> bytes | None:
        check_key(key)
        check_name(field, "map field")
        return await self._run(lambda tx, now: engine.map_get(tx, now, key, field), write=False)

    async def map_delete(self, key: str, field: str) -> bool:
        check_key(key)
        check_name(field, "map field")
        return await self._run(lambda tx, now: engine.map_delete(tx, now, key, field))

    async def map_items(self, key: str) -> dict[str, bytes]:
        check_key(key)
        return await self._run(lambda tx, now: engine.map_items(tx, now, key), write=False)

    async def log_append(self, key: str, value: bytes, *, max_len: int) -> None:
        check_key(key)
        check_value(value)
        check_count(max_len, "max_len")
        await self._run(lambda tx, now: engine.log_append(tx, now, key, [value], max_len))

    async def log_extend(self, key: str, values: Sequence[bytes], *, max_len: int) -> None:
        check_key(key)
        entries = check_values(values)
        check_count(max_len, "max_len")
        if entries:
            await self._run(lambda tx, now: engine.log_append(tx, now, key, entries, max_len))

    async def log_page(self, key: str, *, limit: int, before: int | None = None) -> list[LogEntry]:
        check_key(key)
        check_count(limit, "limit")
        if before is not None:
            check_count(before, "before")
        return await self._run(
            lambda tx, now: engine.log_page(tx, now, key, limit, before), write=False
        )

    async def log_range(self, key: str, *, limit: int) -> list[bytes]:
        check_key(key)
        check_count(limit, "limit")
        return await self._run(lambda tx, now: engine.log_range(tx, now, key, limit), write=False)

    async def enqueue(self, queue: str, item_id: str, payload: bytes, *, due_at: float) -> bool:
        check_queue(queue)
        check_name(item_id, "item id")
        check_value(payload)
        due = check_time(due_at, "due_at")
        return await self._run(lambda tx, now: engine.enqueue(tx, queue, item_id, payload, due))

    async def claim(self, queue: str, *, limit: int, lease: float) -> list[ClaimedItem]:
        check_queue(queue)
        check_count(limit, "limit")
        lease = check_seconds(lease, "lease")
        return await self._run(lambda tx, now: engine.claim(tx, now, queue, limit, lease))

    async def ack(self, queue: str, token: int) -> bool:
        check_queue(queue)
        check_count(token, "token")
        return await self._run(lambda tx, now: engine.ack(tx, queue, token))

    async def retry(
        self, queue: str, token: int, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        check_queue(queue)
        check_count(token, "token")
        due = check_time(due_at, "due_at")
        if payload is not None:
            check_value(payload)
        return await self._run(lambda tx, now: engine.retry(tx, queue, token, due, payload))

    async def dead(self, queue: str, token: int, *, reason: str = "") -> bool:
        check_queue(queue)
        check_count(token, "token")
        if not isinstance(reason, str):
            raise TypeError("reason must be a str")
        return await self._run(lambda tx, now: engine.dead(tx, now, queue, token, reason))

    async def dead_items(self, queue: str, *, limit: int) -> list[DeadItem]:
        check_queue(queue)
        check_count(limit, "limit")
        return await self._run(lambda tx, now: engine.dead_items(tx, queue, limit), write=False)

    async def requeue(
        self, queue: str, item_id: str, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        check_queue(queue)
        check_name(item_id, "item id")
        due = check_time(due_at, "due_at")
        if payload is not None:
            check_value(payload)
        return await self._run(lambda tx, now: engine.requeue(tx, queue, item_id, due, payload))

    async def drop_partition(self, partition: str) -> int:
        check_partition(partition)
        return await self._run(lambda tx, now: engine.drop_partition(tx, partition))

    async def queue_size(self, queue: str) -> QueueSize:
        check_queue(queue)
        return await self._run(lambda tx, now: engine.queue_size(tx, queue), write=False)

    async def discard(self, queue: str, item_id: str) -> bool:
        check_queue(queue)
        check_name(item_id, "item id")
        return await self._run(lambda tx, now: engine.discard(tx, queue, item_id))
