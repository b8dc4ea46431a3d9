"""``RedisStorage``: state shared by several gateway instances, one Lua script per operation."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import _redis_lua as lua
from gateway_kit.storage._pipeline import AutoPipeline
from gateway_kit.storage._redis_channel import ScriptChannel
from gateway_kit.storage._redis_pool import CheckedPool, call
from gateway_kit.storage.base import (
    THROTTLED,
    ClaimedItem,
    DeadItem,
    Increment,
    IncrManyResult,
    IncrResult,
    LogEntry,
    QueueSize,
    Storage,
    Throttle,
    ThrottleResult,
)
from gateway_kit.storage.checks import (
    INT64_MAX,
    INT64_MIN,
    check_batch,
    check_count,
    check_key,
    check_name,
    check_partition,
    check_queue,
    check_seconds,
    check_time,
    check_value,
    check_values,
    partition_of,
)

__all__ = ["RedisStorage"]

T = TypeVar("T")

_QUEUE_PARTS = ("payload", "meta", "ready", "dead", "tokens", "seq")
# Our scripts' error codes, and Redis's, as messages that name neither keys' values nor hosts.
_ERRORS = {
    "GK_NOT_COUNTER": "the key holds a value that is not a 64-bit counter",
    "GK_OVERFLOW": "the increment would overflow a signed 64-bit counter",
    "WRONGTYPE": "the key holds a different kind of value",
}


@contextmanager
def _errors(op: str) -> Iterator[None]:
    """Turn every redis-py error into ``StorageError`` without the URL, password or values."""
    try:
        yield
    except RedisError as exc:
        text = str(exc) if isinstance(exc, ResponseError) else ""
        known = next((msg for code, msg in _ERRORS.items() if code in text), None)
        detail = known or type(exc).__name__
        raise StorageError(f"Redis {op} failed: {detail}") from exc
    except TimeoutError as exc:  # the builtin: a command's deadline passed (_redis_pool.call)
        raise StorageError(f"Redis {op} failed: TimeoutError") from exc


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(1, round(seconds * 1000))


class RedisStorage(Storage):
    """Keys live under ``prefix``, hash-tagged by partition: ``ws_1:quota`` is stored as
    ``<prefix>{ws_1}:quota``, and the queue ``q`` as ``<prefix>q{q}:<part>``, so that every
    script's keys share one Cluster slot. The clock is the server's ``TIME``.

    Built from a URL, it owns a bounded, blocking connection pool (a caller waits up to
    ``pool_timeout`` for a free connection) that reconnects a connection the server closed (a
    restart) before handing it out. A stalled server fails a call within ``socket_timeout``,
    however long it waited for a pooled connection. Only a read is retried, once, after a
    connection error: a timed-out script may have run, and running it twice would count twice.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "gk:",
        max_connections: int = 32,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        pool_timeout: float = 5.0,
    ) -> None:
        try:
            pool = CheckedPool.from_url(
                url,
                max_connections=check_count(max_connections, "max_connections"),
                timeout=check_seconds(pool_timeout, "pool_timeout"),
                socket_timeout=check_seconds(socket_timeout, "socket_timeout"),
                socket_connect_timeout=check_seconds(connect_timeout, "connect_timeout"),
                retry=Retry(NoBackoff(), 0),
                health_check_interval=30,
            )
        except ValueError:
            # redis-py's message may quote the URL, and the URL may hold a password.
            raise ValueError(
                "invalid Redis URL (not repeated here: it may hold a password)"
            ) from None
        self._setup(Redis.from_pool(pool), prefix, owned=True)

    @classmethod
    def from_client(cls, client: Redis, *, prefix: str = "gk:") -> RedisStorage:
        """Use an existing ``redis.asyncio.Redis`` (made with ``decode_responses=False``).

        The caller keeps ownership: ``aclose`` leaves the client open.
        """
        self = cls.__new__(cls)
        self._setup(client, prefix, owned=False)
        return self

    def _setup(self, client: Redis, prefix: str, *, owned: bool) -> None:
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ValueError("prefix must be a str without braces (they would move the hash tag)")
        self._client = client
        self._prefix = prefix
        self._owned = owned
        self._timeout: float | None = client.connection_pool.connection_kwargs.get("socket_timeout")
        # Scripts run with EVALSHA, loaded again after a NOSCRIPT; over one multiplexed
        # connection when the channel can open it like redis-py would, else through redis-py.
        scripts = {name: client.register_script(src) for name, src in lua.SCRIPTS.items()}
        self._scripts: ScriptChannel | AutoPipeline = ScriptChannel.open_like(
            client.connection_pool.make_connection(),  # type: ignore[no-untyped-call]
            {name: (script.sha, lua.SCRIPTS[name]) for name, script in scripts.items()},
            _errors,
        ) or AutoPipeline(client, scripts, _errors, within=self._timeout)

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self._scripts.call(name, keys, args)

    async def _command(
        self, op: str, command: Callable[[], Awaitable[T]], *, read: bool = False
    ) -> T:
        """A redis-py command, failed within ``socket_timeout``; a ``read`` that met a dead
        connection runs once more (``_redis_pool``)."""
        with _errors(op):
            return await call(command, self._timeout, read=read)

    @property
    def round_trips(self) -> int:
        """Script round trips made so far (a diagnostic: calls of one tick share one)."""
        return self._scripts.round_trips

    def __repr__(self) -> str:
        return f"RedisStorage(prefix={self._prefix!r})"

    def _key(self, key: str) -> str:
        check_key(key)
        return self._tagged(key)

    def _tagged(self, key: str) -> str:
        """A checked key (an ``Increment``'s or ``Throttle``'s) as stored, hash tag and all."""
        partition = partition_of(key)
        return f"{self._prefix}{{{partition}}}{key[len(partition) :]}"

    def _queue(self, queue: str) -> list[str]:
        check_queue(queue)
        return [f"{self._prefix}q{{{queue}}}:{part}" for part in _QUEUE_PARTS]

    async def now(self) -> float:
        seconds, micros = await self._command("now", self._client.time, read=True)
        return int(seconds) + int(micros) / 1e6

    async def get(self, key: str) -> bytes | None:
        name = self._key(key)
        reply = await self._command("get", lambda: self._client.get(name), read=True)
        return cast(bytes | None, reply)

    async def set(
        self, key: str, value: bytes, *, ttl: float | None = None, if_absent: bool = False
    ) -> bool:
        name = self._key(key)
        check_value(value)
        px = _ms(check_seconds(ttl, "ttl")) if ttl is not None else None
        return bool(
            await self._command("set", lambda: self._client.set(name, value, px=px, nx=if_absent))
        )

    async def delete(self, key: str) -> bool:
        name = self._key(key)
        return bool(await self._command("delete", lambda: self._client.delete(name)))

    async def cas(
        self, key: str, expected: bytes | None, new: bytes | None, *, ttl: float | None = None
    ) -> bool:
        name = self._key(key)
        args: list[Any] = []
        for value in (expected, new):
            args += [0, b""] if value is None else [1, check_value(value)]
        args.append(_ms(check_seconds(ttl, "ttl")) if ttl is not None else 0)
        return bool(await self._script("cas", [name], args))

    async def incr(
        self, key: str, amount: int, *, ttl: float | None = None, limit: int | None = None
    ) -> IncrResult:
        inc = Increment(key, amount, ttl, limit)
        result = await self.incr_many([inc])
        return IncrResult(result.allowed, result.values[key])

    async def incr_many(
        self,
        increments: Sequence[Increment],
        *,
        throttle: Throttle | None = None,
        reads: Sequence[str] = (),
    ) -> IncrManyResult:
        incs = list(increments)
        read_keys = check_batch(incs, throttle, reads)
        keys = [self._tagged(inc.key) for inc in incs]
        args: list[Any] = [len(incs)]
        for inc in incs:
            # Bounds on the current value, exact in Python: Lua only compares decimal strings.
            refuse_above = (
                inc.limit - inc.amount if inc.limit is not None and inc.amount > 0 else ""
            )
            args += [inc.amount, refuse_above, INT64_MAX - inc.amount, INT64_MIN - inc.amount]
            args.append(_ms(inc.ttl))
        if throttle is not None:
            keys.append(self._tagged(throttle.key))
            args += [throttle.interval_us, throttle.capacity, throttle.cost]
        if read_keys:  # after the throttle's key: the script tells them apart by ARGV's length
            keys += [self._tagged(key) for key in read_keys]
        reply = await self._script("incr_many", keys, args)
        refused, throttled, allowed, remaining, retry_us, reset_us, *values = reply
        read: dict[str, bytes | None] = {}
        if read_keys:
            values, got = values[: len(incs)], values[len(incs) :]
            read = dict(zip(read_keys, got, strict=True))
        current = {inc.key: int(value) for inc, value in zip(incs, values, strict=True)}
        verdict = None
        if throttled:
            verdict = ThrottleResult(bool(allowed), remaining, retry_us / 1e6, reset_us / 1e6)
        if refused:
            name = THROTTLED if refused == -1 else incs[refused - 1].key
            return IncrManyResult(False, current, name, verdict, read)
        totals = {inc.key: current[inc.key] + inc.amount for inc in incs}
        return IncrManyResult(True, totals, None, verdict, read)

    async def throttle(
        self, key: str, *, limit: int, period: float, burst: int | None = None, cost: int = 1
    ) -> ThrottleResult:
        result = await self.incr_many([], throttle=Throttle(key, limit, period, burst, cost))
        assert result.throttle is not None
        return result.throttle

    async def map_set(self, key: str, field: str, value: bytes) -> None:
        name = self._key(key)
        check_name(field, "map field")
        check_value(value)
        await self._command("map_set", lambda: self._client.hset(name, field, value))

    async def map_get(self, key: str, field: str) -> bytes | None:
        name = self._key(key)
        check_name(field, "map field")
        reply = await self._command("map_get", lambda: self._client.hget(name, field), read=True)
        return cast(bytes | None, reply)

    async def map_delete(self, key: str, field: str) -> bool:
        name = self._key(key)
        check_name(field, "map field")
        return bool(await self._command("map_delete", lambda: self._client.hdel(name, field)))

    async def map_items(self, key: str) -> dict[str, bytes]:
        name = self._key(key)
        reply = await self._command("map_items", lambda: self._client.hgetall(name), read=True)
        return {field.decode(): value for field, value in cast(dict[bytes, bytes], reply).items()}

    def _log_keys(self, key: str) -> list[str]:
        """A log's list and its positions' counter (``{ws}#seq:...``: no key of the
        protocol's can be named so, since theirs go on with ``:`` after the tag)."""
        check_key(key)
        partition = partition_of(key)
        rest = key[len(partition) :]
        return [f"{self._prefix}{{{partition}}}{rest}", f"{self._prefix}{{{partition}}}#seq{rest}"]

    async def log_append(self, key: str, value: bytes, *, max_len: int) -> None:
        await self.log_extend(key, [value], max_len=max_len)

    async def log_extend(self, key: str, values: Sequence[bytes], *, max_len: int) -> None:
        keys = self._log_keys(key)
        entries = check_values(values)
        args: list[Any] = [check_count(max_len, "max_len"), *entries]
        if entries:
            await self._script("log_append", keys, args)

    async def log_page(self, key: str, *, limit: int, before: int | None = None) -> list[LogEntry]:
        keys = self._log_keys(key)
        args = [check_count(limit, "limit"), 0 if before is None else check_count(before, "before")]
        first, values = await self._script("log_page", keys, args)
        return [LogEntry(int(first) - i, value) for i, value in enumerate(values)]

    async def log_range(self, key: str, *, limit: int) -> list[bytes]:
        name = self._key(key)
        check_count(limit, "limit")
        reply = await self._command(
            "log_range", lambda: self._client.lrange(name, 0, limit - 1), read=True
        )
        return cast(list[bytes], reply)

    async def enqueue(self, queue: str, item_id: str, payload: bytes, *, due_at: float) -> bool:
        keys = self._queue(queue)
        args: list[Any] = [check_name(item_id, "item id"), check_value(payload)]
        args.append(check_time(due_at, "due_at"))
        return bool(await self._script("enqueue", keys, args))

    async def claim(self, queue: str, *, limit: int, lease: float) -> list[ClaimedItem]:
        keys = self._queue(queue)
        args: list[Any] = [check_count(limit, "limit"), check_seconds(lease, "lease")]
        rows = await self._script("claim", keys, args)
        return [
            ClaimedItem(item_id.decode(), payload, int(token), int(attempts), float(due_at))
            for item_id, payload, token, attempts, due_at in rows
        ]

    async def ack(self, queue: str, token: int) -> bool:
        keys = self._queue(queue)
        return bool(await self._script("ack", keys, [check_count(token, "token")]))

    async def retry(
        self, queue: str, token: int, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        keys = self._queue(queue)
        args: list[Any] = [check_count(token, "token"), check_time(due_at, "due_at")]
        args += [0, b""] if payload is None else [1, check_value(payload)]
        return bool(await self._script("retry", keys, args))

    async def dead(self, queue: str, token: int, *, reason: str = "") -> bool:
        keys = self._queue(queue)
        if not isinstance(reason, str):
            raise TypeError("reason must be a str")
        return bool(await self._script("dead", keys, [check_count(token, "token"), reason]))

    async def dead_items(self, queue: str, *, limit: int) -> list[DeadItem]:
        keys = self._queue(queue)
        rows = await self._script("dead_items", keys, [check_count(limit, "limit")])
        return [
            DeadItem(item_id.decode(), payload, int(attempts), reason.decode(), float(failed_at))
            for item_id, payload, attempts, reason, failed_at in rows
        ]

    async def requeue(
        self, queue: str, item_id: str, *, due_at: float, payload: bytes | None = None
    ) -> bool:
        keys = self._queue(queue)
        args: list[Any] = [check_name(item_id, "item id"), check_time(due_at, "due_at")]
        args += [0, b""] if payload is None else [1, check_value(payload)]
        return bool(await self._script("requeue", keys, args))

    async def discard(self, queue: str, item_id: str) -> bool:
        keys = self._queue(queue)
        return bool(await self._script("discard", keys, [check_name(item_id, "item id")]))

    async def queue_size(self, queue: str) -> QueueSize:
        ready, leased, dead = await self._script("queue_size", self._queue(queue), [])
        return QueueSize(int(ready) - int(leased), int(leased), int(dead))

    async def drop_partition(self, partition: str) -> int:
        check_partition(partition)
        # SCAN for the partition's keys (one Cluster slot: the hash tag), deleted in batches.
        # (``{ws}*``, not ``{ws}:*``: the logs' counters are ``{ws}#seq:...``.)
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", f"{self._prefix}{{{partition}}}") + "*"
        counters = f"{self._prefix}{{{partition}}}#seq:".encode()
        client, dropped, cursor = self._client, 0, 0
        while True:
            # Each step within socket_timeout; a SCAN (a read) runs again on a dead connection.
            scan = functools.partial(client.scan, cursor, match=pattern, count=500)
            cursor, keys = await self._command("drop_partition", scan, read=True)
            if keys:
                unlink = functools.partial(client.unlink, *keys)
                removed: int = await self._command("drop_partition", unlink)
                # The logs' counters go with their logs but are not keys of the protocol's.
                names = [key if isinstance(key, bytes) else key.encode() for key in keys]
                dropped += removed - len([name for name in names if name.startswith(counters)])
            if cursor == 0:
                return dropped

    async def aclose(self) -> None:
        await self._scripts.aclose()
        if self._owned:
            with _errors("close"):
                await self._client.aclose()
