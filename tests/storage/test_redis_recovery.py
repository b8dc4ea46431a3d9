"""RedisStorage when Redis goes away and comes back, or stalls: every call works again as soon
as a restarted server answers, a read is not failed by a connection that died unheard, and a
stalled server fails each call within ``socket_timeout``, however long it waited for a pooled
connection. On a throwaway ``redis-server`` of each test's own, restarted on the same port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection

from gateway_kit.exceptions import StorageError
from gateway_kit.storage._pipeline import AutoPipeline
from gateway_kit.storage.redis import RedisStorage

from .conftest import _free_port, _redis_server

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.anyio]

_TIMEOUT = 0.75  # socket_timeout of the stall tests; the other timeouts stay at their default
# How late a timeout may fire on a busy machine: a run in CI saw one fire 0.375 s late (the
# whole suite running, two cores). Below a second timeout (a call that waited out another's).
_LATE = 0.8 * _TIMEOUT


class _Server:
    """A throwaway ``redis-server`` that can be restarted on its port, or frozen (SIGSTOP)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._running = ExitStack()
        self._pid = 0

    def start(self) -> None:
        """Start it; back once it answers PING."""
        self.client: redis.Redis = self._running.enter_context(
            _redis_server(self.port, what="restarted")
        )
        self._pid = int(self.client.info("server")["process_id"])

    def stop(self) -> None:
        self._running.close()

    def restart(self) -> None:
        self.stop()
        self.start()  # the same port

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The process stopped: connections open, nothing answered (a stalled server)."""
        os.kill(self._pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self._pid, signal.SIGCONT)


@pytest.fixture
def server() -> Iterator[_Server]:
    running = _Server()
    running.start()
    try:
        yield running
    finally:
        running.stop()


class _Host:
    """A TCP hop to Redis whose restart the clients never hear of, as when Redis comes back on
    a new host or container behind the same address: ``restart`` forgets every connection
    without closing it, and a client that writes on a forgotten connection is reset, as a host
    resets a connection it does not know. New connections reach Redis as before."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._forgotten: list[asyncio.Event] = []
        self._upstream: list[asyncio.StreamWriter] = []
        self.port = 0

    async def __aenter__(self) -> _Host:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.restart()
        self._server.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def restart(self) -> None:
        for forgotten in self._forgotten:
            forgotten.set()
        for upstream in self._upstream:
            upstream.transport.abort()
        self._forgotten.clear()
        self._upstream.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self._target)
        forgotten = asyncio.Event()
        self._forgotten.append(forgotten)
        self._upstream.append(upstream_w)

        async def up() -> None:
            while data := await client_r.read(65536):
                if forgotten.is_set():
                    client_w.transport.abort()  # a reset: the host knows no such connection
                    return
                upstream_w.write(data)
            upstream_w.close()

        async def down() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await upstream_r.read(65536):
                    client_w.write(data)
            if not forgotten.is_set():
                client_w.close()

        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.gather(up(), down())


@pytest.fixture
async def host(server: _Server) -> AsyncIterator[_Host]:
    async with _Host(server.port) as hop:
        yield hop


def _reads(storage: RedisStorage, i: int) -> list[Callable[[], Awaitable[Any]]]:
    return [
        lambda: storage.get(f"ws_{i}:k"),
        lambda: storage.map_get(f"ws_{i}:m", "f"),
        lambda: storage.map_items(f"ws_{i}:m"),
        lambda: storage.log_range(f"ws_{i}:l", limit=5),
        storage.now,
    ]


def _every_call(storage: RedisStorage, i: int) -> list[Callable[[], Awaitable[Any]]]:
    """One of each kind: redis-py's reads and writes, and the channel's scripts."""
    return [
        *_reads(storage, i),
        lambda: storage.set(f"ws_{i}:k", b"v"),
        lambda: storage.delete(f"ws_{i}:gone"),
        lambda: storage.map_set(f"ws_{i}:m", "f", b"v"),
        lambda: storage.map_delete(f"ws_{i}:m", "gone"),
        lambda: storage.incr(f"ws_{i}:c", 1),
        lambda: storage.log_append(f"ws_{i}:l", b"v", max_len=5),
    ]


async def _failures(calls: list[Callable[[], Awaitable[Any]]]) -> list[str]:
    """Run ``calls`` together; the errors they met."""
    results = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, StorageError):
            raise result
    return [str(result) for result in results if isinstance(result, StorageError)]


async def test_every_call_succeeds_as_soon_as_a_restarted_server_answers(
    server: _Server,
) -> None:
    async with RedisStorage(server.url) as storage:
        width = 8  # calls of each kind at once: several pooled connections, and the channel
        calls = [call for i in range(width) for call in _every_call(storage, i)]
        assert await _failures(calls) == []
        # The server closes every connection, and is back on its port; the loop runs meanwhile,
        # as an application's does.
        await anyio.to_thread.run_sync(server.restart)
        assert await _failures(calls) == []
        assert await _failures(calls) == []


async def test_calls_fail_while_the_server_is_down_and_work_as_soon_as_it_is_back(
    server: _Server,
) -> None:
    async with RedisStorage(server.url) as storage:
        calls = [call for i in range(4) for call in _every_call(storage, i)]
        assert await _failures(calls) == []
        await anyio.to_thread.run_sync(server.stop)
        assert len(await _failures(calls)) == len(calls)  # refused: nothing to connect to
        await anyio.to_thread.run_sync(server.start)
        assert await _failures(calls) == []


async def test_a_read_on_a_connection_that_died_unheard_is_run_again(host: _Host) -> None:
    async with RedisStorage(host.url) as storage:
        reads = [call for i in range(4) for call in _reads(storage, i)]
        assert await _failures(reads) == []  # several pooled connections
        host.restart()
        # Each read is handed a dead connection, fails on it and runs again on a new one.
        assert await _failures(reads) == []


