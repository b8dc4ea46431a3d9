"""``storage.lock.held``: one holder at a time, a dead holder's lock lapses, a lock is given
back only by its holder."""

from __future__ import annotations

import anyio
import pytest

from gateway_kit import MemoryStorage, StorageError
from gateway_kit.storage.lock import held
from gateway_kit.testing import FakeClock

pytestmark = pytest.mark.anyio

LOCK = "ws_1:lock:thing"


async def test_holders_go_one_at_a_time() -> None:
    inside, most = 0, 0

    async def change(storage: MemoryStorage) -> None:
        nonlocal inside, most
        async with held(storage, LOCK):
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)  # other tasks run meanwhile
            inside -= 1

    async with MemoryStorage() as storage, anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(change, storage)
    assert most == 1
    assert await storage.get(LOCK) is None  # given back


async def test_a_lock_held_too_long_is_a_storage_error_and_a_dead_holders_lapses() -> None:
    clock = FakeClock()
    async with MemoryStorage(clock=clock) as storage:
        await storage.set(LOCK, b"a holder that died", ttl=10)
        with pytest.raises(StorageError, match="held by another change"):
            async with held(storage, LOCK, wait=0.05):
                pass
        clock.advance(11)
        async with held(storage, LOCK, wait=0.05):
            assert await storage.get(LOCK) not in (None, b"a holder that died")


async def test_only_its_holder_gives_a_lock_back() -> None:
    clock = FakeClock()
    async with MemoryStorage(clock=clock) as storage:
        async with held(storage, LOCK, ttl=1):
            clock.advance(2)  # lapsed: another takes it
            assert await storage.set(LOCK, b"the next holder", if_absent=True)
        assert await storage.get(LOCK) == b"the next holder"
