"""The storage conformance suite: every backend, ours or yours, must pass it.

Subclass ``StorageConformance`` in a test module and give it a ``storage`` fixture::

    class TestMyStorage(StorageConformance):
        @pytest.fixture
        async def storage(self, clock: FakeClock) -> AsyncIterator[Storage]:
            async with MyStorage(clock=clock) as storage:
                yield storage

Each test gets a fresh, empty store. ``clock`` is a ``FakeClock`` the tests advance instead of
sleeping. A backend that keeps its server's time (Redis) sets ``injectable_clock = False``:
the tests that need an exact clock (``EXACT_CLOCK_TESTS``) are then collected and skipped,
with the reason, and the others let real time pass, briefly, or measure it on the store's
clock. Tests run on asyncio through the anyio pytest plugin.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import anyio
import pytest

from gateway_kit.exceptions import InvalidKeyError, StorageError
from gateway_kit.storage.base import (
    THROTTLED,
    Increment,
    IncrManyResult,
    LogEntry,
    QueueSize,
    Storage,
    Throttle,
)
from gateway_kit.storage.checks import INT64_MAX, INT64_MIN, MAX_KEY_BYTES
from gateway_kit.testing.clock import FakeClock

__all__ = ["FakeClock", "StorageConformance"]

BINARY = bytes(range(256)) + b"\x00\r\n"


async def _gather(n: int, fn: Callable[[int], Awaitable[Any]]) -> list[Any]:
    """Run ``fn(0..n-1)`` concurrently and return the results in order."""
    results: list[Any] = [None] * n

    async def run(i: int) -> None:
        results[i] = await fn(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(run, i)
    return results


@pytest.mark.anyio
class StorageConformance:
    """The contract of ``gateway_kit.storage.Storage``; see the module docstring."""

    #: ``False`` when the backend cannot take an injected clock (it uses its server's).
    injectable_clock: ClassVar[bool] = True

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def storage(self, clock: FakeClock) -> Storage:
        raise NotImplementedError("a StorageConformance subclass provides a `storage` fixture")

    async def pass_time(self, clock: FakeClock, seconds: float) -> None:
        """Let ``seconds`` pass on the store's clock: advance the fake one, or wait."""
        if self.injectable_clock:
            clock.advance(seconds)
        else:
            await anyio.sleep(seconds)

    #: Tests that need exact times, so an injected clock. On a backend that keeps its
    #: server's time they are collected and skipped, with the reason; the throttle's
    #: arithmetic is also checked on any clock by ``test_throttle_verdicts_on_the_store_clock``.
    EXACT_CLOCK_TESTS: ClassVar[tuple[str, ...]] = (
        "test_ttl_ends_exactly_on_time",
        "test_period_keys_roll_over",
        "test_throttle_admits_a_burst_then_one_per_interval",
        "test_throttle_burst_and_cost",
    )

    @pytest.fixture(autouse=True)
    def _exact_clock_or_skip(self, request: pytest.FixtureRequest) -> None:
        # An autouse fixture runs before the others: a skipped test opens no store.
        if not self.injectable_clock and request.function.__name__ in self.EXACT_CLOCK_TESTS:
            pytest.skip(
                f"needs an injectable clock: {type(self).__name__} sets injectable_clock = "
                "False (its backend keeps its server's time, which a test cannot move)"
            )

    # The clock and the lifecycle.

    async def test_now_is_the_store_clock(self, storage: Storage, clock: FakeClock) -> None:
        if self.injectable_clock:
            assert await storage.now() == clock()
            clock.advance(2.5)
            assert await storage.now() == clock()
        else:
            assert abs(await storage.now() - time.time()) < 5

    async def test_context_manager_yields_the_storage_and_closes_it(self, storage: Storage) -> None:
        async with storage as entered:
            assert entered is storage
        await storage.aclose()  # closing twice is harmless

    # Keys and arguments.

    async def test_bad_keys_are_rejected_by_every_operation(self, storage: Storage) -> None:
        ops: list[Callable[[str], Awaitable[object]]] = [
            storage.get,
            lambda k: storage.set(k, b"v"),
            storage.delete,
            lambda k: storage.cas(k, None, b"v"),
            lambda k: storage.incr(k, 1),
            lambda k: storage.incr_many([Increment(k, 1)]),
            lambda k: storage.incr_many([], reads=[k]),
            lambda k: storage.throttle(k, limit=1, period=1),
            lambda k: storage.map_set(k, "f", b"v"),
            lambda k: storage.map_get(k, "f"),
            lambda k: storage.map_delete(k, "f"),
            storage.map_items,
            lambda k: storage.log_append(k, b"v", max_len=1),
            lambda k: storage.log_range(k, limit=1),
            lambda k: storage.log_extend(k, [b"v"], max_len=1),
            lambda k: storage.log_page(k, limit=1),
        ]
        too_long = "ws_1:" + "x" * MAX_KEY_BYTES
        for key, message in [
            ("", "empty"),
            ("no_partition", "partition"),
            (":name", "partition"),
            ("ws_1:", "partition"),
            ("ws{1}:x", "brace"),
            (too_long, str(MAX_KEY_BYTES)),
        ]:
            for op in ops:
                with pytest.raises(InvalidKeyError, match=message):
                    await op(key)

    async def test_a_key_of_the_maximum_size_is_accepted(self, storage: Storage) -> None:
        key = "ws_1:" + "é" * ((MAX_KEY_BYTES - 5) // 2)  # two bytes a character
        assert len(key.encode()) <= MAX_KEY_BYTES
        assert await storage.set(key, b"v")
        assert await storage.get(key) == b"v"
        with pytest.raises(InvalidKeyError):
            await storage.get(key + "é")

    async def test_incr_many_stays_in_one_partition(self, storage: Storage) -> None:
        with pytest.raises(InvalidKeyError, match="partitions"):
            await storage.incr_many([Increment("ws_1:a", 1), Increment("ws_2:a", 1)])
        with pytest.raises(InvalidKeyError, match="partitions"):
            await storage.incr_many([Increment("ws_1:a", 1)], throttle=Throttle("ws_2:t", 1, 1))
        with pytest.raises(InvalidKeyError, match="twice"):
            await storage.incr_many([Increment("ws_1:a", 1), Increment("ws_1:a", 2)])
        assert await storage.get("ws_1:a") is None

    async def test_queue_names_and_item_ids_are_checked(self, storage: Storage) -> None:
        for queue in ["", "q{1}", "q" * (MAX_KEY_BYTES + 1)]:
            with pytest.raises(InvalidKeyError):
                await storage.enqueue(queue, "i", b"p", due_at=0)
            with pytest.raises(InvalidKeyError):
                await storage.claim(queue, limit=1, lease=1)
        with pytest.raises(InvalidKeyError):
            await storage.enqueue("q", "", b"p", due_at=0)
        with pytest.raises(InvalidKeyError):
            await storage.map_set("ws_1:m", "", b"v")

    async def test_values_must_be_bytes(self, storage: Storage) -> None:
        bad: Any = "text"
        with pytest.raises(TypeError):
            await storage.set("ws_1:k", bad)
        with pytest.raises(TypeError):
            await storage.cas("ws_1:k", None, bad)
        with pytest.raises(TypeError):
            await storage.map_set("ws_1:m", "f", bad)
        with pytest.raises(TypeError):
            await storage.log_append("ws_1:l", bad, max_len=1)
        with pytest.raises(TypeError):
            await storage.log_extend("ws_1:l", [b"v", bad], max_len=1)
        one: Any = b"one value"
        with pytest.raises(TypeError):
            await storage.log_extend("ws_1:l", one, max_len=1)
        assert await storage.log_range("ws_1:l", limit=5) == []
        with pytest.raises(TypeError):
            await storage.enqueue("q", "i", bad, due_at=0)
        assert await storage.get("ws_1:k") is None

    async def test_numbers_out_of_range_are_rejected(self, storage: Storage) -> None:
        bad: Any
        for bad, error in [(1.5, TypeError), (True, TypeError), (2**63, ValueError)]:
            with pytest.raises(error):
                await storage.incr("ws_1:c", bad)
        for ttl in [0, -1, float("inf"), float("nan")]:
            with pytest.raises(ValueError, match="ttl"):
                await storage.set("ws_1:k", b"v", ttl=ttl)
        with pytest.raises(ValueError, match="lease"):
            await storage.claim("q", limit=1, lease=0)
        with pytest.raises(ValueError, match="limit"):
            await storage.claim("q", limit=0, lease=1)
        with pytest.raises(ValueError, match="max_len"):
            await storage.log_append("ws_1:l", b"v", max_len=0)
        assert await storage.get("ws_1:c") is None

    # Values.

    async def test_get_of_a_missing_key_is_none(self, storage: Storage) -> None:
        assert await storage.get("ws_1:missing") is None

    async def test_values_are_binary_safe(self, storage: Storage) -> None:
        for i, value in enumerate([BINARY, b"", b"\x00"]):
            await storage.set(f"ws_1:{i}", value)
            assert await storage.get(f"ws_1:{i}") == value
        await storage.map_set("ws_1:m", "f", BINARY)
        assert await storage.map_get("ws_1:m", "f") == BINARY
        await storage.log_append("ws_1:l", BINARY, max_len=5)
        assert await storage.log_range("ws_1:l", limit=5) == [BINARY]
        await storage.enqueue("q", "i", BINARY, due_at=0)
        assert (await storage.claim("q", limit=1, lease=30))[0].payload == BINARY

    async def test_set_overwrites_unless_if_absent(self, storage: Storage) -> None:
        assert await storage.set("ws_1:k", b"one")
        assert await storage.set("ws_1:k", b"two")
        assert not await storage.set("ws_1:k", b"three", if_absent=True)
        assert await storage.get("ws_1:k") == b"two"
        assert await storage.set("ws_1:new", b"v", if_absent=True)

    async def test_delete_reports_whether_the_key_was_there(self, storage: Storage) -> None:
        await storage.set("ws_1:k", b"v")
        assert await storage.delete("ws_1:k")
        assert not await storage.delete("ws_1:k")
        assert await storage.get("ws_1:k") is None

    async def test_cas_swaps_only_on_a_match(self, storage: Storage) -> None:
        assert not await storage.cas("ws_1:k", b"x", b"y")  # absent is not b"x"
        assert await storage.get("ws_1:k") is None
        assert await storage.cas("ws_1:k", None, b"one")  # absent -> present
        assert not await storage.cas("ws_1:k", None, b"two")  # present is not absent
        assert not await storage.cas("ws_1:k", b"two", b"three")
        assert await storage.cas("ws_1:k", b"one", BINARY)
        assert await storage.get("ws_1:k") == BINARY
        assert await storage.cas("ws_1:k", BINARY, None)  # new=None deletes
        assert await storage.get("ws_1:k") is None
        assert await storage.cas("ws_1:k", None, None)  # absent stays absent

    async def test_cas_is_atomic_under_concurrency(self, storage: Storage) -> None:
        await storage.set("ws_1:k", b"0")
        wins = await _gather(50, lambda i: storage.cas("ws_1:k", b"0", b"%d" % (i + 1)))
        assert sum(wins) == 1
        assert await storage.get("ws_1:k") == b"%d" % (wins.index(True) + 1)

    async def test_values_expire_after_their_ttl(self, storage: Storage, clock: FakeClock) -> None:
        await storage.set("ws_1:set", b"v", ttl=0.5)
        await storage.cas("ws_1:cas", None, b"v", ttl=0.5)
        await storage.set("ws_1:cleared", b"v", ttl=0.5)
        await storage.set("ws_1:cleared", b"v")  # a set without ttl makes it lasting
        assert await storage.get("ws_1:set") == b"v"
        assert await storage.get("ws_1:cas") == b"v"
        await self.pass_time(clock, 0.6)
        assert await storage.get("ws_1:set") is None
        assert await storage.get("ws_1:cas") is None
        assert await storage.get("ws_1:cleared") == b"v"
        assert await storage.set("ws_1:set", b"again", if_absent=True)  # expired is absent

    async def test_ttl_ends_exactly_on_time(self, storage: Storage, clock: FakeClock) -> None:
        await storage.set("ws_1:k", b"v", ttl=10)
        clock.advance(9.999)
        assert await storage.get("ws_1:k") == b"v"
        clock.advance(0.001)
        assert await storage.get("ws_1:k") is None

    async def test_a_key_holds_one_kind_of_thing(self, storage: Storage) -> None:
        await storage.map_set("ws_1:k", "f", b"v")
        with pytest.raises(StorageError):
            await storage.get("ws_1:k")
        with pytest.raises(StorageError):
            await storage.incr("ws_1:k", 1)
        with pytest.raises(StorageError):
            await storage.log_append("ws_1:k", b"v", max_len=3)
        assert await storage.map_items("ws_1:k") == {"f": b"v"}
        assert not await storage.set("ws_1:k", b"v", if_absent=True)
        assert await storage.set("ws_1:k", b"value")  # set replaces whatever is there
        assert await storage.get("ws_1:k") == b"value"
        with pytest.raises(StorageError):
            await storage.map_items("ws_1:k")

    # Counters.

    async def test_incr_counts_from_zero_and_refunds(self, storage: Storage) -> None:
        r = await storage.incr("ws_1:c", 3)
        assert (r.allowed, r.value) == (True, 3)
        r = await storage.incr("ws_1:c", 4)
        assert (r.allowed, r.value) == (True, 7)
        r = await storage.incr("ws_1:c", -10)
        assert (r.allowed, r.value) == (True, -3)
        assert await storage.get("ws_1:c") == b"-3"

    async def test_a_refused_increment_changes_nothing(self, storage: Storage) -> None:
        assert (await storage.incr("ws_1:c", 4, limit=5)).allowed
        r = await storage.incr("ws_1:c", 2, limit=5)
        assert (r.allowed, r.value) == (False, 4)
        r = await storage.incr("ws_1:c", 1, limit=5)  # the limit itself is reachable
        assert (r.allowed, r.value) == (True, 5)
        assert (await storage.incr("ws_1:c", 1, limit=5)).value == 5
        assert await storage.get("ws_1:c") == b"5"

    async def test_an_amount_over_the_limit_is_refused_on_a_new_key(self, storage: Storage) -> None:
        r = await storage.incr("ws_1:c", 6, limit=5)
        assert (r.allowed, r.value) == (False, 0)
        assert await storage.get("ws_1:c") is None  # not even created

    async def test_refunds_are_never_refused(self, storage: Storage) -> None:
        await storage.incr("ws_1:c", 10)
        r = await storage.incr("ws_1:c", -2, limit=5)  # above the limit, a refund still goes
        assert (r.allowed, r.value) == (True, 8)
        assert not (await storage.incr("ws_1:c", 1, limit=5)).allowed

    async def test_limits_compare_negative_counters_correctly(self, storage: Storage) -> None:
        await storage.incr("ws_1:c", -3)  # refunds took it below zero
        r = await storage.incr("ws_1:c", 7, limit=5)
        assert (r.allowed, r.value) == (True, 4)
        assert not (await storage.incr("ws_1:c", 2, limit=5)).allowed
        await storage.incr("ws_1:d", -10)
        assert not (await storage.incr("ws_1:d", 20, limit=5)).allowed
        r = await storage.incr("ws_1:d", 3, limit=-5)
        assert (r.allowed, r.value) == (True, -7)
        assert not (await storage.incr("ws_1:d", 3, limit=-5)).allowed

    async def test_counters_hold_64_bit_values_exactly(self, storage: Storage) -> None:
        big = 2**53 + 1  # not representable as a double
        assert (await storage.incr("ws_1:c", big)).value == big
        assert (await storage.incr("ws_1:c", 2)).value == big + 2
        assert (await storage.incr("ws_1:max", INT64_MAX, limit=INT64_MAX)).value == INT64_MAX
        with pytest.raises(StorageError, match="overflow"):
            await storage.incr("ws_1:max", 1)
        assert await storage.get("ws_1:max") == str(INT64_MAX).encode()
        assert (await storage.incr("ws_1:min", INT64_MIN)).value == INT64_MIN
        with pytest.raises(StorageError, match="overflow"):
            await storage.incr("ws_1:min", -1)
        r = await storage.incr("ws_1:lim", 2**62, limit=2**62 + 5)
        assert (r.allowed, r.value) == (True, 2**62)
        r = await storage.incr("ws_1:lim", 6, limit=2**62 + 5)
        assert (r.allowed, r.value) == (False, 2**62)

    async def test_incr_refuses_a_value_that_is_not_a_counter(self, storage: Storage) -> None:
        for value in [b"abc", b"007", b"1.5", b"", b"-0", str(2**63).encode()]:
            await storage.set("ws_1:c", value)
            with pytest.raises(StorageError):
                await storage.incr("ws_1:c", 1)
            assert await storage.get("ws_1:c") == value
        await storage.set("ws_1:c", b"41")
        assert (await storage.incr("ws_1:c", 1)).value == 42

    async def test_counter_ttl_is_set_once_and_never_extended(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        await storage.incr("ws_1:c", 1, ttl=0.6)
        await self.pass_time(clock, 0.35)
        assert (await storage.incr("ws_1:c", 1, ttl=0.6)).value == 2
        await self.pass_time(clock, 0.35)
        assert await storage.get("ws_1:c") is None  # 0.7 s after creation
        # The next period starts from zero, with a TTL of its own.
        assert (await storage.incr("ws_1:c", 1, ttl=0.6)).value == 1
        await storage.incr("ws_1:lasting", 1)
        await storage.incr("ws_1:lasting", 1, ttl=0.1)  # an existing key gets no TTL
        await self.pass_time(clock, 0.2)
        assert await storage.get("ws_1:lasting") == b"2"

    async def test_period_keys_roll_over(self, storage: Storage, clock: FakeClock) -> None:
        month = 30 * 86400.0
        for _ in range(3):
            await storage.incr("ws_1:quota", 1, ttl=month, limit=3)
        assert not (await storage.incr("ws_1:quota", 1, ttl=month, limit=3)).allowed
        clock.advance(month - 0.001)
        assert not (await storage.incr("ws_1:quota", 1, ttl=month, limit=3)).allowed
        clock.advance(0.001)
        r = await storage.incr("ws_1:quota", 1, ttl=month, limit=3)
        assert (r.allowed, r.value) == (True, 1)

    async def test_concurrent_increments_admit_exactly_the_limit(self, storage: Storage) -> None:
        results = await _gather(200, lambda _: storage.incr("ws_1:c", 1, limit=5))
        assert sum(r.allowed for r in results) == 5
        assert sorted(r.value for r in results if r.allowed) == [1, 2, 3, 4, 5]
        assert await storage.get("ws_1:c") == b"5"

    # incr_many.

    async def test_incr_many_applies_every_increment(self, storage: Storage) -> None:
        await storage.incr("ws_1:b", 10)
        result = await storage.incr_many(
            [Increment("ws_1:a", 1, limit=5), Increment("ws_1:b", -4), Increment("ws_1:c", 2**40)]
        )
        assert result.allowed
        assert result.refused is None
        assert result.throttle is None
        assert dict(result.values) == {"ws_1:a": 1, "ws_1:b": 6, "ws_1:c": 2**40}
        assert await storage.get("ws_1:b") == b"6"
        assert (await storage.incr_many([])).allowed

    async def test_incr_many_is_all_or_nothing(self, storage: Storage) -> None:
        await storage.incr("ws_1:b", 9)
        incs = [Increment("ws_1:a", 1), Increment("ws_1:b", 2, limit=10), Increment("ws_1:c", 5)]
        result = await storage.incr_many(incs)
        assert not result.allowed
        assert result.refused == "ws_1:b"
        assert dict(result.values) == {"ws_1:a": 0, "ws_1:b": 9, "ws_1:c": 0}
        assert await storage.get("ws_1:a") is None
        assert await storage.get("ws_1:c") is None

    async def test_incr_many_names_the_first_refusal(self, storage: Storage) -> None:
        incs = [Increment("ws_1:a", 2, limit=1), Increment("ws_1:b", 2, limit=1)]
        assert (await storage.incr_many(incs)).refused == "ws_1:a"

    async def test_incr_many_overflow_changes_nothing(self, storage: Storage) -> None:
        await storage.incr("ws_1:b", INT64_MAX)
        with pytest.raises(StorageError, match="overflow"):
            await storage.incr_many([Increment("ws_1:a", 1), Increment("ws_1:b", 1)])
        assert await storage.get("ws_1:a") is None

    async def test_incr_many_sets_ttls_at_creation(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        await storage.incr("ws_1:old", 1)
        await storage.incr_many(
            [Increment("ws_1:new", 1, ttl=0.3), Increment("ws_1:old", 1, ttl=0.3)]
        )
        await self.pass_time(clock, 0.4)
        assert await storage.get("ws_1:new") is None
        assert await storage.get("ws_1:old") == b"2"

    async def test_an_evictable_counter_is_a_counter(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        # A backend may drop it early to make room (a bounded one); otherwise it is counted,
        # limited and expires like any other.
        inc = Increment("ws_1:window", 1, ttl=0.3, limit=2, evictable=True)
        assert (await storage.incr_many([inc])).values == {"ws_1:window": 1}
        assert (await storage.incr_many([inc])).values == {"ws_1:window": 2}
        assert not (await storage.incr_many([inc])).allowed
        await self.pass_time(clock, 0.4)
        assert await storage.get("ws_1:window") is None

    async def test_a_throttle_refusal_changes_nothing(self, storage: Storage) -> None:
        rate = Throttle("ws_1:burst", limit=1, period=3600)
        first = await storage.incr_many([Increment("ws_1:quota", 1, limit=10)], throttle=rate)
        assert first.allowed
        assert first.throttle is not None
        assert first.throttle.allowed
        second = await storage.incr_many([Increment("ws_1:quota", 1, limit=10)], throttle=rate)
        assert not second.allowed
        assert second.refused == THROTTLED
        assert second.throttle is not None
        assert not second.throttle.allowed
        assert 3599 < second.throttle.retry_after <= 3600
        assert dict(second.values) == {"ws_1:quota": 1}
        assert await storage.get("ws_1:quota") == b"1"

    async def test_a_counter_refusal_leaves_the_throttle_untouched(self, storage: Storage) -> None:
        rate = Throttle("ws_1:burst", limit=3, period=3600)
        incs = [Increment("ws_1:quota", 1, limit=1)]
        ok = await storage.incr_many(incs, throttle=rate)
        assert ok.allowed
        assert ok.throttle is not None
        assert ok.throttle.remaining == 2
        refused = await storage.incr_many(incs, throttle=rate)
        assert refused.refused == "ws_1:quota"
        # The throttle's state as it stands: one of three taken, two remaining.
        assert refused.throttle is not None
        assert refused.throttle.remaining == 2
        assert (await storage.throttle("ws_1:burst", limit=3, period=3600)).remaining == 1
        assert (await storage.throttle("ws_1:burst", limit=3, period=3600)).remaining == 0

    async def test_concurrent_admissions_admit_exactly_the_limit(self, storage: Storage) -> None:
        incs = [Increment("ws_1:requests", 1, limit=5), Increment("ws_1:spend", 250)]
        rate = Throttle("ws_1:burst", limit=100, period=3600)
        results = await _gather(200, lambda _: storage.incr_many(incs, throttle=rate))
        assert sum(r.allowed for r in results) == 5
        assert await storage.get("ws_1:requests") == b"5"
        assert await storage.get("ws_1:spend") == b"1250"
        assert (await storage.throttle("ws_1:burst", limit=100, period=3600)).remaining == 94

    # incr_many's reads.

    async def test_incr_many_reads_come_back_with_the_step(self, storage: Storage) -> None:
        await storage.set("ws_1:entry", BINARY)
        await storage.incr("ws_1:spend", 1500)
        result = await storage.incr_many(
            [Increment("ws_1:requests", 1, limit=10)],
            reads=["ws_1:entry", "ws_1:spend", "ws_1:missing", "ws_1:spend"],
        )
        assert result.allowed
        assert dict(result.values) == {"ws_1:requests": 1}
        # As ``get`` returns them: bytes, counters as ASCII decimal, absent as None; a key
        # named twice is read once.
        assert dict(result.reads) == {
            "ws_1:entry": BINARY,
            "ws_1:spend": b"1500",
            "ws_1:missing": None,
        }
        alone = await storage.incr_many([], reads=["ws_1:requests", "ws_1:entry"])
        assert (alone.allowed, dict(alone.values)) == (True, {})
        assert dict(alone.reads) == {"ws_1:requests": b"1", "ws_1:entry": BINARY}
        rate = Throttle("ws_1:burst", limit=5, period=3600)
        throttled = await storage.incr_many([], throttle=rate, reads=["ws_1:spend"])
        assert throttled.allowed
        assert dict(throttled.reads) == {"ws_1:spend": b"1500"}
        assert dict((await storage.incr_many([Increment("ws_1:requests", 1)])).reads) == {}

    async def test_incr_many_reads_come_back_on_a_refusal(self, storage: Storage) -> None:
        await storage.set("ws_1:cached", b"answer")
        await storage.incr("ws_1:quota", 3)
        refused = await storage.incr_many(
            [Increment("ws_1:other", 1), Increment("ws_1:quota", 1, limit=3)],
            reads=["ws_1:cached", "ws_1:quota", "ws_1:other"],
        )
        assert (refused.allowed, refused.refused) == (False, "ws_1:quota")
        assert dict(refused.reads) == {
            "ws_1:cached": b"answer",
            "ws_1:quota": b"3",
            "ws_1:other": None,
        }
        rate = Throttle("ws_1:burst", limit=1, period=3600)
        assert (await storage.incr_many([], throttle=rate)).allowed
        throttled = await storage.incr_many(
            [Increment("ws_1:other", 1)], throttle=rate, reads=["ws_1:cached"]
        )
        assert throttled.refused == THROTTLED
        assert dict(throttled.reads) == {"ws_1:cached": b"answer"}
        assert await storage.get("ws_1:other") is None

    async def test_incr_many_reads_see_the_state_before_its_writes(self, storage: Storage) -> None:
        first = await storage.incr_many([Increment("ws_1:c", 5)], reads=["ws_1:c"])
        assert (first.reads["ws_1:c"], first.values["ws_1:c"]) == (None, 5)
        second = await storage.incr_many([Increment("ws_1:c", -2)], reads=["ws_1:c"])
        assert (second.reads["ws_1:c"], second.values["ws_1:c"]) == (b"5", 3)
        assert await storage.get("ws_1:c") == b"3"

    async def test_incr_many_reads_of_expired_keys_are_none(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        await storage.set("ws_1:value", b"v", ttl=0.3)
        await storage.incr("ws_1:counter", 7, ttl=0.3)
        await storage.set("ws_1:lasting", b"l")
        await self.pass_time(clock, 0.4)
        result = await storage.incr_many(
            [Increment("ws_1:n", 1)], reads=["ws_1:value", "ws_1:counter", "ws_1:lasting"]
        )
        assert dict(result.reads) == {
            "ws_1:value": None,
            "ws_1:counter": None,
            "ws_1:lasting": b"l",
        }

    async def test_reading_a_map_or_a_log_raises_and_changes_nothing(
        self, storage: Storage
    ) -> None:
        await storage.map_set("ws_1:map", "f", b"v")
        await storage.log_append("ws_1:log", b"v", max_len=3)
        rate = Throttle("ws_1:burst", limit=1, period=3600)
        for key in ["ws_1:map", "ws_1:log"]:
            with pytest.raises(StorageError):
                await storage.incr_many(
                    [Increment("ws_1:c", 1)], throttle=rate, reads=["ws_1:fine", key]
                )
        assert await storage.get("ws_1:c") is None
        assert (await storage.throttle("ws_1:burst", limit=1, period=3600)).allowed  # untaken

    async def test_incr_many_reads_stay_in_the_partition(self, storage: Storage) -> None:
        with pytest.raises(InvalidKeyError, match="partitions"):
            await storage.incr_many([Increment("ws_1:a", 1)], reads=["ws_2:a"])
        with pytest.raises(InvalidKeyError, match="partitions"):
            await storage.incr_many([], throttle=Throttle("ws_1:t", 1, 1), reads=["ws_2:a"])
        with pytest.raises(InvalidKeyError, match="partitions"):
            await storage.incr_many([], reads=["ws_1:a", "ws_2:a"])
        with pytest.raises(TypeError):
            await storage.incr_many([Increment("ws_1:a", 1)], reads="ws_1:a")  # one key
        assert await storage.get("ws_1:a") is None
        assert await storage.get("ws_1:t") is None

    async def test_reads_are_atomic_with_the_increments_of_their_step(
        self, storage: Storage
    ) -> None:
        # Each step adds 1 to one of two counters and reads both. In one atomic section, the
        # steps line up one after another: the totals they read are 0..n-1, once each, and
        # each step's counter reads one below the value its increment made. Reads taken
        # outside the section (a get before the step, or after) would repeat or skip totals.
        n = 60
        keys = ["ws_1:even", "ws_1:odd"]

        async def step(i: int) -> IncrManyResult:
            return await storage.incr_many([Increment(keys[i % 2], 1)], reads=keys)

        totals = []
        for i, result in enumerate(await _gather(n, step)):
            counts = [int(result.reads[key] or b"0") for key in keys]
            assert result.values[keys[i % 2]] == counts[i % 2] + 1
            totals.append(sum(counts))
        assert sorted(totals) == list(range(n))
        assert (await storage.get("ws_1:even"), await storage.get("ws_1:odd")) == (b"30", b"30")

    # The throttle (GCRA).

    async def test_throttle_admits_a_burst_then_one_per_interval(
        self, storage: Storage, clock: FakeClock
    ) -> None:

        async def take() -> Any:
            return await storage.throttle("ws_1:rpm", limit=60, period=60)

        for expected_remaining in range(59, -1, -1):
            r = await take()
            assert (r.allowed, r.remaining, r.retry_after) == (True, expected_remaining, 0.0)
        assert r.reset_after == 60.0
        r = await take()
        assert (r.allowed, r.remaining, r.retry_after, r.reset_after) == (False, 0, 1.0, 60.0)
        clock.advance(0.25)
        r = await take()
        assert (r.allowed, r.retry_after, r.reset_after) == (False, 0.75, 59.75)
        clock.advance(0.749)
        r = await take()
        assert not r.allowed
        assert r.retry_after == pytest.approx(0.001, abs=1e-9)
        clock.advance(0.001)
        r = await take()
        assert (r.allowed, r.remaining, r.reset_after) == (True, 0, 60.0)
        clock.advance(60)
        assert (await take()).remaining == 59

    async def test_throttle_burst_and_cost(self, storage: Storage, clock: FakeClock) -> None:
        for _ in range(3):
            assert (await storage.throttle("ws_1:t", limit=10, period=1, burst=3)).allowed
        r = await storage.throttle("ws_1:t", limit=10, period=1, burst=3)
        assert (r.allowed, r.retry_after) == (False, 0.1)
        r = await storage.throttle("ws_1:c", limit=10, period=1, cost=6)
        assert (r.allowed, r.remaining, r.reset_after) == (True, 4, 0.6)
        r = await storage.throttle("ws_1:c", limit=10, period=1, cost=6)
        assert (r.allowed, r.remaining, r.retry_after) == (False, 4, 0.2)
        r = await storage.throttle("ws_1:c", limit=10, period=1, cost=0)  # a look, no change
        assert (r.allowed, r.remaining) == (True, 4)
        clock.advance(0.2)
        assert (await storage.throttle("ws_1:c", limit=10, period=1, cost=6)).allowed

    async def test_throttle_verdicts_on_the_store_clock(self, storage: Storage) -> None:
        # The two tests above, on whatever clock the store keeps: the periods are long enough
        # that the test's own duration (``spent``) frees no slot, so the counts are exact, and
        # every time is exact up to ``spent`` (0 on an injected clock, which stands still).
        start = await storage.now()
        burst = [await storage.throttle("ws_1:rph", limit=60, period=3600) for _ in range(61)]
        capped = [
            await storage.throttle("ws_1:b", limit=10, period=3600, burst=3) for _ in range(4)
        ]
        costly = [
            await storage.throttle("ws_1:c", limit=10, period=3600, cost=cost) for cost in (6, 6, 0)
        ]
        spent = await storage.now() - start
        assert 0 <= spent < 60  # below every interval here (60 s and 360 s)

        def near(seconds: float, exact: float) -> bool:
            """Measured up to ``spent`` later than the instant ``exact`` is counted from."""
            return exact - spent - 1e-6 <= seconds <= exact + 1e-6

        for taken, r in enumerate(burst[:60], start=1):
            assert (r.allowed, r.remaining, r.retry_after) == (True, 60 - taken, 0.0)
            assert near(r.reset_after, 60.0 * taken)
        refused = burst[60]
        assert (refused.allowed, refused.remaining) == (False, 0)
        assert near(refused.retry_after, 60.0)
        assert near(refused.reset_after, 3600.0)
        assert [r.allowed for r in capped] == [True, True, True, False]
        assert near(capped[3].retry_after, 360.0)
        first, second, look = costly
        assert (first.allowed, first.remaining, first.reset_after) == (True, 4, 2160.0)
        assert (second.allowed, second.remaining) == (False, 4)
        assert near(second.retry_after, 720.0)
        assert (look.allowed, look.remaining) == (True, 4)  # cost 0: a look, no change

    async def test_throttle_arguments_are_checked(self, storage: Storage) -> None:
        with pytest.raises(ValueError, match="burst"):
            await storage.throttle("ws_1:t", limit=10, period=1, burst=3, cost=4)
        with pytest.raises(ValueError, match="limit"):
            await storage.throttle("ws_1:t", limit=0, period=1)
        with pytest.raises(ValueError, match="period"):
            await storage.throttle("ws_1:t", limit=1, period=0)
        assert await storage.get("ws_1:t") is None

    async def test_throttle_refills_with_time(self, storage: Storage, clock: FakeClock) -> None:
        for _ in range(2):
            assert (await storage.throttle("ws_1:t", limit=2, period=0.4)).allowed
        refused = await storage.throttle("ws_1:t", limit=2, period=0.4)
        assert not refused.allowed
        assert 0.1 < refused.retry_after <= 0.2
        assert 0.3 < refused.reset_after <= 0.4
        await self.pass_time(clock, 0.45)
        r = await storage.throttle("ws_1:t", limit=2, period=0.4)
        assert (r.allowed, r.remaining) == (True, 1)

    async def test_a_concurrent_burst_admits_exactly_the_burst(self, storage: Storage) -> None:
        results = await _gather(100, lambda _: storage.throttle("ws_1:t", limit=60, period=3600))
        assert sum(r.allowed for r in results) == 60
        assert sorted(r.remaining for r in results if r.allowed) == list(range(60))

    # Maps and logs.

    async def test_map_fields(self, storage: Storage) -> None:
        assert await storage.map_items("ws_1:m") == {}
        assert await storage.map_get("ws_1:m", "a") is None
        await storage.map_set("ws_1:m", "a", b"1")
        await storage.map_set("ws_1:m", "b", b"2")
        await storage.map_set("ws_1:m", "a", b"3")
        await storage.map_set("ws_1:m", "ключ", b"4")
        assert await storage.map_get("ws_1:m", "a") == b"3"
        assert await storage.map_items("ws_1:m") == {"a": b"3", "b": b"2", "ключ": b"4"}
        assert await storage.map_delete("ws_1:m", "a")
        assert not await storage.map_delete("ws_1:m", "a")
        assert await storage.map_items("ws_1:m") == {"b": b"2", "ключ": b"4"}
        assert await storage.map_items("ws_1:other") == {}

    async def test_a_map_ends_with_its_last_field(self, storage: Storage) -> None:
        await storage.map_set("ws_1:m", "a", b"1")
        assert await storage.map_delete("ws_1:m", "a")
        assert not await storage.delete("ws_1:m")
        await storage.map_set("ws_1:m", "a", b"1")
        assert await storage.delete("ws_1:m")  # delete removes the whole map
        assert await storage.map_items("ws_1:m") == {}

    async def test_logs_are_newest_first_and_capped(self, storage: Storage) -> None:
        assert await storage.log_range("ws_1:log", limit=10) == []
        for i in range(7):
            await storage.log_append("ws_1:log", b"%d" % i, max_len=5)
        assert await storage.log_range("ws_1:log", limit=10) == [b"6", b"5", b"4", b"3", b"2"]
        assert await storage.log_range("ws_1:log", limit=2) == [b"6", b"5"]
        assert await storage.delete("ws_1:log")
        assert await storage.log_range("ws_1:log", limit=10) == []

    async def test_log_extend_appends_in_order_in_one_step(self, storage: Storage) -> None:
        await storage.log_append("ws_1:log", b"0", max_len=5)
        await storage.log_extend("ws_1:log", [b"1", b"2", b"3"], max_len=5)
        await storage.log_extend("ws_1:log", [], max_len=5)  # nothing to add
        assert await storage.log_range("ws_1:log", limit=10) == [b"3", b"2", b"1", b"0"]
        await storage.log_extend("ws_1:log", [b"4", b"5", b"6"], max_len=5)
        assert await storage.log_range("ws_1:log", limit=10) == [b"6", b"5", b"4", b"3", b"2"]
        with pytest.raises(ValueError, match="max_len"):
            await storage.log_extend("ws_1:log", [b"7"], max_len=0)

    async def test_log_pages_go_on_from_their_last_position(self, storage: Storage) -> None:
        assert await storage.log_page("ws_1:log", limit=10) == []
        await storage.log_extend("ws_1:log", [b"%d" % i for i in range(1, 8)], max_len=5)
        first = await storage.log_page("ws_1:log", limit=2)
        assert [(e.seq, e.value) for e in first] == [(7, b"7"), (6, b"6")]
        second = await storage.log_page("ws_1:log", limit=2, before=first[-1].seq)
        assert [(e.seq, e.value) for e in second] == [(5, b"5"), (4, b"4")]
        # New entries do not shift a reader's place; the cap ends the log where it drops.
        await storage.log_extend("ws_1:log", [b"8", b"9"], max_len=5)
        again = await storage.log_page("ws_1:log", limit=10, before=first[-1].seq)
        assert [(e.seq, e.value) for e in again] == [(5, b"5")]
        assert await storage.log_page("ws_1:log", limit=10, before=1) == []
        newest = await storage.log_page("ws_1:log", limit=1)
        assert [(e.seq, e.value) for e in newest] == [(9, b"9")]
        assert await storage.log_page("ws_1:log", limit=10, before=100) == [
            LogEntry(seq, b"%d" % seq) for seq in (9, 8, 7, 6, 5)
        ]
        with pytest.raises(ValueError, match="before"):
            await storage.log_page("ws_1:log", limit=1, before=0)

    # The queue.

    async def test_enqueue_is_idempotent_by_id(self, storage: Storage) -> None:
        now = await storage.now()
        assert await storage.enqueue("q", "evt_1", b"first", due_at=now)
        assert not await storage.enqueue("q", "evt_1", b"second", due_at=now)
        [item] = await storage.claim("q", limit=10, lease=30)
        assert (item.item_id, item.payload, item.attempts, item.due_at) == (
            "evt_1",
            b"first",
            1,
            now,
        )
        assert not await storage.enqueue("q", "evt_1", b"third", due_at=now)  # leased is present

    async def test_claim_takes_due_items_earliest_first(self, storage: Storage) -> None:
        now = await storage.now()
        for item_id, due in [("late", now - 1), ("early", now - 5), ("future", now + 3600)]:
            await storage.enqueue("q", item_id, item_id.encode(), due_at=due)
        await storage.enqueue("q", "mid", b"mid", due_at=now - 3)
        first = await storage.claim("q", limit=2, lease=30)
        assert [i.item_id for i in first] == ["early", "mid"]
        assert [i.item_id for i in await storage.claim("q", limit=10, lease=30)] == ["late"]
        assert await storage.claim("q", limit=10, lease=30) == []  # leased, and not yet due

    async def test_queues_are_separate(self, storage: Storage) -> None:
        await storage.enqueue("a", "x", b"a", due_at=0)
        await storage.enqueue("b", "x", b"b", due_at=0)
        assert [i.payload for i in await storage.claim("b", limit=5, lease=30)] == [b"b"]
        assert [i.payload for i in await storage.claim("a", limit=5, lease=30)] == [b"a"]

    async def test_tokens_grow_with_every_claim(self, storage: Storage) -> None:
        tokens = []
        for round_ in range(3):
            await storage.enqueue("q", "i", b"p", due_at=0)
            await storage.enqueue("q", f"other{round_}", b"p", due_at=0)
            claimed = await storage.claim("q", limit=5, lease=30)
            tokens += [c.token for c in claimed]
            for c in claimed:
                assert await storage.ack("q", c.token)
        assert tokens == sorted(tokens)
        assert len(set(tokens)) == len(tokens) == 6

    async def test_ack_finishes_an_item_and_frees_its_id(self, storage: Storage) -> None:
        await storage.enqueue("q", "i", b"p", due_at=0)
        [item] = await storage.claim("q", limit=1, lease=30)
        assert await storage.ack("q", item.token)
        assert not await storage.ack("q", item.token)
        assert not await storage.ack("q", item.token + 1000)
        assert await storage.enqueue("q", "i", b"again", due_at=0)  # a new delivery
        [again] = await storage.claim("q", limit=1, lease=30)
        assert (again.payload, again.attempts) == (b"again", 1)

    async def test_a_lapsed_lease_is_claimed_again_and_fences_the_old_token(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        await storage.enqueue("q", "i", b"p", due_at=0)
        [first] = await storage.claim("q", limit=1, lease=0.3)
        assert await storage.claim("q", limit=1, lease=0.3) == []
        await self.pass_time(clock, 0.4)  # the worker died: its lease lapses
        [second] = await storage.claim("q", limit=1, lease=30)
        assert (second.item_id, second.attempts) == ("i", 2)
        assert second.token > first.token
        assert not await storage.ack("q", first.token)
        assert not await storage.retry("q", first.token, due_at=0)
        assert not await storage.dead("q", first.token)
        assert await storage.ack("q", second.token)

    async def test_a_lapsed_lease_still_acks_until_reclaimed(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        await storage.enqueue("q", "i", b"p", due_at=0)
        [item] = await storage.claim("q", limit=1, lease=0.2)
        await self.pass_time(clock, 0.3)
        assert await storage.ack("q", item.token)  # slow, but nobody else took it
        assert await storage.claim("q", limit=1, lease=30) == []

    async def test_retry_reschedules_with_a_new_payload(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        await storage.enqueue("q", "i", b"v1", due_at=0)
        [item] = await storage.claim("q", limit=1, lease=30)
        due = await storage.now() + 0.3
        assert await storage.retry("q", item.token, due_at=due, payload=b"v2")
        assert not await storage.ack("q", item.token)  # the retry ended that lease
        assert await storage.claim("q", limit=1, lease=30) == []
        await self.pass_time(clock, 0.4)
        [again] = await storage.claim("q", limit=1, lease=30)
        assert (again.payload, again.attempts, again.due_at) == (b"v2", 2, due)
        assert await storage.retry("q", again.token, due_at=0)
        [third] = await storage.claim("q", limit=1, lease=30)
        assert (third.payload, third.attempts) == (b"v2", 3)

    async def test_dead_letters_are_listed_requeued_and_discarded(self, storage: Storage) -> None:
        for item_id in ["a", "b", "c"]:
            await storage.enqueue("q", item_id, item_id.encode(), due_at=0)
        claimed = await storage.claim("q", limit=3, lease=30)
        for item, reason in zip(claimed, ["timeout", "http 500", "gone"], strict=True):
            assert await storage.dead("q", item.token, reason=reason)
            assert not await storage.ack("q", item.token)
        assert await storage.claim("q", limit=5, lease=30) == []
        dead = await storage.dead_items("q", limit=10)
        assert [(d.item_id, d.payload, d.attempts, d.reason) for d in dead] == [
            ("a", b"a", 1, "timeout"),
            ("b", b"b", 1, "http 500"),
            ("c", b"c", 1, "gone"),
        ]
        assert dead[0].failed_at == pytest.approx(await storage.now(), abs=5)
        assert [d.item_id for d in await storage.dead_items("q", limit=2)] == ["a", "b"]
        assert not await storage.enqueue("q", "a", b"new", due_at=0)  # a dead id is present
        assert await storage.requeue("q", "a", due_at=0)  # the replay: same id
        assert not await storage.requeue("q", "a", due_at=0)  # no longer dead
        assert not await storage.requeue("q", "missing", due_at=0)
        [replayed] = await storage.claim("q", limit=5, lease=30)
        assert (replayed.item_id, replayed.payload, replayed.attempts) == ("a", b"a", 1)
        assert await storage.discard("q", "b")
        assert not await storage.discard("q", "b")
        assert [d.item_id for d in await storage.dead_items("q", limit=10)] == ["c"]
        assert await storage.enqueue("q", "b", b"b2", due_at=0)

    async def test_a_requeue_may_replace_the_payload(self, storage: Storage) -> None:
        await storage.enqueue("q", "a", b"attempt 5", due_at=0)
        [item] = await storage.claim("q", limit=1, lease=30)
        assert await storage.dead("q", item.token, reason="failed")
        assert await storage.requeue("q", "a", due_at=0, payload=b"attempt 0 \x00\xff")
        [replayed] = await storage.claim("q", limit=1, lease=30)
        assert (replayed.item_id, replayed.payload) == ("a", b"attempt 0 \x00\xff")
        assert replayed.attempts == 1
        with pytest.raises(TypeError):
            await storage.requeue("q", "a", due_at=0, payload="text")  # type: ignore[arg-type]

    async def test_queue_size_counts_items_by_state(self, storage: Storage) -> None:
        assert await storage.queue_size("q") == QueueSize(0, 0, 0)
        now = await storage.now()
        for item_id in ("a", "b", "c"):
            await storage.enqueue("q", item_id, b"p", due_at=now)
        await storage.enqueue("q", "later", b"p", due_at=now + 3600)  # waiting, not due
        first, second = await storage.claim("q", limit=2, lease=30)
        assert await storage.queue_size("q") == QueueSize(2, 2, 0)
        assert await storage.dead("q", first.token, reason="gone")
        assert await storage.retry("q", second.token, due_at=now + 60)
        assert await storage.queue_size("q") == QueueSize(3, 0, 1)
        assert await storage.queue_size("other") == QueueSize(0, 0, 0)

    async def test_discard_ends_a_lease(self, storage: Storage) -> None:
        await storage.enqueue("q", "i", b"p", due_at=0)
        [item] = await storage.claim("q", limit=1, lease=30)
        assert await storage.discard("q", "i")
        assert not await storage.ack("q", item.token)
        assert await storage.claim("q", limit=1, lease=30) == []

    async def test_dropping_a_partition_deletes_its_keys_only(self, storage: Storage) -> None:
        for partition in ("ws_gone", "ws_kept", "ws_gone2"):
            await storage.set(f"{partition}:value", b"v")
            await storage.incr(f"{partition}:counter", 5, ttl=3600)
            await storage.map_set(f"{partition}:map", "field", b"f")
            await storage.log_append(f"{partition}:log", b"entry", max_len=10)
        await storage.set("ws_gone_not:value", b"a partition whose name extends it")
        await storage.enqueue("q", "ws_gone:item", b"queues are not partitioned", due_at=0)
        assert await storage.drop_partition("ws_gone") == 4
        assert await storage.get("ws_gone:value") is None
        assert await storage.get("ws_gone:counter") is None
        assert await storage.map_items("ws_gone:map") == {}
        assert await storage.log_range("ws_gone:log", limit=10) == []
        for partition in ("ws_kept", "ws_gone2"):
            assert await storage.get(f"{partition}:value") == b"v"
            assert await storage.get(f"{partition}:counter") == b"5"
            assert await storage.map_items(f"{partition}:map") == {"field": b"f"}
            assert await storage.log_range(f"{partition}:log", limit=10) == [b"entry"]
        assert await storage.get("ws_gone_not:value") is not None
        assert [c.item_id for c in await storage.claim("q", limit=5, lease=30)] == ["ws_gone:item"]
        assert await storage.drop_partition("ws_gone") == 0
        # The partition lives on: it is written to as to any other.
        assert (await storage.incr("ws_gone:counter", 1)).value == 1
        with pytest.raises(ValueError, match="cannot hold ':'"):
            await storage.drop_partition("no:colons")

    async def test_concurrent_claims_are_disjoint(self, storage: Storage) -> None:
        for i in range(40):
            await storage.enqueue("q", f"i{i:02}", b"p", due_at=0)

        async def worker(_: int) -> list[str]:
            mine: list[str] = []
            while batch := await storage.claim("q", limit=3, lease=30):
                mine += [c.item_id for c in batch]
            return mine

        claimed = [item for mine in await _gather(8, worker) for item in mine]
        assert sorted(claimed) == [f"i{i:02}" for i in range(40)]
