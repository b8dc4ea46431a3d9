"""The conformance suite against the three backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_kit.storage import MemoryStorage, SQLiteStorage, Storage
from gateway_kit.testing.storage import FakeClock, StorageConformance


class TestMemoryStorage(StorageConformance):
    @pytest.fixture
    async def storage(self, clock: FakeClock) -> AsyncIterator[Storage]:
        async with MemoryStorage(clock=clock) as storage:
            yield storage


class TestSQLiteStorage(StorageConformance):
    @pytest.fixture
    async def storage(self, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Storage]:
        async with SQLiteStorage(tmp_path / "state.db", clock=clock) as storage:
            yield storage


@pytest.mark.redis
class TestRedisStorage(StorageConformance):
    injectable_clock = False

    @pytest.fixture
    async def storage(self, redis_url: str, redis_prefix: str) -> AsyncIterator[Storage]:
        from gateway_kit.storage.redis import RedisStorage

        async with RedisStorage(redis_url, prefix=redis_prefix) as storage:
            yield storage
