"""Benchmark observability: ``python -m gateway_kit.bench observe [--baseline COMMIT] [--quick]``.

1. **Against the commit before it, over loopback** (targets: at most 0.05 ms added p50 at c=1
   and at most 5 % fewer req/s at c=32): two gateways (``proxy --serve gateway``, memory
   storage, Auth and Limits on) against the proxy benchmark's mock upstream, one of ``COMMIT``
   (default ``BASELINE``, the commit before the request log: a checkout made for the run), one
   of this checkout with the request log (on by default) and ``/metrics`` on; 3 interleaved
   rounds at c=1, then at c=32, the order alternating, on each of 3 pairs of gateways started
   afresh, pooled. Two gateways of the same code differ by up to 6 % over a whole run (where
   a process's memory fell, presumably), more than the 5 % to be judged: new processes for
   each pair average that out (each round's ratio is printed too); the same short chat
   request each time.
2. **Memory over 100,000 requests** (target: flat): the standalone app called in-process (Auth
   and Limits on memory storage, the request log capped at 5,000 records per workspace,
   metrics on), the process's resident memory read every 10,000 requests; flat means the last
   reading is within 5 MB of the one at 20,000 (past the log's cap).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
from contextlib import ExitStack
from typing import Any

import anyio
import anyio.lowlevel

from gateway_kit.bench._baseline import worktree
from gateway_kit.bench._load import build_request
from gateway_kit.bench._pair import announced_rounds, start_pair, table
from gateway_kit.bench.proxy import PATH
from gateway_kit.bench.routing import Series

__all__ = ["main"]

#: The commit before the request log and the metrics.
BASELINE = "7e760d4"
P50_ADDED_MS = 0.05
RPS_RATIO = 0.95
MEMORY_FLAT_MB = 5.0
BEFORE, AFTER = "before (baseline)", "request log + metrics"
QUESTION = {
    "model": "bench-model",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "max_tokens": 64,
}
FULL = {
    "requests_c1": 3000,
    "requests_c32": 8000,
    "pairs": 3,
    "rounds": 3,
    "memory_requests": 100_000,
}
QUICK = {
    "requests_c1": 500,
    "requests_c32": 2000,
    "pairs": 1,
    "rounds": 1,
    "memory_requests": 20_000,
}


def _loopback(args: argparse.Namespace) -> bool:
    series: dict[int, dict[str, Series]] = {1: {}, 32: {}}
    with ExitStack() as outer:
        checkout = outer.enter_context(worktree(args.baseline))
        for pair in range(1, args.pairs + 1):
            print(f"-- pair {pair} of {args.pairs}: two gateways started afresh", flush=True)
            with ExitStack() as stack:
                servers = start_pair(
                    stack,
                    args.transport,
                    [(BEFORE, []), (AFTER, ["--metrics"])],
                    checkouts={BEFORE: checkout},
                )
                body = json.dumps(QUESTION).encode()
                requests = {s.name: build_request(PATH, body, s.headers) for s in servers}
                for concurrency, count in ((1, args.requests_c1), (32, args.requests_c32)):
                    measured = announced_rounds(
                        servers,
                        requests,
                        count=count,
                        rounds=args.rounds,
                        warmup=max(300, count // 5),
                        concurrency=concurrency,
                    )
                    for name, one in measured.items():
                        _pool(series[concurrency], name, one)
    print(f"-- all {args.pairs} pairs together", flush=True)
    verdicts = []
    for concurrency, pooled in series.items():
        print(f"At c={concurrency}:\n{table(pooled)}", flush=True)
        failed = pooled[AFTER].pooled.errors + pooled[BEFORE].pooled.errors
        if concurrency == 1:
            extra = pooled[AFTER].pooled.p50 - pooled[BEFORE].pooled.p50
            cpu = pooled[AFTER].cpu_ms - pooled[BEFORE].cpu_ms
            passed = extra <= P50_ADDED_MS and not failed
            print(
                f"the request log and metrics add {extra:+.3f} ms p50 at c=1 ({cpu:+.3f} ms "
                f"of the gateway's CPU per request); target <= {P50_ADDED_MS} ms: "
                f"{'PASS' if passed else 'FAIL'}\n",
                flush=True,
            )
        else:
            ratio = pooled[AFTER].pooled.rps / pooled[BEFORE].pooled.rps
            passed = ratio >= RPS_RATIO and not failed
            rounds = [
                after.rps / before.rps
                for after, before in zip(pooled[AFTER].runs, pooled[BEFORE].runs, strict=True)
            ]
            print(
                f"{ratio:.3f}x the baseline's req/s at c=32 (rounds, {args.rounds} a pair: "
                f"{', '.join(f'{r:.3f}' for r in rounds)}); target >= {RPS_RATIO}: "
                f"{'PASS' if passed else 'FAIL'}\n",
                flush=True,
            )
        verdicts.append(passed)
    return all(verdicts)


def _pool(into: dict[str, Series], name: str, one: Series) -> None:
    """Add a pair's runs of target ``name`` to those of the pairs before it."""
    pooled = into.setdefault(name, Series(warmup=one.warmup))
    pooled.runs += one.runs
    pooled.cpu_seconds += one.cpu_seconds


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


