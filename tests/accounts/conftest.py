from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway_kit import MemoryStorage
from gateway_kit.storage import SQLiteStorage
from gateway_kit.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_795_000_000.0)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def storages(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[tuple[Any, Any]]:
    """Two handles on one store, as two gateway processes would have: one shared
    ``MemoryStorage``, two connections to one SQLite file, two clients of one Redis."""
    if request.param == "memory":
        async with MemoryStorage(clock=clock) as shared:
            yield shared, shared
    elif request.param == "sqlite":
        path = tmp_path / "gateway-kit.db"
        async with SQLiteStorage(path, clock=clock) as a, SQLiteStorage(path, clock=clock) as b:
            yield a, b
    else:
        from gateway_kit.storage.redis import RedisStorage

        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        async with RedisStorage(url, prefix=prefix) as a, RedisStorage(url, prefix=prefix) as b:
            yield a, b
