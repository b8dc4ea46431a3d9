"""RedisStorage beyond the conformance suite: Cluster slots, round trips, pool, errors."""

from __future__ import annotations

import logging
import socket
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection

from gateway_kit.bench.storage import count_round_trips
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Increment, Storage, Throttle
from gateway_kit.storage._pipeline import AutoPipeline
from gateway_kit.storage.redis import RedisStorage
from gateway_kit.testing.storage import StorageConformance

pytestmark = [pytest.mark.redis, pytest.mark.anyio]


class TestRedisStorageOnAClusterNode(StorageConformance):
    """Every operation, on a server that enforces one slot per script."""

    injectable_clock = False

    @pytest.fixture
    async def storage(self, cluster_url: str) -> AsyncIterator[Storage]:
        async with RedisStorage(cluster_url, prefix=f"t{uuid.uuid4().hex[:8]}:") as storage:
            yield storage


async def test_the_cluster_node_refuses_scripts_across_slots(cluster_url: str) -> None:
    # Without this the test class above would prove nothing.
    async with Redis.from_url(cluster_url) as client:
        with pytest.raises(redis.ResponseError, match="same slot"):  # CROSSSLOT
            await client.eval("return 1", 2, "{ws_1}:a", "{ws_2}:a")


async def test_keys_are_hash_tagged_by_partition(redis_url: str, redis_prefix: str) -> None:
    async with RedisStorage(redis_url, prefix=redis_prefix) as storage:
        await storage.incr_many(
            [Increment("ws_1:quota:2026-11", 1), Increment("ws_1:spend", 5)],
            throttle=Throttle("ws_1:burst", limit=5, period=60),
        )
        await storage.map_set("ws_2:webhooks", "wh_1", b"{}")
        await storage.enqueue("deliveries", "evt_1", b"p", due_at=0)
        [item] = await storage.claim("deliveries", limit=1, lease=30)
        await storage.dead("deliveries", item.token)
    async with Redis.from_url(redis_url) as client:
        keys = {k.decode() async for k in client.scan_iter(match=f"{redis_prefix}*")}
    p = redis_prefix
    assert {f"{p}{{ws_1}}:quota:2026-11", f"{p}{{ws_1}}:spend", f"{p}{{ws_1}}:burst"} <= keys
    assert f"{p}{{ws_2}}:webhooks" in keys
    assert {k for k in keys if "deliveries" in k} <= {
        f"{p}q{{deliveries}}:{part}" for part in ["payload", "meta", "ready", "dead", "seq"]
    }


async def test_an_admission_is_one_round_trip(redis_url: str, redis_prefix: str) -> None:
    async with count_round_trips(redis_url, prefix=redis_prefix) as (storage, sent):
        admission = [Increment("ws_1:requests", 1, limit=100), Increment("ws_1:spend", 1500)]
        burst = Throttle("ws_1:burst", limit=60, period=60)
        await storage.incr_many(admission, throttle=burst)  # connects, loads the script
        before = sent()
        for _ in range(10):
            assert (await storage.incr_many(admission, throttle=burst)).allowed
        assert sent() - before == 10


async def test_a_step_with_reads_is_still_one_round_trip(redis_url: str, redis_prefix: str) -> None:
    async with count_round_trips(redis_url, prefix=redis_prefix) as (storage, sent):
        await storage.set("ws_1:cache:abc", b"cached answer")
        admission = [Increment("ws_1:requests", 1, limit=100), Increment("ws_1:spend", 1500)]
        burst = Throttle("ws_1:burst", limit=60, period=60)
        reads = ["ws_1:cache:abc", "ws_1:spend", "ws_1:window", "ws_1:requests"]
        await storage.incr_many(admission, throttle=burst, reads=reads)  # connects, loads
        before = sent()
        for i in range(2, 12):
            result = await storage.incr_many(admission, throttle=burst, reads=reads)
            assert result.allowed
            assert result.reads == {
                "ws_1:cache:abc": b"cached answer",
                "ws_1:spend": b"%d" % (1500 * (i - 1)),
                "ws_1:window": None,
                "ws_1:requests": b"%d" % (i - 1),
            }
        assert sent() - before == 10


