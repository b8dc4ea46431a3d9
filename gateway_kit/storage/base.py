"""The ``Storage`` protocol: the semantic atomic operations every layer keeps its state through.

A backend implements these operations atomically; the conformance suite in
``gateway_kit.testing`` checks that it does. Values are bytes (serialization lives above the
protocol), counters are signed 64-bit integers (money is integer micro-USD), times are Unix
seconds as floats.

Keys are ``"<partition>:<name>"``. The partition (a workspace id such as ``ws_abc123``, or ``gk``
for global state) is what a multi-key operation may span: ``incr_many`` takes keys of one
partition only, and ``RedisStorage`` hash-tags the partition so Redis Cluster accepts it.

``incr_many`` is the request path's one atomic step: the layers of one request contribute
their increments, an optional throttle and the keys they need to read (a cache entry, a
window, committed spend), and the step reads, checks and writes them together (one script on
Redis, one transaction on SQLite, one lock in memory), admitting the request or refusing it
without side effects. Its reads see the state before the step's own writes, whether the step
is applied or refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from gateway_kit.storage.checks import INT64_MIN, check_count, check_key, check_seconds

__all__ = [
    "THROTTLED",
    "ClaimedItem",
    "DeadItem",
    "IncrManyResult",
    "IncrResult",
    "Increment",
    "LogEntry",
    "QueueSize",
    "Storage",
    "Throttle",
    "ThrottleResult",
    "gcra",
    "to_us",
]

#: ``IncrManyResult.refused`` when the throttle refused. It has no ``:``, so it is never a key.
THROTTLED = "throttle"

# GCRA keeps time in integer microseconds so that every backend (Lua's doubles included, exact
# up to 2**53) computes the same verdicts; a window longer than this would lose that exactness.
_MAX_WINDOW_US = 2**50


@dataclass(frozen=True, slots=True)
class Increment:
    """One counter change of an ``incr_many``: ``amount`` may be negative (a refund).

    ``ttl`` is applied when the key is created, never extended. An increment that would take the
    value past ``limit`` is refused; a refund (``amount <= 0``) never is.

    ``evictable``: a store bounded in keys (``MemoryStorage``'s ``max_keys``) may drop the
    counter it creates before its TTL, oldest first, to make room for another key, rather than
    refuse the write. For counters whose loss only loosens a heuristic (Guardian's windows),
    never for quotas or money. Other backends keep it as any counter.
    """

    key: str
    amount: int
    ttl: float | None = None
    limit: int | None = None
    evictable: bool = False

    def __post_init__(self) -> None:
        check_key(self.key)
        check_count(self.amount, "amount", low=INT64_MIN)
        if self.ttl is not None:
            check_seconds(self.ttl, "ttl")
        if self.limit is not None:
            check_count(self.limit, "limit", low=INT64_MIN)

    def refuses(self, current: int) -> bool:
        """Whether this increment would take ``current`` past its limit."""
        return self.limit is not None and self.amount > 0 and current > self.limit - self.amount


@dataclass(frozen=True, slots=True)
class Throttle:
    """A GCRA rate: ``limit`` per ``period`` seconds, bursts of ``burst`` (default ``limit``)."""

    key: str
    limit: int
    period: float
    burst: int | None = None
    cost: int = 1

    def __post_init__(self) -> None:
        check_key(self.key)
        check_count(self.limit, "limit", low=1)
        check_seconds(self.period, "period")
        check_count(self.cost, "cost", low=0)
        if self.burst is not None:
            check_count(self.burst, "burst", low=1)
        if self.cost > self.capacity:
            raise ValueError(f"cost {self.cost} exceeds the burst {self.capacity}: never allowed")
        if self.interval_us * self.capacity > _MAX_WINDOW_US:
            raise ValueError("throttle window (period / limit * burst) is too long")

    @property
    def capacity(self) -> int:
        """The burst size: how many requests a fresh throttle admits at once."""
        return self.limit if self.burst is None else self.burst

    @property
    def interval_us(self) -> int:
        """The emission interval (period / limit) in whole microseconds."""
        return max(1, round(self.period * 1_000_000 / self.limit))


@dataclass(frozen=True, slots=True)
class IncrResult:
    """``allowed`` false means nothing changed; ``value`` is the counter after (or as it is)."""

    allowed: bool
    value: int


@dataclass(frozen=True, slots=True)
class ThrottleResult:
    """A GCRA verdict. ``retry_after`` and ``reset_after`` are seconds, exact to the microsecond.

    ``retry_after`` is 0 when allowed; ``reset_after`` is how long until the throttle is back to
    a full burst.
    """

    allowed: bool
    remaining: int
    retry_after: float
    reset_after: float


@dataclass(frozen=True, slots=True)
class IncrManyResult:
    """The outcome of an all-or-nothing ``incr_many``.

    ``refused`` is ``None`` when everything was applied, else the first refusal: ``THROTTLED``
    when the throttle refused (it is checked first), or the key of the increment that would
    have passed its limit. ``values`` maps each key to its value after the call (unchanged when
    refused). ``throttle`` is the throttle's verdict; when an increment refused, it is the
    throttle's unchanged state (nothing was consumed). ``reads`` maps each key of the call's
    ``reads`` to its value as ``get`` would have returned it at the start of the step (before
    its increments), whether the step was applied or refused.
    """

    allowed: bool
    values: Mapping[str, int]
    refused: str | None = None
    throttle: ThrottleResult | None = None
    reads: Mapping[str, bytes | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimedItem:
    """A queue item leased to one worker. ``token`` fences: only its holder may ack it."""

    item_id: str
    payload: bytes
    token: int
    #: How many times the item has been claimed, this claim included.
    attempts: int
    due_at: float


@dataclass(frozen=True, slots=True)
class LogEntry:
    """An entry of a capped log with its position: ``seq`` is 1 for the log's first entry and
    one more for each entry after it, so a reader can go on from where it stopped."""

    seq: int
    value: bytes


@dataclass(frozen=True, slots=True)
class QueueSize:
    """How many items a queue holds: ``waiting`` (queued, due or not), ``leased`` (claimed and
    not acked, retried or dead-lettered yet: a lapsed lease counts until claimed again) and
    ``dead``."""

    waiting: int
    leased: int
    dead: int


@dataclass(frozen=True, slots=True)
class DeadItem:
    """A dead-lettered queue item, kept until requeued or discarded."""

    item_id: str
    payload: bytes
    attempts: int
    reason: str
    failed_at: float


def gcra(throttle: Throttle, tat_us: int | None, now_us: int) -> tuple[int | None, ThrottleResult]:
    """One GCRA step from the stored theoretical arrival time (TAT), in microseconds.

    Returns the TAT to store (``None`` when nothing changes: refused, or a zero cost) and the
    verdict. Backends share this (``RedisStorage`` mirrors it in Lua) so that they agree to the
    microsecond.
    """
    interval = throttle.interval_us
    window = interval * throttle.capacity
    tat = now_us if tat_us is None else max(tat_us, now_us)
    new_tat = tat + throttle.cost * interval
    allow_at = new_tat - window
    if allow_at > now_us:
        remaining = max(0, (now_us + window - tat) // interval)
        return None, ThrottleResult(
            False, remaining, (allow_at - now_us) / 1e6, (tat - now_us) / 1e6
        )
    remaining = (now_us + window - new_tat) // interval
    verdict = ThrottleResult(True, remaining, 0.0, (new_tat - now_us) / 1e6)
    return (new_tat if throttle.cost else None), verdict


def to_us(seconds: float) -> int:
    """Unix seconds as whole microseconds, the unit of ``gcra``."""
    return round(seconds * 1_000_000)


@runtime_checkable
class Storage(Protocol):
    """The state every gateway layer keeps, as atomic operations. All methods are async.

    Invalid keys raise ``InvalidKeyError``; backend failures raise ``StorageError`` (whose
    messages never carry URLs, passwords or values); values that are not bytes raise
    ``TypeError``. A key holds one kind of thing (a value or counter, a map, or a log); using it
    as another kind raises ``StorageError``, except ``set`` and ``delete``, which replace or
    remove whatever is there.
    """

    async def now(self) -> float:
        """The store's clock, Unix seconds: the clock every TTL and due time is measured by."""
        ...

    # Values and counters.
    async def get(self, key: str) -> bytes | None:
        """The value, or ``None`` when absent or expired. Counters read as ASCII decimal."""
        ...

    async def set(
        self, key: str, value: bytes, *, ttl: float | None = None, if_absent: bool = False
    ) -> bool:
        """Store ``value`` (expiring after ``ttl`` s); ``False`` if ``if_absent`` and present."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove the key, whatever it holds; ``False`` when it was absent."""
        ...

    async def cas(
        self, key: str, expected: bytes | None, new: bytes | None, *, ttl: float | None = None
    ) -> bool:
        """Replace the value if it equals ``expected`` (``None``: absent); ``new=None`` deletes.

        ``ttl`` applies to the new value; without it the new value does not expire.
        """
        ...

    async def incr(
        self, key: str, amount: int, *, ttl: float | None = None, limit: int | None = None
    ) -> IncrResult:
        """Add ``amount`` to a 64-bit counter (absent counts as 0); see ``Increment``."""
        ...

    async def incr_many(
        self,
        increments: Sequence[Increment],
        *,
        throttle: Throttle | None = None,
        reads: Sequence[str] = (),
    ) -> IncrManyResult:
        """Apply every increment and take the throttle, or change nothing; one partition only.

        ``reads`` are keys (of the same partition) read in the same atomic step, before its
        writes, and returned in ``IncrManyResult.reads`` as ``get`` returns them, whether the
        step is applied or refused. A key may be both read and incremented (the read sees the
        value before the increment); a key read twice is read once. A read key that holds a
        map or a log raises ``StorageError``, and the step changes nothing.
        """
        ...

    async def throttle(
        self, key: str, *, limit: int, period: float, burst: int | None = None, cost: int = 1
    ) -> ThrottleResult:
        """Take ``cost`` from a GCRA throttle of ``limit`` per ``period`` seconds."""
        ...

    # Records for the management API.
    async def map_set(self, key: str, field: str, value: bytes) -> None:
        """Set one field of the map at ``key``."""
        ...

    async def map_get(self, key: str, field: str) -> bytes | None:
        """One field of the map, or ``None``."""
        ...

    async def map_delete(self, key: str, field: str) -> bool:
        """Remove one field; the map disappears with its last field."""
        ...

    async def map_items(self, key: str) -> dict[str, bytes]:
        """Every field of the map (empty when absent)."""
        ...

    async def log_append(self, key: str, value: bytes, *, max_len: int) -> None:
        """Add an entry to the capped log at ``key``, dropping the oldest past ``max_len``."""
        ...

    async def log_range(self, key: str, *, limit: int) -> list[bytes]:
        """Up to ``limit`` entries, newest first."""
        ...

    async def log_extend(self, key: str, values: Sequence[bytes], *, max_len: int) -> None:
        """Add entries (oldest first) to the capped log at ``key`` in one step, dropping the
        oldest past ``max_len``."""
        ...

    async def log_page(self, key: str, *, limit: int, before: int | None = None) -> list[LogEntry]:
        """Up to ``limit`` entries, newest first, with their positions; only those before
        position ``before`` when given (a page's last ``seq``: the next page). Positions only
        grow while the log exists, whatever the cap drops."""
        ...

    # The durable delayed queue.
    async def enqueue(self, queue: str, item_id: str, payload: bytes, *, due_at: float) -> bool:
        """Add an item due at ``due_at``; ``False`` (no change) while the id is present.

        An id is present while queued, leased or dead-lettered; after ``ack`` or ``discard``
        it may be enqueued again.
        """
        ...

    async def claim(self, queue: str, *, limit: int, lease: float) -> list[ClaimedItem]:
        """Lease up to ``limit`` due items for ``lease`` seconds, earliest first.

        An item whose lease lapsed is due again. Every claim gets a new token, greater than
        every token the queue gave before.
        """
        ...

    async def ack(self, queue: str, token: int) -> bool:
        """Finish the leased item; ``False`` when the token is stale (the item was re-claimed)."""
        ...

    async def retry(
        self, queue: str, token: int, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        """Put the leased item back, due at ``due_at`` (and with a new payload, if given)."""
        ...

    async def dead(self, queue: str, token: int, *, reason: str = "") -> bool:
        """Move the leased item to the dead letters."""
        ...

    async def dead_items(self, queue: str, *, limit: int) -> list[DeadItem]:
        """Up to ``limit`` dead-lettered items, oldest first."""
        ...

    async def requeue(
        self, queue: str, item_id: str, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        """Queue a dead item again under the same id, attempts reset; ``False`` if not dead.

        ``payload`` replaces the stored payload (a replay starting its own count afresh).
        """
        ...

    async def queue_size(self, queue: str) -> QueueSize:
        """How many items ``queue`` holds, by state."""
        ...

    async def discard(self, queue: str, item_id: str) -> bool:
        """Remove an item in any state; ``False`` when absent."""
        ...

    # A partition as a whole.
    async def drop_partition(self, partition: str) -> int:
        """Delete every key of ``partition`` (values, counters, maps, logs: a deleted
        workspace's whole state); how many keys were deleted. Queues are not partitioned and
        keep their items. Not atomic with other operations: a key written into the partition
        while it is being dropped may remain."""
        ...

    # Lifecycle.
    async def aclose(self) -> None:
        """Release connections and threads. Idempotent."""
        ...

    # A backend that subclasses Storage explicitly inherits these two.
    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
