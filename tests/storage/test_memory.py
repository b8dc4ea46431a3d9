"""MemoryStorage beyond the conformance suite: its bound and its thread safety."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import anyio
import pytest

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Increment, MemoryStorage
from gateway_kit.testing.storage import FakeClock

pytestmark = pytest.mark.anyio


async def test_a_full_store_refuses_new_keys_and_keeps_live_ones() -> None:
    storage = MemoryStorage(max_keys=3)
    for i in range(3):
        await storage.incr(f"ws_1:c{i}", 1)
    with pytest.raises(StorageError, match="full"):
        await storage.incr("ws_1:new", 1)
    with pytest.raises(StorageError, match="full"):
        await storage.enqueue("q", "i", b"p", due_at=0)  # queue items count too
    assert (await storage.incr("ws_1:c0", 1)).value == 2  # existing keys still change
    assert [await storage.get(f"ws_1:c{i}") for i in range(3)] == [b"2", b"1", b"1"]
    assert await storage.delete("ws_1:c2")
    assert (await storage.incr("ws_1:new", 1)).allowed


async def test_expired_keys_make_room_first() -> None:
    clock = FakeClock()
    storage = MemoryStorage(max_keys=3, clock=clock)
    await storage.set("ws_1:short", b"v", ttl=10)
    await storage.set("ws_1:lasting", b"v")
    await storage.incr("ws_1:quota", 1, ttl=100)
    with pytest.raises(StorageError):
        await storage.set("ws_1:new", b"v")
    clock.advance(10)
    assert await storage.set("ws_1:new", b"v")  # took the expired key's place
    assert await storage.get("ws_1:quota") == b"1"
    assert await storage.get("ws_1:lasting") == b"v"


async def test_evictable_counters_make_room_oldest_first_and_never_live_ones() -> None:
    storage = MemoryStorage(max_keys=4)
    await storage.incr("ws_1:quota", 1)
    for i in range(3):  # Guardian's windows, say
        await storage.incr_many([Increment(f"ws_1:w{i}", 1, ttl=600, evictable=True)])
    await storage.incr_many([Increment("ws_1:w0", 1, ttl=600, evictable=True)])  # w0 again
    # A new key of any kind takes the oldest evictable counter's place...
    assert (await storage.incr("ws_1:spend", 5)).allowed
    assert await storage.get("ws_1:w0") is None
    assert [await storage.get(f"ws_1:w{i}") for i in (1, 2)] == [b"1", b"1"]
    await storage.incr_many([Increment("ws_1:w3", 1, ttl=600, evictable=True)])
    assert await storage.get("ws_1:w1") is None
    # ...and once only live counters are left, the store refuses rather than drop one.
    assert await storage.set("ws_1:v", b"x")  # takes w2's place
    assert (await storage.incr("ws_1:u", 1)).allowed  # and w3's
    with pytest.raises(StorageError, match="full"):
        await storage.incr("ws_1:new", 1)
    assert await storage.get("ws_1:quota") == b"1"
    assert await storage.get("ws_1:spend") == b"5"


async def test_a_key_set_over_an_evictable_counter_is_no_longer_evictable() -> None:
    storage = MemoryStorage(max_keys=2)
    await storage.incr_many([Increment("ws_1:w", 1, evictable=True)])
    assert await storage.set("ws_1:w", b"kept")
    await storage.incr("ws_1:a", 1)
    with pytest.raises(StorageError, match="full"):
        await storage.incr("ws_1:b", 1)
    assert await storage.get("ws_1:w") == b"kept"


async def test_rewriting_a_key_keeps_its_new_expiry() -> None:
    clock = FakeClock()
    storage = MemoryStorage(clock=clock)
    await storage.set("ws_1:k", b"old", ttl=1)
    await storage.set("ws_1:k", b"new", ttl=100)
    clock.advance(2)
    await storage.set("ws_1:other", b"v")  # purges what expired by now
    assert await storage.get("ws_1:k") == b"new"


async def test_a_finished_queue_item_frees_its_room() -> None:
    storage = MemoryStorage(max_keys=1)
    await storage.enqueue("q", "a", b"p", due_at=0)
    [item] = await storage.claim("q", limit=1, lease=30)
    assert await storage.ack("q", item.token)
    assert await storage.enqueue("q", "b", b"p", due_at=0)


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    # Switch threads as often as possible, so that a missing lock would show.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_threads_with_their_own_event_loops_share_it_safely() -> None:
    storage = MemoryStorage()
    admitted: list[int] = []

    async def work() -> None:
        ok = 0
        for _ in range(1500):
            await storage.incr("ws_1:total", 1)
            ok += (await storage.incr("ws_1:limited", 1, limit=1000)).allowed
        admitted.append(ok)

    threads = [threading.Thread(target=anyio.run, args=(work,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert anyio.run(storage.get, "ws_1:total") == b"6000"
    assert sum(admitted) == 1000