class _CountingConnection(Connection):
    """A connection class of the user's: the scripts go through redis-py, counted here."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        await super().send_packed_command(command, check_health)


async def test_a_step_with_reads_is_one_command_through_redis_py(
    redis_url: str, redis_prefix: str
) -> None:
    pool = BlockingConnectionPool.from_url(redis_url, connection_class=_CountingConnection)
    async with (
        Redis.from_pool(pool) as client,
        RedisStorage.from_client(client, prefix=redis_prefix) as storage,
    ):
        assert isinstance(storage._scripts, AutoPipeline)
        admission = [Increment("ws_1:requests", 1, limit=100)]
        burst = Throttle("ws_1:burst", limit=60, period=60)
        reads = ["ws_1:cache:abc", "ws_1:requests"]
        await storage.incr_many(admission, throttle=burst, reads=reads)  # connects, loads
        before = _CountingConnection.sent
        for _ in range(10):
            result = await storage.incr_many(admission, throttle=burst, reads=reads)
            assert result.allowed
            assert result.reads["ws_1:cache:abc"] is None
        assert _CountingConnection.sent - before == 10


async def test_a_flushed_script_cache_is_reloaded(cluster_url: str) -> None:
    # On the throwaway server: SCRIPT FLUSH on the shared one would disturb other tests.
    async with RedisStorage(cluster_url, prefix="flush:") as storage:
        assert (await storage.incr("ws_1:c", 1)).value == 1
        async with Redis.from_url(cluster_url) as client:
            await client.script_flush()
        assert (await storage.incr("ws_1:c", 1)).value == 2


async def test_the_pool_is_bounded(redis_url: str, redis_prefix: str) -> None:
    name = f"gktest-pool-{uuid.uuid4().hex[:8]}"
    url = f"{redis_url}?client_name={name}"
    async with RedisStorage(url, prefix=redis_prefix, max_connections=2) as storage:
        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(storage.incr, "ws_1:c", 1)
        assert await storage.get("ws_1:c") == b"100"
        async with Redis.from_url(redis_url) as client:
            ours = [c for c in await client.client_list() if c["name"] == name]
        assert 1 <= len(ours) <= 2


def _leaks(exc: BaseException | None, secret: str) -> bool:
    """Whether the chain of errors, as a traceback shows it, carries ``secret``."""
    while exc is not None:
        if secret in "".join(traceback.format_exception_only(exc)):
            return True
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return False


async def test_connection_errors_never_show_the_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    storage = RedisStorage("redis://:secretpw@127.0.0.1:1/0", connect_timeout=1)
    assert "secretpw" not in repr(storage)
    with pytest.raises(StorageError, match="Redis incr_many failed") as caught:
        await storage.incr("ws_1:c", 1)
    assert not _leaks(caught.value, "secretpw")
    await storage.aclose()
    assert "secretpw" not in caplog.text


async def test_a_refused_password_is_not_shown(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = redis_url.replace("redis://", "redis://nobody:secretpw@", 1)
    async with RedisStorage(url) as storage:
        with pytest.raises(StorageError) as caught:
            await storage.get("ws_1:k")
    assert not _leaks(caught.value, "secretpw")
    assert "secretpw" not in caplog.text


def test_a_malformed_url_is_not_repeated() -> None:
    with pytest.raises(ValueError, match="invalid Redis URL") as caught:
        RedisStorage("redis://:secretpw@127.0.0.1:notaport/0")
    assert not _leaks(caught.value, "secretpw")


async def test_a_silent_server_times_out_without_a_retry() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        storage = RedisStorage(f"redis://127.0.0.1:{port}/0", socket_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(StorageError, match="Timeout"):
            await storage.incr("ws_1:c", 1)
        assert time.monotonic() - started < 2  # one timeout, no retries with backoff
        await storage.aclose()


def test_a_brace_in_the_prefix_is_rejected(redis_url: str) -> None:
    with pytest.raises(ValueError, match="brace"):
        RedisStorage(redis_url, prefix="gk{x}:")


async def test_from_client_leaves_the_client_open(redis_url: str, redis_prefix: str) -> None:
    async with Redis.from_url(redis_url) as client:
        async with RedisStorage.from_client(client, prefix=redis_prefix) as storage:
            await storage.set("ws_1:k", b"v")
        assert await client.get(f"{redis_prefix}{{ws_1}}:k") == b"v"
