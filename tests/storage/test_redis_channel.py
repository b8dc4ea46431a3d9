"""RedisStorage's script channel: one multiplexed connection, replies matched in order, every
way of connecting redis-py offers, failures that fail only what they must, and the redis-py
path for clients the channel cannot connect like."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Storage
from gateway_kit.storage._redis_channel import ScriptChannel
from gateway_kit.storage.redis import RedisStorage
from gateway_kit.testing.storage import StorageConformance

from .conftest import PrivateRedis

pytestmark = [pytest.mark.redis, pytest.mark.anyio]


class _Proxy:
    """A TCP hop in front of Redis that can hold the replies back and cut every connection."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._released = asyncio.Event()
        self._released.set()
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0

    async def __aenter__(self) -> _Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_r, upstream_w = await asyncio.open_connection(*self._target)
        self._writers += [client_w, upstream_w]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, held: bool) -> None:
            while data := await src.read(65536):
                if held:
                    await self._released.wait()
                dst.write(data)
                await dst.drain()
            dst.close()

        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.gather(
                pump(client_r, upstream_w, False), pump(upstream_r, client_w, True)
            )

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def cut(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[_Proxy]:
    target = urlsplit(redis_url)
    async with _Proxy(target.hostname or "127.0.0.1", target.port or 6379) as hop:
        yield hop


def _through(proxy: _Proxy, redis_url: str) -> str:
    return f"redis://127.0.0.1:{proxy.port}{urlsplit(redis_url).path}"


async def _until_stored(redis_url: str, name: str) -> None:
    """Wait (bounded) until Redis holds ``name``: the command was delivered and ran."""
    async with Redis.from_url(redis_url) as client:
        with anyio.fail_after(5):
            while not await client.exists(name):  # noqa: ASYNC110 (state in Redis, no event)
                await anyio.sleep(0.005)


async def test_the_storage_uses_the_channel_for_plain_urls(redis_url: str) -> None:
    async with RedisStorage(redis_url) as storage:
        assert isinstance(storage._scripts, ScriptChannel)


async def test_a_cut_connection_fails_the_calls_on_it_and_the_next_call_reconnects(
    proxy: _Proxy, redis_url: str, redis_prefix: str
) -> None:
    async with RedisStorage(_through(proxy, redis_url), prefix=redis_prefix) as storage:
        await storage.incr("ws_0:warm", 1)  # connected
        proxy.hold()
        errors: list[StorageError] = []

        async def incr(index: int) -> None:
            try:
                await storage.incr(f"ws_{index}:c", 1)
            except StorageError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tasks:
            for index in (1, 2, 3):
                tasks.start_soon(incr, index)
            await _until_stored(redis_url, f"{redis_prefix}{{ws_3}}:c")  # all three ran
            proxy.cut()
        assert len(errors) == 3
        assert all("ConnectionError" in str(error) for error in errors)
        # One error instance each: a shared one would gather every caller's traceback.
        assert len({id(error.__cause__) for error in errors}) == 3
        proxy.release()
        # The lost calls ran once (nothing is retried); the next call reconnects.
        for index in (1, 2, 3):
            assert (await storage.incr(f"ws_{index}:c", 1)).value == 2


async def test_a_reply_that_does_not_come_times_out_and_the_connection_is_replaced(
    proxy: _Proxy, redis_url: str, redis_prefix: str
) -> None:
    url = _through(proxy, redis_url)
    async with RedisStorage(url, prefix=redis_prefix, socket_timeout=0.3) as storage:
        await storage.incr("ws_1:c", 1)
        proxy.hold()
        with pytest.raises(StorageError, match="Timeout"):
            await storage.incr("ws_1:c", 1)
        proxy.release()
        assert (await storage.incr("ws_1:c", 1)).value == 3  # the timed-out call had run


async def test_cancelled_callers_never_shift_the_replies_of_the_others(
    proxy: _Proxy, redis_url: str, redis_prefix: str
) -> None:
    async with RedisStorage(_through(proxy, redis_url), prefix=redis_prefix) as storage:
        await storage.incr("ws_0:warm", 1)
        proxy.hold()
        got: dict[int, int] = {}

        async def incr(index: int) -> None:
            got[index] = (await storage.incr(f"ws_{index}:c", 10 + index)).value

        scopes = {index: anyio.CancelScope() for index in range(8)}

        async def run(index: int) -> None:
            with scopes[index]:
                await incr(index)

        async with anyio.create_task_group() as tasks:
            for index in range(8):
                tasks.start_soon(run, index)
            await _until_stored(redis_url, f"{redis_prefix}{{ws_7}}:c")
            for index in (0, 3, 4, 6):
                scopes[index].cancel()
            await anyio.lowlevel.checkpoint()
            proxy.release()
        assert got == {index: 10 + index for index in (1, 2, 5, 7)}
        for index in range(8):  # later calls line up too; the cancelled ones had run
            assert (await storage.incr(f"ws_{index}:c", 1)).value == 11 + index


async def test_closing_while_connecting_leaves_no_connection_open(
    redis_url: str, redis_prefix: str
) -> None:
    name = f"gk-closing-{uuid.uuid4().hex[:8]}"
    storage = RedisStorage(f"{redis_url}?client_name={name}", prefix=redis_prefix)

    async def incr() -> None:
        with contextlib.suppress(StorageError):
            await storage.incr("ws_1:c", 1)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(incr)
        await anyio.lowlevel.checkpoint()  # the connection is being opened
        await storage.aclose()
    async with Redis.from_url(redis_url) as client:
        with anyio.fail_after(5):  # the server sees the close a moment later
            while any(c["name"] == name for c in await client.client_list()):  # noqa: ASYNC110
                await anyio.sleep(0.01)


@pytest.mark.parametrize("way", ["tls_url", "unix_url", "user_url"])
async def test_scripts_run_over_tls_a_unix_socket_and_as_a_user(
    private_redis: PrivateRedis, way: str
) -> None:
    url = getattr(private_redis, way)
    async with RedisStorage(url, prefix=f"t{uuid.uuid4().hex[:8]}:") as storage:
        assert isinstance(storage._scripts, ScriptChannel)
        assert (await storage.incr("ws_1:c", 2)).value == 2
        assert (await storage.incr("ws_1:c", 2)).value == 4
        assert await storage.get("ws_1:c") == b"4"  # same database as redis-py's connections


async def test_an_unverified_tls_certificate_is_refused(private_redis: PrivateRedis) -> None:
    url = private_redis.tls_url.split("?")[0]  # without the CA that signed the server's cert
    async with RedisStorage(url) as storage:
        with pytest.raises(StorageError, match="ConnectionError"):
            await storage.incr("ws_1:c", 1)


async def test_a_wrong_password_is_refused_without_being_shown(
    private_redis: PrivateRedis,
) -> None:
    url = private_redis.user_url.replace("s3cret-pw", "not-the-pw")
    async with RedisStorage(url) as storage:
        with pytest.raises(StorageError) as caught:
            await storage.incr("ws_1:c", 1)
    assert "not-the-pw" not in str(caught.value)
    assert "not-the-pw" not in str(caught.value.__cause__)


# -- clients the channel cannot connect like: redis-py runs the scripts ----------------------


class _OwnConnection(Connection):
    """A connection class of the user's (as Sentinel's is): it must stay in use."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        await super().send_packed_command(command, check_health)


class TestRedisStorageThroughRedisPy(StorageConformance):
    injectable_clock = False

    @pytest.fixture
    async def storage(self, redis_url: str, redis_prefix: str) -> AsyncIterator[Storage]:
        pool = BlockingConnectionPool.from_url(redis_url, connection_class=_OwnConnection)
        async with (
            Redis.from_pool(pool) as client,
            RedisStorage.from_client(client, prefix=redis_prefix) as storage,
        ):
            yield storage


async def test_a_client_with_its_own_connection_class_keeps_it_for_scripts(
    redis_url: str, redis_prefix: str
) -> None:
    pool = BlockingConnectionPool.from_url(redis_url, connection_class=_OwnConnection)
    async with (
        Redis.from_pool(pool) as client,
        RedisStorage.from_client(client, prefix=redis_prefix) as storage,
    ):
        before = _OwnConnection.sent
        assert (await storage.incr("ws_1:c", 1)).value == 1
        assert _OwnConnection.sent > before
        assert not isinstance(storage._scripts, ScriptChannel)
