"""Auto-pipelining through redis-py for ``RedisStorage``: script calls made in the same
event-loop tick go out together, as one non-transactional pipeline. This is the path for clients
whose connections ``ScriptChannel`` cannot open itself (Sentinel, credential providers, custom
connection classes); the others go through the channel, which is cheaper per call.

Each operation is still one atomic script and one round trip for its caller; what is shared is
the socket write, the read and redis-py's per-command machinery, which at 32 concurrent
requests cost more than the scripts themselves (about 3x the operations per second here). A
call alone in its tick goes out directly, as before. Nothing is retried: a failure fails every
call of the batch it was in. A batch has one deadline, ``socket_timeout`` after it leaves, that
takes in its wait for a pooled connection (redis-py times the wait, then the reply again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

_Call = tuple[str, list[str], list[Any], "asyncio.Future[Any]"]

#: Calls per pipeline at most; a busier tick is split into several pipelines.
MAX_BATCH = 256


class AutoPipeline:
    """Runs ``scripts[name](keys, args)`` batched per loop tick; see the module docstring."""

    def __init__(
        self,
        client: Redis,
        scripts: dict[str, AsyncScript],
        errors: Callable[[str], AbstractContextManager[None]],
        *,
        within: float | None = None,
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._errors = errors
        self._within = within  # a batch's deadline, in seconds (None: none)
        self._pending: list[_Call] = []
        self._scheduled = False
        # Running batches, referenced so the loop cannot collect them mid-flight.
        self._running: set[asyncio.Task[None]] = set()
        #: Batches sent so far; each costs one round trip.
        self.round_trips = 0

    async def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((name, keys, args, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        for batch in _chunks(pending, MAX_BATCH):
            task = asyncio.ensure_future(self._send(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _send(self, batch: list[_Call]) -> None:
        self.round_trips += 1
        within = self._within
        deadline = None if within is None else asyncio.get_running_loop().time() + within
        if len(batch) == 1:
            await self._send_one(batch[0], deadline)
            return
        pipe = self._client.pipeline(transaction=False)
        for name, keys, args, _ in batch:
            # Plain EVALSHA: registering the scripts with the pipeline would make redis-py
            # send SCRIPT EXISTS first, a second round trip on every batch.
            pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
        try:
            with self._errors("pipeline"):
                async with asyncio.timeout_at(deadline):
                    results = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            for *_, future in batch:
                _fail(future, exc)
            return
        for call, result in zip(batch, results, strict=True):
            if isinstance(result, NoScriptError):
                # The script did not run (the server lost its cache): safe to send again,
                # alone, where redis-py loads it first.
                await self._send_one(call, deadline)
            elif isinstance(result, Exception):
                try:
                    with self._errors(call[0]):
                        raise result
                except Exception as exc:
                    _fail(call[3], exc)
            else:
                _resolve(call[3], result)

    async def _send_one(self, call: _Call, deadline: float | None) -> None:
        name, keys, args, future = call
        try:
            with self._errors(name):
                async with asyncio.timeout_at(deadline):
                    result = await self._scripts[name](keys=keys, args=args)
        except Exception as exc:
            _fail(future, exc)
        else:
            _resolve(future, result)

    async def aclose(self) -> None:
        """Wait for the batches under way (their callers are waiting for them)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


def _chunks(items: list[_Call], size: int) -> Iterator[list[_Call]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # the caller may have been cancelled meanwhile
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
