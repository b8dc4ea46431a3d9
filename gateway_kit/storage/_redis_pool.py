"""redis-py's path for ``RedisStorage``'s plain commands (``get``, ``set``, ``map_*``, ...): a
pool that hands out no connection the server has closed, and one deadline per command.

Closed connections. When Redis restarts, it closes every connection: each pooled one has read
end-of-file by the time the server is back. redis-py checks for that as it hands a connection
out, but 8.1 skips the check whenever maintenance notifications may be on, which under RESP3,
its default, they are ("auto"): each closed connection then failed the next command it was
given, once per pooled connection, for as long as traffic took to reach them all (a burst
seconds later still met them). ``CheckedPool`` reconnects such a connection first, whatever
the redis-py version.

Connections that died unheard (Redis back on a new host or container behind the same address,
a NAT that forgot the flow) are only found dead when written to. ``call`` runs a read once more
after a connection error, since a read changes nothing; never a write, whose lost reply may be
all that failed (nor a script: see ``_redis_channel``).

Deadlines. redis-py times each socket read and write with ``socket_timeout``, and the wait for
a pooled connection with ``pool_timeout``: on a stalled server, a command that queued for a
connection (freed when its holder timed out) then waited ``socket_timeout`` again for its own
reply, twice the bound or more. ``call`` gives the whole command one deadline,
``socket_timeout`` after it starts (one timer; redis-py's own remain as they are).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio import BlockingConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["CheckedPool", "call"]

T = TypeVar("T")


class CheckedPool(BlockingConnectionPool):
    """A ``BlockingConnectionPool`` that reconnects a connection the server has closed before
    handing it out (module docstring)."""

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        # redis-py's connections read through an asyncio.StreamReader; a closed one is at EOF.
        reader = getattr(connection, "_reader", None)
        if isinstance(reader, asyncio.StreamReader) and reader.at_eof():
            await connection.disconnect()
        await super().ensure_connection(connection)


async def call(
    command: Callable[[], Awaitable[T]], within: float | None, *, read: bool = False
) -> T:
    """Run ``command`` within ``within`` seconds of now (``None``: no deadline), twice if it
    is a ``read`` that met a connection error; the builtin ``TimeoutError`` when the deadline
    passes."""
    async with asyncio.timeout(within):
        try:
            return await command()
        except RedisConnectionError:
            if not read:
                raise
            # redis-py dropped the dead connection: the pool reconnects it, or hands out another.
            return await command()
