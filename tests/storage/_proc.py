"""A storage client in its own OS process, for the multi-process tests.

``python _proc.py URL [--prefix P] [--clock-offset S] COMMAND ARGS...``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio

from gateway_kit.storage import Storage, storage_from_url


def _say(value: Any) -> None:
    print(json.dumps(value), flush=True)


async def _together() -> None:
    """Say ready, then wait for the test's go (a line on stdin): the processes start their
    work together however long each took to start (a busy machine can take seconds)."""
    _say("ready")
    await anyio.to_thread.run_sync(sys.stdin.readline)


async def _incr(storage: Storage, key: str, count: int, limit: int) -> None:
    allowed = 0

    async def one() -> None:
        nonlocal allowed
        ok = (await storage.incr(key, 1, limit=limit)).allowed  # awaited before the +=
        allowed += ok

    await _together()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    _say(allowed)


async def _drain(storage: Storage, queue: str) -> None:
    await storage.get("ws_0:probe")  # connected before the go: both are claiming at once
    await _together()
    mine = []
    while claimed := await storage.claim(queue, limit=1, lease=60):
        mine.append(claimed[0].item_id)
        assert await storage.ack(queue, claimed[0].token)
        await anyio.sleep(0.002)  # a little work, so that the two workers interleave
    _say(mine)


async def _fill_and_hang(storage: Storage, key: str, count: int, queue: str, items: int) -> None:
    for _ in range(count):
        await storage.incr(key, 1)
    for i in range(items):
        await storage.enqueue(queue, f"item{i}", b"payload %d" % i, due_at=0)
    _say("ready")
    await anyio.sleep(3600)  # killed here


async def _claim_and_hang(storage: Storage, queue: str, lease: float) -> None:
    [item] = await storage.claim(queue, limit=1, lease=lease)
    _say({"item_id": item.item_id, "token": item.token})
    await anyio.sleep(3600)  # killed here, holding the lease


async def _report(storage: Storage, key: str, queue: str, wait: float) -> None:
    value = await storage.get(key)
    deadline = time.monotonic() + wait
    claimed = await storage.claim(queue, limit=100, lease=60)
    while not claimed and time.monotonic() < deadline:  # a lease lapsing on a server clock
        await anyio.sleep(0.05)
        claimed = await storage.claim(queue, limit=100, lease=60)
    items = [{"item_id": c.item_id, "attempts": c.attempts, "token": c.token} for c in claimed]
    _say({"value": None if value is None else int(value), "claimed": items})


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--prefix")
    parser.add_argument("--clock-offset", type=float, default=0.0)
    parser.add_argument("command", choices=["incr", "drain", "fill", "hold", "report"])
    parser.add_argument("args", nargs="*")
    ns = parser.parse_args(argv)
    options: dict[str, Any] = {}
    if ns.prefix:
        options["prefix"] = ns.prefix
    if ns.url.startswith("sqlite"):
        options["clock"] = lambda: time.time() + ns.clock_offset
    a = ns.args
    async with storage_from_url(ns.url, **options) as storage:
        if ns.command == "incr":
            await _incr(storage, a[0], int(a[1]), int(a[2]))
        elif ns.command == "drain":
            await _drain(storage, a[0])
        elif ns.command == "fill":
            await _fill_and_hang(storage, a[0], int(a[1]), a[2], int(a[3]))
        elif ns.command == "hold":
            await _claim_and_hang(storage, a[0], float(a[1]))
        else:
            await _report(storage, a[0], a[1], float(a[2]))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