async def test_a_write_fails_at_most_once_per_connection_that_died_unheard(host: _Host) -> None:
    async with RedisStorage(host.url) as storage:
        width = 4
        writes = [lambda i=i: storage.set(f"ws_{i}:k", b"v") for i in range(width)]
        assert await _failures(writes) == []
        host.restart()
        # Not run again (its reply may be all that was lost), but its connection is replaced.
        assert len(await _failures(writes)) <= width
        assert await _failures(writes) == []


async def test_a_script_on_a_connection_that_died_unheard_fails_once_and_is_not_run_again(
    host: _Host,
) -> None:
    async with RedisStorage(host.url) as storage:
        assert (await storage.incr("ws_1:c", 1)).value == 1
        host.restart()
        # Its reply is what was lost, as far as the client can tell: it may have run.
        with pytest.raises(StorageError, match="ConnectionError"):
            await storage.incr("ws_1:c", 1)
        assert (await storage.incr("ws_1:c", 1)).value == 2  # the next call reconnects


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, str]:
    """How long ``call`` took to fail, and with what."""
    started = time.monotonic()
    try:
        await call()
    except StorageError as exc:
        return time.monotonic() - started, str(exc)
    pytest.fail("a call succeeded on a stalled server")


def _assert_timed_out(outcomes: list[tuple[float, str]]) -> None:
    slowest = max(outcomes)
    assert slowest[0] < _TIMEOUT + _LATE, slowest  # one socket_timeout, not two
    assert all(message.endswith("TimeoutError") for _, message in outcomes), outcomes


async def test_a_stalled_server_fails_each_call_within_socket_timeout(server: _Server) -> None:
    # Two pooled connections for four calls of each kind: two wait for a connection, which
    # frees when the calls holding it time out.
    async with RedisStorage(server.url, socket_timeout=_TIMEOUT, max_connections=2) as storage:
        width = 4
        calls = [call for i in range(width) for call in _every_call(storage, i)]
        assert await _failures(calls) == []
        with server.frozen():
            outcomes = await asyncio.gather(*(_timed(call) for call in calls))
        _assert_timed_out(outcomes)
        assert await _failures(calls) == []  # and it answers again once it runs


@pytest.mark.parametrize("password", [None, "s3cret"])
async def test_a_stalled_server_fails_a_call_that_must_connect_within_socket_timeout(
    server: _Server, password: str | None
) -> None:
    url = server.url
    if password is not None:  # AUTH and SELECT go first on each new connection
        server.client.config_set("requirepass", password)
        url = f"redis://:{password}@127.0.0.1:{server.port}/3"
    async with RedisStorage(url, socket_timeout=_TIMEOUT) as storage:
        with server.frozen():  # nothing connected yet: each call connects, then waits
            outcomes = [await _timed(call) for call in _every_call(storage, 1)]
        _assert_timed_out(outcomes)


class _OwnConnection(Connection):
    """A connection class of the user's: the channel leaves it alone, redis-py runs the
    scripts (auto-pipelined)."""


async def test_a_stalled_server_fails_scripts_through_redis_py_within_socket_timeout(
    server: _Server,
) -> None:
    pool = BlockingConnectionPool.from_url(
        server.url, connection_class=_OwnConnection, max_connections=1, socket_timeout=_TIMEOUT
    )
    async with Redis.from_pool(pool) as client, RedisStorage.from_client(client) as storage:
        assert isinstance(storage._scripts, AutoPipeline)
        assert (await storage.incr("ws_1:c", 1)).value == 1

        async def next_tick() -> tuple[float, str]:  # a batch of its own: it waits for the
            for _ in range(3):  # connection the first batch holds
                await anyio.lowlevel.checkpoint()
            return await _timed(lambda: storage.incr("ws_2:c", 1))

        with server.frozen():
            outcomes = await asyncio.gather(_timed(lambda: storage.incr("ws_1:c", 1)), next_tick())
        _assert_timed_out(list(outcomes))


async def test_a_request_through_the_gateway_waits_one_socket_timeout_on_a_stalled_server(
    server: _Server,
) -> None:
    """The whole request path on a stalled Redis: the admission step times out once (Limits
    then serves, `on_error = "open"`), and nothing else on the way (the router's view of the
    deployments' health is refreshed in the background) waits on the storage."""
    from gateway_kit import Gateway, GatewayConfig, create_app
    from gateway_kit.accounts.scopes import ROLES
    from gateway_kit.testing import ASGIRecorder

    config = GatewayConfig.model_validate({"routing": {"refresh_s": 0.05}})
    async with (
        RedisStorage(server.url, socket_timeout=_TIMEOUT) as storage,
        Gateway(config, storage=storage) as gateway,
    ):
        workspace = await gateway.workspaces.create("stall@example.com")
        key = (await gateway.keys.create(workspace.id, scopes=ROLES["admin"])).secret
        recorder = ASGIRecorder(create_app(gateway=gateway))
        body = {"model": "mock-large", "messages": [{"role": "user", "content": "hi"}]}

        async def chat() -> tuple[float, int]:
            """Until the answer's last byte was sent (the settlement comes after it)."""
            started = time.perf_counter()
            answer = await recorder.request(
                "POST",
                "/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {key}"},
            )
            return answer.messages[-1].at - started, answer.status

        assert (await chat())[1] == 200  # warm: the key and the plan are cached
        await anyio.sleep(0.1)  # the health view is older than refresh_s now
        with server.frozen():
            took, status = await chat()
        assert status == 200
        assert _TIMEOUT <= took < _TIMEOUT + _LATE, took
