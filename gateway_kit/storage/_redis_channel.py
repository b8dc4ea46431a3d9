"""One multiplexed Redis connection for ``RedisStorage``'s scripts.

Every script call is written to one connection as it comes, and the replies are matched to
their callers in order (Redis answers the commands of a connection in the order they arrive).
The calls of one event-loop tick go out together in one write at the next loop iteration, so
under load they share a round trip. Compared with redis-py's pool (a connection checked out and
back per command, a timeout task per write, the command machinery), a sequential call takes
about two thirds of the time (about 130 against 190 us here), most of what a request pays for
each storage round trip.

redis-py still parses the URL and owns the connection settings: the channel opens its own
socket from a connection redis-py configured (host and port or Unix socket, TLS context, user,
password, database, client name, timeouts). Connections it cannot open the same way (a custom
connection class such as Sentinel's, a credential provider) are not channelled:
``ScriptChannel.open_like`` answers ``None`` and ``RedisStorage`` keeps redis-py's path.

Failures: nothing is retried, since a script whose reply was lost may have run. A reply that
does not come within ``socket_timeout`` fails its call and drops the connection (a silent peer
would stall every later call too); a dropped connection fails every call waiting on it, and
the next call opens a new one. A connection the server closed (a restart) is forgotten as soon
as the loop reads its end, before any call is written to it; one that died unheard (no end to
read: Redis back on a new host behind the same address) fails the calls written to it, once.
``NOSCRIPT`` (the server lost its script cache) means the script did not run: it is loaded and
sent again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

import hiredis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["ScriptChannel"]

_NOT_YET = object()  # hiredis: no whole reply buffered yet


def _pack(*parts: Any) -> bytes:
    # hiredis's stub types the argument as a 1-tuple; any tuple of str, bytes and numbers works.
    packed: bytes = hiredis.pack_command(cast(Any, parts))
    return packed


@dataclass(frozen=True, slots=True)
class _Endpoint:
    address: str | tuple[str, int]  # a Unix socket's path, or (host, port)
    tls: ssl.SSLContext | None
    username: str | None
    password: str | None
    db: int
    client_name: str | None
    connect_timeout: float | None
    socket_timeout: float | None

    def handshake(self) -> list[tuple[Any, ...]]:
        commands: list[tuple[Any, ...]] = []
        if self.password is not None:
            user = () if self.username is None else (self.username,)
            commands.append(("AUTH", *user, self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        if self.client_name:
            commands.append(("CLIENT", "SETNAME", self.client_name))
        return commands


def _endpoint(conn: Connection) -> _Endpoint | None:
    if type(conn) not in (Connection, SSLConnection, UnixDomainSocketConnection):
        return None  # a subclass may connect differently (Sentinel, a proxy, a test double)
    if conn.credential_provider is not None:
        return None
    address: str | tuple[str, int]
    if isinstance(conn, UnixDomainSocketConnection):
        address = conn.path
    else:
        address = (conn.host, int(conn.port))
    return _Endpoint(
        address=address,
        tls=conn.ssl_context.get() if isinstance(conn, SSLConnection) else None,
        username=conn.username,
        password=conn.password,
        db=int(conn.db),
        client_name=conn.client_name,
        connect_timeout=conn.socket_connect_timeout,
        socket_timeout=conn.socket_timeout,
    )


class _Link(asyncio.Protocol):
    """One open connection: writes batched per tick, replies handed out in order."""

    def __init__(self, channel: ScriptChannel, timeout: float | None) -> None:
        self._channel = channel
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        self._reader = hiredis.Reader(notEnoughData=_NOT_YET, replyError=ResponseError)
        self._transport: asyncio.Transport | None = None
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._outbox: list[bytes] = []
        self._flushing = False
        self._watchdog: asyncio.TimerHandle | None = None
        self.lost: Exception | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, command: bytes) -> asyncio.Future[Any]:
        if self.lost is not None:
            raise RedisConnectionError("Connection to the Redis server lost")
        future = self._loop.create_future()
        deadline = 0.0 if self._timeout is None else self._loop.time() + self._timeout
        self._waiting.append((future, deadline))
        self._outbox.append(command)
        if not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)
        if self._watchdog is None and self._timeout is not None:
            self._watchdog = self._loop.call_at(deadline, self._check)
        return future

    def _flush(self) -> None:
        self._flushing = False
        if self._transport is None or self.lost is not None:
            return
        outbox, self._outbox = self._outbox, []
        self._transport.writelines(outbox)
        self._channel.round_trips += 1

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            while (reply := self._reader.gets()) is not _NOT_YET:
                if not self._waiting:
                    raise hiredis.ProtocolError("a reply nobody asked for")
                future, _ = self._waiting.popleft()
                if not future.done():  # its caller may have been cancelled
                    future.set_result(reply)
        except hiredis.ProtocolError:
            self._drop(RedisConnectionError("Protocol error: the connection is out of step"))

    def _check(self) -> None:
        self._watchdog = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        if deadline <= self._loop.time():
            self._drop(RedisTimeoutError("Timeout reading from the Redis server"))
        else:
            self._watchdog = self._loop.call_at(deadline, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError("Connection closed by the Redis server"))

    def _drop(self, exc: Exception) -> None:
        self._fail(exc)
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, exc: Exception) -> None:
        if self.lost is not None:
            return
        self.lost = exc
        self._channel.forget(self)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                # One instance each: a shared one would gather every caller's traceback.
                future.set_exception(type(exc)(*exc.args))

    async def close(self) -> None:
        """Let the replies under way arrive, then close."""
        pending = [future for future, _ in self._waiting]
        if pending:
            await asyncio.wait(pending)
        if self._transport is not None:
            self._transport.close()


class ScriptChannel:
    """Runs registered Lua scripts (``name -> (sha, source)``) over one shared connection."""

    def __init__(
        self,
        endpoint: _Endpoint,
        scripts: dict[str, tuple[str, str]],
        errors: Callable[[str], AbstractContextManager[None]],
    ) -> None:
        self._endpoint = endpoint
        self._scripts = scripts
        self._errors = errors
        self._link: _Link | None = None
        self._opening: asyncio.Future[_Link] | None = None
        #: Writes made so far; each carries one tick's calls and costs one round trip.
        self.round_trips = 0

    @classmethod
    def open_like(
        cls,
        conn: Connection,
        scripts: dict[str, tuple[str, str]],
        errors: Callable[[str], AbstractContextManager[None]],
    ) -> ScriptChannel | None:
        """A channel connecting as ``conn`` would, or ``None`` if it cannot (module docstring)."""
        endpoint = _endpoint(conn)
        return None if endpoint is None else cls(endpoint, scripts, errors)

    async def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        sha, source = self._scripts[name]
        evalsha = _pack("EVALSHA", sha, len(keys), *keys, *args)
        with self._errors(name):
            reply = await self._request(evalsha)
            if isinstance(reply, ResponseError) and str(reply).startswith("NOSCRIPT"):
                loaded = await self._request(_pack("SCRIPT", "LOAD", source))
                if isinstance(loaded, ResponseError):
                    raise loaded
                reply = await self._request(evalsha)
            if isinstance(reply, ResponseError):
                raise reply
            return reply

    async def _request(self, command: bytes) -> Any:
        link = self._link
        if link is None or link.loop is not asyncio.get_running_loop():
            link = await self._open()
        return await link.send(command)

    async def _open(self) -> _Link:
        # Callers arriving while it opens share the one attempt; each may leave on its own.
        opening = self._opening
        if opening is None or opening.get_loop() is not asyncio.get_running_loop():
            opening = self._opening = asyncio.ensure_future(self._connect())
        return await asyncio.shield(opening)

    async def _connect(self) -> _Link:
        point = self._endpoint
        loop = asyncio.get_running_loop()

        def link() -> _Link:
            return _Link(self, point.socket_timeout)

        try:
            async with asyncio.timeout(point.connect_timeout):
                if isinstance(point.address, str):
                    _, opened = await loop.create_unix_connection(
                        link, point.address, ssl=point.tls
                    )
                else:
                    _, opened = await loop.create_connection(link, *point.address, ssl=point.tls)
            replies = [opened.send(_pack(*command)) for command in point.handshake()]
            for reply in await asyncio.gather(*replies):
                if isinstance(reply, ResponseError):
                    await opened.close()
                    raise reply
            self._link = opened
            return opened
        except TimeoutError:  # the builtin, which asyncio.timeout raises
            raise RedisTimeoutError("Timeout connecting to the Redis server") from None
        except OSError as exc:
            # Neither the address nor the password goes into the message.
            raise RedisConnectionError(
                f"Error connecting to the Redis server: {exc.strerror or type(exc).__name__}"
            ) from None
        finally:
            if self._opening is asyncio.current_task():
                self._opening = None

    def forget(self, link: _Link) -> None:
        if self._link is link:
            self._link = None

    async def aclose(self) -> None:
        opening = self._opening
        if opening is not None and opening.get_loop() is asyncio.get_running_loop():
            await asyncio.wait([opening])  # let it finish, so that its connection closes too
        link, self._link = self._link, None
        if link is not None:
            await link.close()