async def _memory(requests: int) -> list[tuple[int, float]]:
    from gateway_kit import Gateway, GatewayConfig, create_app

    config = GatewayConfig.model_validate(
        {
            "storage": {"url": "memory://"},
            "plans": {"bench": {"included_requests": 10**12, "burst_limit_rpm": 10**9}},
            "default_plan": "bench",
            "guardian": {"mode": "off"},
            "request_log": {"max_records": 5000, "flush_interval_s": 0.2},
            "metrics": {"enabled": True},
        }
    )
    gateway = Gateway(config)
    app = create_app(gateway=gateway)
    body = json.dumps({**QUESTION, "model": "mock-mini"}).encode()
    readings = []
    async with gateway:
        workspace = await gateway.workspaces.create("bench@example.com")
        key = (await gateway.keys.create(workspace.id)).secret.encode()
        headers = [(b"authorization", b"Bearer " + key), (b"content-type", b"application/json")]
        for index in range(1, requests + 1):
            await _call(app, body, headers)
            # A server's event loop runs between requests (the log's writer, timers' clean-up);
            # a loop that never yields keeps every cancelled timer and looks like a leak.
            await anyio.lowlevel.checkpoint()
            if index % 10_000 == 0:
                await gateway.requests.flush()
                readings.append((index, _rss_mb()))
                print(f"  after {index:>7,} requests: {readings[-1][1]:8.1f} MB", flush=True)
    return readings


async def _call(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise AssertionError(f"status {message['status']}")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)


def measure(args: argparse.Namespace) -> int:
    print(
        f"1. Against {args.baseline} (the commit before the request log) over loopback: "
        "memory storage, Auth + Limits on, the request log on, /metrics on",
        flush=True,
    )
    loopback_ok = _loopback(args)
    print(
        f"2. Memory over {args.memory_requests:,} requests in-process (the request log capped at "
        "5,000 records, metrics on)",
        flush=True,
    )
    readings = anyio.run(_memory, args.memory_requests, backend_options={"use_uvloop": True})
    start = next((mb for count, mb in readings if count == 20_000), readings[0][1])
    growth = readings[-1][1] - start
    memory_ok = growth <= MEMORY_FLAT_MB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1000
    print(
        f"resident memory {growth:+.1f} MB from 20,000 requests to {readings[-1][0]:,} (peak "
        f"{peak:.0f} MB); target within {MEMORY_FLAT_MB:.0f} MB: "
        f"{'PASS' if memory_ok else 'FAIL'}",
        flush=True,
    )
    return 0 if loopback_ok and memory_ok else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench observe")
    parser.add_argument("--transport", default="auto", help="the provider's transport")
    parser.add_argument(
        "--baseline", default=BASELINE, help=f"the commit to compare with (default {BASELINE})"
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    for size, value in (QUICK if args.quick else FULL).items():
        setattr(args, size, value)
    return measure(args)
