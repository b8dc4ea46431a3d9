"""RedisStorage's auto-pipelining: concurrent calls share round trips, never results or errors."""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from gateway_kit.bench.storage import count_round_trips
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Increment, Throttle
from gateway_kit.storage.redis import RedisStorage

pytestmark = [pytest.mark.redis, pytest.mark.anyio]


async def test_concurrent_calls_share_round_trips_and_each_gets_its_own_answer(
    redis_url: str, redis_prefix: str
) -> None:
    async with count_round_trips(redis_url, prefix=redis_prefix) as (storage, sent):
        await storage.incr("ws_1:warm", 1)  # connects, loads the scripts
        before = sent()
        results: dict[int, int] = {}

        async def admit(index: int) -> None:
            result = await storage.incr_many(
                [Increment(f"ws_{index}:requests", index + 1, limit=1000)],
                throttle=Throttle(f"ws_{index}:burst", limit=60, period=60),
            )
            results[index] = result.values[f"ws_{index}:requests"]

        async with anyio.create_task_group() as tasks:
            for index in range(64):
                tasks.start_soon(admit, index)
        assert results == {index: index + 1 for index in range(64)}
        assert sent() - before < 64  # batched: fewer writes than calls
    # and every one of them really ran once
    async with Redis.from_url(redis_url) as client:
        for index in (0, 31, 63):
            assert (
                await client.get(f"{redis_prefix}{{ws_{index}}}:requests")
                == str(index + 1).encode()
            )


async def test_an_error_fails_only_its_own_call_in_a_batch(
    redis_url: str, redis_prefix: str
) -> None:
    async with RedisStorage(redis_url, prefix=redis_prefix) as storage:
        await storage.map_set("ws_1:a-map", "field", b"v")  # not a counter
        outcomes: dict[str, object] = {}

        async def incr(key: str) -> None:
            try:
                outcomes[key] = (await storage.incr(key, 1)).value
            except StorageError as exc:
                outcomes[key] = exc

        async with anyio.create_task_group() as tasks:
            for key in ("ws_1:x", "ws_1:a-map", "ws_1:y"):
                tasks.start_soon(incr, key)
        assert outcomes["ws_1:x"] == 1
        assert outcomes["ws_1:y"] == 1
        assert isinstance(outcomes["ws_1:a-map"], StorageError)
        assert "different kind of value" in str(outcomes["ws_1:a-map"])


async def test_a_batch_after_a_script_flush_reloads_its_scripts(cluster_url: str) -> None:
    # On the throwaway server: SCRIPT FLUSH on the shared one would disturb other tests.
    async with RedisStorage(cluster_url, prefix="flush-batch:") as storage:
        await storage.incr("ws_1:c", 1)
        async with Redis.from_url(cluster_url) as client:
            await client.script_flush()
        async with anyio.create_task_group() as tasks:
            for _ in range(10):
                tasks.start_soon(storage.incr, "ws_1:c", 1)
        assert await storage.get("ws_1:c") == b"11"


async def test_a_lost_connection_fails_the_batch_with_storage_errors() -> None:
    async with RedisStorage("redis://127.0.0.1:1/0", connect_timeout=0.5) as storage:
        outcomes: list[BaseException] = []

        async def incr() -> None:
            try:
                await storage.incr("ws_1:c", 1)
            except StorageError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tasks:
            for _ in range(5):
                tasks.start_soon(incr)
        assert len(outcomes) == 5
