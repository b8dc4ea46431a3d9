"""Webhook delivery throughput and latency per storage backend.

``python -m gateway_kit.bench webhooks [--events N] [--fanout K] [--within S]
[--latency-events M] [--rate R] [--backends memory,sqlite,redis] [--set KEY=VALUE ...]``

A real ``Gateway`` (its delivery worker inside; the default ``webhooks`` configuration but for
``allow_http`` and a loopback allow list) delivers to a receiver in its own process: a raw ASGI
app under uvicorn that answers 200 at once and notes when each ``X-Service-Event-Id`` arrived,
on ``time.monotonic`` (one clock for every process on Linux). Per backend, each run on a
fresh gateway and fresh storage:

- throughput: N events published back to back to a workspace with one webhook, then N/K to
  one with K webhooks (fan-out; N deliveries either way); deliveries per second from the first
  publish to the last arrival, deliveries that came twice, and those still missing S seconds
  after the first publish (the run stops publishing and waiting there, so a slow worker
  cannot stretch the benchmark; ``events`` shows what was published);
- latency: M events published at R per second to one webhook, a pace the worker keeps up
  with, so this is the wake-up path and not queueing: publish to first attempt arriving.

Redis is skipped, with a note, when it does not answer; its keys go under a random prefix and
are deleted afterwards. ``--set`` changes the ``webhooks`` configuration (``--set
per_webhook_concurrency=32``) to see what a setting is worth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from gateway_kit.bench._load import free_port, server_process
from gateway_kit.bench._receiver import Key, serve_receiver
from gateway_kit.config import GatewayConfig
from gateway_kit.events.models import Event, sample_event
from gateway_kit.gateway import Gateway

__all__ = ["main"]

SECRET = "whsec_" + "b" * 40
BACKENDS = ("memory", "sqlite", "redis")


# -- one gateway delivering to the receiver ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Arrivals:
    first: dict[Key, float]
    duplicates: int
    missing: int


@dataclass
class _Hub:
    """A running gateway with one workspace whose webhooks all point at the receiver."""

    gateway: Gateway
    receiver: httpx.AsyncClient
    run: str
    workspace_id: str
    paths: list[str]
    #: Every delivery published in this run so far (the receiver counts them all).
    expected: set[Key]

    async def publish(self, event: Event) -> None:
        self.expected.update((path, event.event_id) for path in self.paths)
        await self.gateway.events.publish(event)

    def event(self) -> Event:
        return sample_event("budget.alert", workspace_id=self.workspace_id)

    async def arrivals(self, keys: set[Key], within: float) -> _Arrivals:
        """Wait until every delivery published arrived (or ``within`` seconds passed)."""
        wait: dict[str, str | float] = {
            "run": self.run,
            "count": len(self.expected),
            "within": within,
        }
        await self.receiver.get("/_arrivals", params=wait, timeout=within + 30)
        await anyio.sleep(0.2)  # room for a (wrong) second delivery to show up
        answer = await self.receiver.get(
            "/_arrivals", params={"run": self.run, "count": 0, "within": 0}
        )
        times: dict[Key, list[float]] = defaultdict(list)
        for path, event_id, at in answer.json():
            times[(path, event_id)].append(at)
        return _Arrivals(
            {key: min(times[key]) for key in keys if key in times},
            sum(len(times[key]) - 1 for key in keys if key in times),
            len(keys - set(times)),
        )


@asynccontextmanager
async def _hub(
    storage: dict[str, str],
    settings: dict[str, Any],
    receiver: httpx.AsyncClient,
    run: str,
    webhooks: int,
) -> AsyncIterator[_Hub]:
    config = GatewayConfig.model_validate(
        {
            "storage": storage,
            "webhooks": {"allow_http": True, "allow": ["127.0.0.0/8"], **settings},
            # Guardian is measured by `bench guardian`.
            "guardian": {"mode": "off"},
        }
    )
    async with Gateway(config, run_worker=True) as gateway:
        workspace = await gateway.workspaces.create("bench@example.com")
        paths = [f"/{run}/{n}" for n in range(webhooks)]
        for n, path in enumerate(paths):
            await gateway.webhooks.create(
                workspace.id,
                name=f"bench-{n}",
                url=f"{receiver.base_url}{path.lstrip('/')}",
                secret=SECRET,
                events=None,
            )
        hub = _Hub(gateway, receiver, run, workspace.id, paths, set())
        # Warm up (connections, scripts, tables, code paths) with one event, delivered.
        await hub.publish(hub.event())
        await hub.arrivals(set(), within=10.0)
        yield hub


# -- the measurements -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Throughput:
    backend: str
    webhooks: int
    events: int
    publish_s: float
    #: First publish to last arrival.
    seconds: float
    duplicates: int
    missing: int

    def row(self) -> str:
        deliveries = self.events * self.webhooks
        delivered = (deliveries - self.missing) / self.seconds if self.seconds else 0.0
        return (
            f"| {self.backend} | {self.webhooks} | {self.events:,} | {deliveries:,} "
            f"| {self.events / self.publish_s:,.0f} | {delivered:,.0f} | {self.seconds:.2f} "
            f"| {self.duplicates} | {self.missing} |"
        )


@dataclass(frozen=True, slots=True)
class Latency:
    backend: str
    #: Milliseconds, sorted.
    samples: tuple[float, ...]
    duplicates: int
    missing: int

    def percentile(self, p: float) -> float:
        index = min(len(self.samples) - 1, max(0, round(p / 100 * len(self.samples)) - 1))
        return self.samples[index]

    def row(self) -> str:
        figures = " | ".join(
            f"{self.percentile(p):.1f}" if self.samples else "-" for p in (50, 95, 99, 100)
        )
        return f"| {self.backend} | {figures} | {self.duplicates} | {self.missing} |"


async def _throughput(hub: _Hub, backend: str, events: int, within: float) -> Throughput:
    batch = [hub.event() for _ in range(events)]
    started = time.monotonic()
    published = 0
    for event in batch:
        if time.monotonic() - started > within:
            break  # publishing alone outlasted the run: measure what went out
        await hub.publish(event)
        published += 1
    publish_s = time.monotonic() - started
    keys = {(path, event.event_id) for path in hub.paths for event in batch[:published]}
    got = await hub.arrivals(keys, within=max(0.0, within - publish_s))
    seconds = max(got.first.values(), default=started) - started
    return Throughput(
        backend, len(hub.paths), published, publish_s, seconds, got.duplicates, got.missing
    )


async def _latency(hub: _Hub, backend: str, events: int, rate: float) -> Latency:
    [path] = hub.paths
    sent: dict[str, float] = {}
    start = time.monotonic()
    for n in range(events):
        delay = start + n / rate - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)
        event = hub.event()
        sent[event.event_id] = time.monotonic()
        await hub.publish(event)
    got = await hub.arrivals({(path, event_id) for event_id in sent}, within=30.0)
    samples = [
        (got.first[(path, event_id)] - at) * 1000
        for event_id, at in sent.items()
        if (path, event_id) in got.first
    ]
    return Latency(backend, tuple(sorted(samples)), got.duplicates, got.missing)


async def _redis_trouble(url: str) -> str | None:
    """Why Redis cannot be measured, or ``None`` when it answers."""
    try:
        from redis.asyncio import Redis
    except ImportError:
        return "the redis package is not installed (pip install 'gateway-kit[redis]')"
    client = Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        await client.ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await client.aclose()
    return None


async def _delete_prefix(url: str, prefix: str) -> None:
    from redis.asyncio import Redis

    async with Redis.from_url(url) as client:
        async for key in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(key)


async def _run(args: argparse.Namespace, receiver_url: str) -> None:
    prefix = f"gkbench:{uuid.uuid4().hex[:8]}:"
    throughput: list[Throughput] = []
    latency: list[Latency] = []
    notes = []
    async with (
        httpx.AsyncClient(base_url=receiver_url, trust_env=False) as receiver,
        anyio.TemporaryDirectory(prefix="gk-bench-") as workdir,
    ):
        for backend in args.backends:
            if backend == "redis" and (trouble := await _redis_trouble(args.redis_url)):
                notes.append(f"redis skipped: {args.redis_url} does not answer ({trouble})")
                print(notes[-1], file=sys.stderr)
                continue

            def storage(run: str, backend: str = backend) -> dict[str, str]:
                if backend == "sqlite":
                    return {"url": f"sqlite:///{Path(workdir) / run}.db"}
                if backend == "redis":
                    return {"url": args.redis_url, "redis_prefix": f"{prefix}{run}:"}
                return {"url": "memory://"}

            try:
                for webhooks in dict.fromkeys((1, args.fanout)):
                    events = max(1, args.events // webhooks)
                    run = f"{backend}-x{webhooks}"
                    print(f"{backend}: {events:,} events to {webhooks} webhook(s)", file=sys.stderr)
                    async with _hub(storage(run), args.set, receiver, run, webhooks) as hub:
                        throughput.append(await _throughput(hub, backend, events, args.within))
                print(
                    f"{backend}: {args.latency_events} events at {args.rate:g}/s", file=sys.stderr
                )
                run = f"{backend}-latency"
                async with _hub(storage(run), args.set, receiver, run, 1) as hub:
                    latency.append(await _latency(hub, backend, args.latency_events, args.rate))
            finally:
                if backend == "redis":
                    await _delete_prefix(args.redis_url, prefix)
    _report(args, throughput, latency, notes)


def _report(
    args: argparse.Namespace, throughput: list[Throughput], latency: list[Latency], notes: list[str]
) -> None:
    hooks = GatewayConfig.model_validate({"webhooks": args.set}).webhooks
    print(
        f"worker: concurrency {hooks.concurrency}, per_webhook_concurrency "
        f"{hooks.per_webhook_concurrency}, poll_interval_s {hooks.poll_interval_s:g}\n"
    )
    print(
        "Throughput: events published back to back; delivered/s from the first publish to\n"
        f"the last arrival; 'missing' had not arrived {args.within:g} s after the first publish\n"
        "(the run publishes nothing more after that either)\n"
    )
    print(
        "| backend | webhooks | events | deliveries | published/s | delivered/s | seconds "
        "| dup | missing |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in throughput:
        print(run.row())
    print(
        f"\nLatency: {args.latency_events} events at {args.rate:g}/s to one webhook, publish to "
        "first attempt arriving, ms\n"
    )
    print("| backend | p50 | p95 | p99 | max | dup | missing |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for lat in latency:
        print(lat.row())
    for note in notes:
        print(f"\n{note}")


def _setting(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def _backends(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or set(names) - set(BACKENDS):
        raise argparse.ArgumentTypeError(f"backends are among {', '.join(BACKENDS)}")
    return names


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench webhooks")
    parser.add_argument(
        "--events", type=int, default=1000, help="deliveries per throughput run (1000)"
    )
    parser.add_argument("--fanout", type=int, default=4, help="webhooks of the fan-out run (4)")
    parser.add_argument(
        "--within", type=float, default=8.0, help="seconds a throughput run waits at most (8)"
    )
    parser.add_argument("--latency-events", type=int, default=200, help="latency samples (200)")
    parser.add_argument("--rate", type=float, default=100.0, help="latency events/s (100)")
    parser.add_argument(
        "--backends", type=_backends, default=list(BACKENDS), help="comma-separated (all three)"
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("GATEWAY_KIT_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="the Redis to measure; keys go under a random prefix, then go away",
    )
    parser.add_argument(
        "--set",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a webhooks setting, e.g. --set per_webhook_concurrency=32 (repeatable)",
    )
    parser.add_argument("--serve", choices=["receiver"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.events, args.fanout, args.latency_events) < 1 or min(args.within, args.rate) <= 0:
        parser.error("counts, --within and --rate must be positive")
    if args.serve:
        return serve_receiver(args.port)
    args.set = dict(args.set)
    GatewayConfig.model_validate({"webhooks": args.set})  # a bad --set fails here, not later
    options = {}
    try:
        import uvloop  # noqa: F401

        options["use_uvloop"] = True  # as the gateway runs under uvicorn
    except ImportError:  # pragma: no cover - uvloop is part of the server extra
        pass
    port = free_port()
    with server_process(
        ["gateway_kit.bench", "webhooks", "--serve", "receiver", "--port", str(port)], port
    ):
        anyio.run(_run, args, f"http://127.0.0.1:{port}/", backend_options=options)
    return 0
