"""A storage backend of your own: plain dicts, for one event loop.

It implements the ``gateway_kit.storage.Storage`` protocol from scratch and passes the
conformance suite (``tests/examples/test_custom_storage.py`` runs it)::

    from gateway_kit.testing.storage import FakeClock, StorageConformance

    class TestDictStorage(StorageConformance):
        @pytest.fixture
        async def storage(self, clock: FakeClock) -> AsyncIterator[DictStorage]:
            async with DictStorage(clock=clock) as storage:
                yield storage

Atomicity comes for free here: no operation awaits anything, so none can interleave with
another on the event loop. A backend over a network or a file needs a transaction or a script
per operation instead. The argument checks and the GCRA arithmetic come from gateway-kit, so
the edge cases behave as in the built-in backends.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import (
    THROTTLED,
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
from gateway_kit.storage.base import gcra, to_us
from gateway_kit.storage.checks import (
    INT64_MAX,
    INT64_MIN,
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


@dataclass
class _Item:
    payload: bytes
    due_at: float
    ready_at: float  # the due time, or the lease's end while leased
    attempts: int = 0
    token: int = 0  # 0: not leased
    dead: bool = False
    reason: str = ""
    failed_at: float = 0.0


@dataclass
class _Queue:
    items: dict[str, _Item] = field(default_factory=dict)
    last_token: int = 0


class DictStorage(Storage):
    """Everything in dicts; values, maps and logs share one key space, as the protocol says.

    Subclassing ``Storage`` is optional (it is a protocol); it brings ``async with`` support.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._values: dict[str, tuple[bytes, float | None]] = {}
        self._maps: dict[str, dict[str, bytes]] = {}
        #: Each log's entries, newest first, with their positions.
        self._logs: dict[str, list[LogEntry]] = {}
        self._queues: dict[str, _Queue] = {}

    # Plumbing: which kind of thing a key holds, expiry, counters.

    def _kind(self, key: str) -> str | None:
        check_key(key)
        if key in self._maps:
            return "map"
        if key in self._logs:
            return "log"
        if key not in self._values:
            return None
        expires_at = self._values[key][1]
        if expires_at is not None and expires_at <= self._clock():
            del self._values[key]
            return None
        return "value"

    def _expect(self, key: str, kind: str) -> None:
        found = self._kind(key)
        if found not in (None, kind):
            raise StorageError(f"{key!r} holds a {found}, not a {kind}")

    def _value(self, key: str) -> bytes | None:
        self._expect(key, "value")
        return self._values[key][0] if key in self._values else None

    def _counter(self, key: str) -> int | None:
        raw = self._value(key)
        if raw is None:
            return None
        if not re.fullmatch(rb"0|-?[1-9][0-9]*", raw) or not INT64_MIN <= int(raw) <= INT64_MAX:
            raise StorageError(f"{key!r} does not hold a 64-bit counter")
        return int(raw)

    def _expiry(self, ttl: float | None) -> float | None:
        return None if ttl is None else self._clock() + check_seconds(ttl, "ttl")

    # The protocol.

    async def now(self) -> float:
        return self._clock()

    async def get(self, key: str) -> bytes | None:
        return self._value(key)

    async def set(
        self, key: str, value: bytes, *, ttl: float | None = None, if_absent: bool = False
    ) -> bool:
        check_value(value)
        expires_at = self._expiry(ttl)
        if self._kind(key) is not None and if_absent:
            return False
        self._maps.pop(key, None)
        self._logs.pop(key, None)
        self._values[key] = (value, expires_at)
        return True

    async def delete(self, key: str) -> bool:
        present = self._kind(key) is not None
        for space in (self._values, self._maps, self._logs):
            space.pop(key, None)
        return present

    async def cas(
        self, key: str, expected: bytes | None, new: bytes | None, *, ttl: float | None = None
    ) -> bool:
        for value in (expected, new):
            if value is not None:
                check_value(value)
        expires_at = self._expiry(ttl)
        if self._value(key) != expected:
            return False
        if new is None:
            self._values.pop(key, None)
        else:
            self._values[key] = (new, expires_at)
        return True

    async def incr(
        self, key: str, amount: int, *, ttl: float | None = None, limit: int | None = None
    ) -> IncrResult:
        result = await self.incr_many([Increment(key, amount, ttl, limit)])
        return IncrResult(result.allowed, result.values[key])

    async def incr_many(
        self,
        increments: Sequence[Increment],
        *,
        throttle: Throttle | None = None,
        reads: Sequence[str] = (),
    ) -> IncrManyResult:
        # Read first: the reads see the state before this step, and a read that raises (a
        # map, a log) does so before anything has changed.
        read = {key: self._value(key) for key in check_batch(increments, throttle, reads)}
        current = {inc.key: self._counter(inc.key) or 0 for inc in increments}
        verdict, tat = None, None
        if throttle is not None:
            stored = self._counter(throttle.key)
            tat, verdict = gcra(throttle, stored, to_us(self._clock()))
            if not verdict.allowed:
                return IncrManyResult(False, current, THROTTLED, verdict, read)
        for inc in increments:
            if inc.refuses(current[inc.key]):
                if throttle is not None:  # report the throttle as it stands: nothing taken
                    verdict = gcra(replace(throttle, cost=0), stored, to_us(self._clock()))[1]
                return IncrManyResult(False, current, inc.key, verdict, read)
        totals = {inc.key: current[inc.key] + inc.amount for inc in increments}
        if any(not INT64_MIN <= total <= INT64_MAX for total in totals.values()):
            raise StorageError("the increment would overflow a signed 64-bit counter")
        for inc in increments:
            _, expires_at = self._values.get(inc.key, (None, self._expiry(inc.ttl)))
            self._values[inc.key] = (b"%d" % totals[inc.key], expires_at)
        if throttle is not None and tat is not None:
            self._values[throttle.key] = (b"%d" % tat, tat / 1e6)
        return IncrManyResult(True, totals, None, verdict, read)

    async def throttle(
        self, key: str, *, limit: int, period: float, burst: int | None = None, cost: int = 1
    ) -> ThrottleResult:
        result = await self.incr_many([], throttle=Throttle(key, limit, period, burst, cost))
        assert result.throttle is not None
        return result.throttle

    async def map_set(self, key: str, field: str, value: bytes) -> None:
        check_name(field, "map field")
        check_value(value)
        self._expect(key, "map")
        self._maps.setdefault(key, {})[field] = value

    async def map_get(self, key: str, field: str) -> bytes | None:
        check_name(field, "map field")
        self._expect(key, "map")
        return self._maps.get(key, {}).get(field)

    async def map_delete(self, key: str, field: str) -> bool:
        check_name(field, "map field")
        self._expect(key, "map")
        fields = self._maps.get(key, {})
        found = fields.pop(field, None) is not None
        if not fields:
            self._maps.pop(key, None)
        return found

    async def map_items(self, key: str) -> dict[str, bytes]:
        self._expect(key, "map")
        return dict(self._maps.get(key, {}))

    async def log_append(self, key: str, value: bytes, *, max_len: int) -> None:
        await self.log_extend(key, [value], max_len=max_len)

    async def log_extend(self, key: str, values: Sequence[bytes], *, max_len: int) -> None:
        entries = check_values(values)
        check_count(max_len, "max_len")
        self._expect(key, "log")
        if not entries:
            return
        log = self._logs.setdefault(key, [])
        top = log[0].seq if log else 0
        log[:0] = [LogEntry(top + i, value) for i, value in reversed(list(enumerate(entries, 1)))]
        del log[max_len:]

    async def log_range(self, key: str, *, limit: int) -> list[bytes]:
        check_count(limit, "limit")
        self._expect(key, "log")
        return [entry.value for entry in self._logs.get(key, [])[:limit]]

    async def log_page(self, key: str, *, limit: int, before: int | None = None) -> list[LogEntry]:
        check_count(limit, "limit")
        if before is not None:
            check_count(before, "before")
        self._expect(key, "log")
        log = self._logs.get(key, [])
        start = 0 if before is None or not log else max(0, log[0].seq - before + 1)
        return log[start : start + limit]

    def _queue(self, name: str) -> _Queue:
        return self._queues.setdefault(check_queue(name), _Queue())

    def _leased(self, queue: str, token: int) -> tuple[str, _Item] | None:
        check_count(token, "token")
        items = self._queue(queue).items.items()
        return next(((k, i) for k, i in items if i.token == token and not i.dead), None)

    async def enqueue(self, queue: str, item_id: str, payload: bytes, *, due_at: float) -> bool:
        items = self._queue(queue).items
        check_name(item_id, "item id")
        check_value(payload)
        due_at = check_time(due_at, "due_at")
        if item_id in items:
            return False
        items[item_id] = _Item(payload, due_at, due_at)
        return True

    async def claim(self, queue: str, *, limit: int, lease: float) -> list[ClaimedItem]:
        q = self._queue(queue)
        check_count(limit, "limit")
        lease = check_seconds(lease, "lease")
        now = self._clock()
        due = sorted(
            (i for i in q.items.items() if not i[1].dead and i[1].ready_at <= now),
            key=lambda pair: pair[1].ready_at,
        )[:limit]
        claimed = []
        for item_id, item in due:
            q.last_token += 1
            item.token, item.attempts, item.ready_at = q.last_token, item.attempts + 1, now + lease
            claimed.append(
                ClaimedItem(item_id, item.payload, item.token, item.attempts, item.due_at)
            )
        return claimed

    async def ack(self, queue: str, token: int) -> bool:
        leased = self._leased(queue, token)
        if leased is None:
            return False
        del self._queue(queue).items[leased[0]]
        return True

    async def retry(
        self, queue: str, token: int, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        due_at = check_time(due_at, "due_at")
        if payload is not None:
            check_value(payload)
        leased = self._leased(queue, token)
        if leased is None:
            return False
        item = leased[1]
        item.token, item.due_at, item.ready_at = 0, due_at, due_at
        item.payload = item.payload if payload is None else payload
        return True

    async def dead(self, queue: str, token: int, *, reason: str = "") -> bool:
        leased = self._leased(queue, token)
        if leased is None:
            return False
        item = leased[1]
        item.token, item.dead, item.reason, item.failed_at = 0, True, reason, self._clock()
        return True

    async def dead_items(self, queue: str, *, limit: int) -> list[DeadItem]:
        check_count(limit, "limit")
        dead = sorted(
            (i for i in self._queue(queue).items.items() if i[1].dead),
            key=lambda pair: pair[1].failed_at,
        )
        return [DeadItem(k, i.payload, i.attempts, i.reason, i.failed_at) for k, i in dead[:limit]]

    async def requeue(
        self, queue: str, item_id: str, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        items = self._queue(queue).items
        due_at = check_time(due_at, "due_at")
        new_payload = None if payload is None else check_value(payload)
        item = items.get(check_name(item_id, "item id"))
        if item is None or not item.dead:
            return False
        items[item_id] = _Item(item.payload if new_payload is None else new_payload, due_at, due_at)
        return True

    async def queue_size(self, queue: str) -> QueueSize:
        items = self._queue(queue).items.values()
        dead = sum(1 for item in items if item.dead)
        leased = sum(1 for item in items if item.token and not item.dead)
        return QueueSize(len(items) - dead - leased, leased, dead)

    async def discard(self, queue: str, item_id: str) -> bool:
        items = self._queue(queue).items
        return items.pop(check_name(item_id, "item id"), None) is not None

    async def drop_partition(self, partition: str) -> int:
        check_partition(partition)
        prefix = f"{partition}:"
        dropped = 0
        for space in (self._values, self._maps, self._logs):
            doomed = [key for key in space if key.startswith(prefix)]
            for key in doomed:
                del space[key]
            dropped += len(doomed)
        return dropped

    async def aclose(self) -> None:
        """Nothing to release."""
