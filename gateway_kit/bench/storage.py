"""Storage operations per second per backend, and Redis round trips per admission.

``python -m gateway_kit.bench storage [--seconds S] [--concurrency N] [--redis-url URL]``

An admission is what the Limits layer does per request: one ``incr_many`` of the request
counter and the spend counter with the burst throttle. Round trips are counted on the client,
as the requests its connections write, after a warm-up (which loads the scripts).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from gateway_kit.storage import Increment, MemoryStorage, SQLiteStorage, Storage, Throttle

__all__ = ["count_round_trips", "main"]

Op = Callable[[], Awaitable[object]]
Counter = Callable[[], int]


def _ops(storage: Storage, partition: str) -> dict[str, Op]:
    admission = [
        Increment(f"{partition}:requests", 1, ttl=3600, limit=10**12),
        Increment(f"{partition}:spend", 1_500, ttl=3600, limit=10**15),
    ]
    burst = Throttle(f"{partition}:burst", limit=10**9, period=60)
    return {
        "incr": lambda: storage.incr(f"{partition}:counter", 1, ttl=3600),
        "incr_many": lambda: storage.incr_many(admission, throttle=burst),
        "throttle": lambda: storage.throttle(f"{partition}:rate", limit=10**9, period=60),
    }


async def _rate(op: Op, seconds: float, concurrency: int) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await op()
            done += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(loop)
    return done / (time.perf_counter() - start)


@asynccontextmanager
async def count_round_trips(url: str, *, prefix: str) -> AsyncIterator[tuple[Storage, Counter]]:
    """A ``RedisStorage`` and a count of the script round trips it has made."""
    from gateway_kit.storage.redis import RedisStorage

    async with RedisStorage(url, prefix=prefix) as storage:
        yield storage, lambda: storage.round_trips


async def _admission_round_trips(url: str, prefix: str) -> float:
    async with count_round_trips(url, prefix=prefix) as (storage, sent):
        admit = _ops(storage, "ws_bench")["incr_many"]
        await admit()  # connects and loads the script
        before = sent()
        for _ in range(100):
            await admit()
        return (sent() - before) / 100


async def _delete_prefix(url: str, prefix: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    async with client:
        async for key in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(key)


async def _run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gk-bench-") as workdir:
        backends: dict[str, Callable[[], Storage]] = {
            "memory": MemoryStorage,
            "sqlite": lambda: SQLiteStorage(Path(workdir) / "bench.db"),
        }
        prefix = f"gkbench:{uuid.uuid4().hex[:8]}:"
        if args.redis_url:
            from gateway_kit.storage.redis import RedisStorage

            backends["redis"] = lambda: RedisStorage(args.redis_url, prefix=prefix)
        print(f"{args.seconds:g} s per figure; concurrency {args.concurrency}\n")
        print("| backend | operation | ops/s, sequential | ops/s, concurrent |")
        print("|---|---|---:|---:|")
        try:
            for name, make in backends.items():
                async with make() as storage:
                    for op_name, op in _ops(storage, f"ws_{uuid.uuid4().hex[:8]}").items():
                        await op()  # warm up: connections, scripts, tables
                        one = await _rate(op, args.seconds, 1)
                        many = await _rate(op, args.seconds, args.concurrency)
                        print(f"| {name} | {op_name} | {one:,.0f} | {many:,.0f} |", flush=True)
            if args.redis_url:
                trips = await _admission_round_trips(args.redis_url, prefix)
                print(f"\nRedis round trips per admission (incr_many + throttle): {trips:g}")
        finally:
            if args.redis_url:
                await _delete_prefix(args.redis_url, prefix)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench storage")
    parser.add_argument("--seconds", type=float, default=2.0, help="per figure (default 2)")
    parser.add_argument("--concurrency", type=int, default=32, help="tasks (default 32)")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("GATEWAY_KIT_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="the Redis to measure ('' to skip); keys go under a random prefix, then go away",
    )
    anyio.run(_run, parser.parse_args(argv))
    return 0
