"""Benchmark the exact cache: ``python -m gateway_kit.bench cache [--quick]``.

1. **An exact hit in-process** (target: under 1 ms p50 at c=1): the standalone app called as
   an ASGI app, no sockets, with Auth, Limits and Budget on (the model priced, so a hit still
   reserves and settles) and the built-in mock provider; the same short chat request every
   time, so every request after the first is a hit. The baseline, measured in the same run:
   the same app with the cache off (every request goes to the mock).
2. **Hits against misses over loopback at c=32** (target: hits at least 5x the req/s of
   misses): two gateways of this commit (``proxy --serve gateway``, memory storage, Auth and
   Limits on) against the proxy benchmark's mock upstream, one with the cache off (every
   request a miss through the mock), one with it on (the same request: hits), in interleaved
   rounds; p50, p99, req/s and the gateway's CPU per request. c=1 figures come along.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from contextlib import ExitStack
from typing import Any

import anyio

from gateway_kit.bench._load import build_request, cpu_seconds, run_load
from gateway_kit.bench._pair import Server, start_pair, table
from gateway_kit.bench.proxy import PATH
from gateway_kit.bench.routing import Series

__all__ = ["main"]

HIT_P50_MS = 1.0
HIT_RPS_RATIO = 5.0
OFF, ON = "cache off (misses)", "cache on (hits)"
QUESTION = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant. Answer in one sentence."},
        {"role": "user", "content": "What is the capital of France, and why is it famous?"},
    ],
    "temperature": 0,
    "max_tokens": 64,
}
FULL = {"in_process": 5000, "requests_c1": 2000, "requests_c32": 6400, "rounds": 3}
QUICK = {"in_process": 1000, "requests_c1": 300, "requests_c32": 1600, "rounds": 1}


# -- 1. in-process ------------------------------------------------------------------------------


async def _in_process(cache: bool, requests: int) -> list[float]:
    """Per-request latencies (ms) of the app called directly, after a warm-up."""
    from gateway_kit import Gateway, GatewayConfig, create_app

    config = GatewayConfig.model_validate(
        {
            "storage": {"url": "memory://"},
            "plans": {
                "bench": {
                    "included_requests": 10**12,
                    "burst_limit_rpm": 10**9,
                    "budget_usd": 10**8,
                }
            },
            "default_plan": "bench",
            "budget": {"mode": "enforce"},
            "guardian": {"mode": "off"},
            "cache": {"mode": "enforce" if cache else "off"},
            "webhooks": {"worker": False},
        }
    )
    gateway = Gateway(config)
    app = create_app(gateway=gateway)
    body = json.dumps({"model": "mock-large", **QUESTION}).encode()
    async with gateway:
        workspace = await gateway.workspaces.create("bench@example.com")
        key = (await gateway.keys.create(workspace.id)).secret
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {key}".encode()),
        ]
        latencies: list[float] = []
        for number in range(requests + 200):  # 200 warm-up requests
            started = time.perf_counter()
            status = await _call(app, body, headers)
            if status != 200:
                raise RuntimeError(f"the in-process request answered {status}")
            if number >= 200:
                latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _call(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def _median_p50(latencies: list[float]) -> float:
    return statistics.median(latencies)


# -- 2. over loopback ---------------------------------------------------------------------------


def _loopback(args: argparse.Namespace) -> bool:
    with ExitStack() as stack:
        servers = start_pair(stack, args.transport, [(OFF, []), (ON, ["--cache"])])
        requests = {s.name: _request(s) for s in servers}
        verdicts = []
        for concurrency, count in ((32, args.requests_c32), (1, args.requests_c1)):
            print(
                f"At c={concurrency}: {args.rounds} interleaved rounds of {count} requests per "
                "target after a warm-up",
                flush=True,
            )
            series = _rounds(servers, requests, concurrency, count, args.rounds)
            print(table(series), flush=True)
            if concurrency == 32:
                ratio = series[ON].pooled.rps / series[OFF].pooled.rps
                failed = series[ON].pooled.errors + series[OFF].pooled.errors
                passed = ratio >= HIT_RPS_RATIO and not failed
                verdicts.append(passed)
                print(
                    f"hits answer {ratio:.2f}x the req/s of misses; target >= "
                    f"{HIT_RPS_RATIO:.1f}x: {'PASS' if passed else 'FAIL'}\n",
                    flush=True,
                )
            else:
                extra = series[ON].pooled.p50 - series[OFF].pooled.p50
                print(f"a hit's p50 against a miss's: {extra:+.3f} ms\n", flush=True)
        return all(verdicts)


def _request(server: Server) -> bytes:
    body = json.dumps({"model": "bench-model", **QUESTION}).encode()
    return build_request(PATH, body, server.headers)


def _rounds(
    servers: list[Server], requests: dict[str, bytes], concurrency: int, count: int, rounds: int
) -> dict[str, Series]:
    series = {s.name: Series() for s in servers}
    for number in range(rounds + 1):  # round 0 is the warm-up
        for server in servers if number % 2 else servers[::-1]:
            done = series[server.name]
            before = cpu_seconds(server.pid)
            result = run_load(
                server.port,
                requests[server.name],
                concurrency=concurrency,
                requests=count if number else max(200, count // 4),
            )
            if number == 0:
                done.warmup = result
                continue
            done.runs.append(result)
            done.cpu_seconds += cpu_seconds(server.pid) - before
    return series


def measure(args: argparse.Namespace) -> int:
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start",
        flush=True,
    )
    print(
        f"1. An exact hit in-process (the app called directly, Auth + Limits + Budget on, the "
        f"built-in mock): {args.in_process} requests per target after 200 of warm-up",
        flush=True,
    )
    options = {"use_uvloop": True}
    miss = anyio.run(_in_process, False, args.in_process, backend_options=options)
    hit = anyio.run(_in_process, True, args.in_process, backend_options=options)
    hit_p50 = _median_p50(hit)
    for name, latencies in ((OFF, miss), (ON, hit)):
        ordered = sorted(latencies)
        p99 = ordered[int(len(ordered) * 0.99) - 1]
        print(f"  {name:<20} p50 {_median_p50(latencies):.3f} ms   p99 {p99:.3f} ms")
    in_process_ok = hit_p50 < HIT_P50_MS
    print(
        f"an exact hit answers in {hit_p50:.3f} ms p50 ({_median_p50(miss) / hit_p50:.2f}x "
        f"faster than a miss through the mock); target < {HIT_P50_MS:.1f} ms: "
        f"{'PASS' if in_process_ok else 'FAIL'}\n",
        flush=True,
    )
    print(
        "2. Hits against misses over loopback (proxy --serve gateway, memory storage, Auth + "
        "Limits on, the proxy benchmark's mock upstream)",
        flush=True,
    )
    loopback_ok = _loopback(args)
    return 0 if in_process_ok and loopback_ok else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench cache")
    parser.add_argument(
        "--transport", default="auto", help="the provider's transport (default: auto, as users)"
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    for name, default in (QUICK if args.quick else FULL).items():
        setattr(args, name, default)
    return measure(args)
