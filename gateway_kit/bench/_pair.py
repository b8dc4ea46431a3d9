"""Two gateways of this commit measured against each other, a layer off and on: started
side by side against the proxy benchmark's mock upstream (memory storage, Auth and Limits on),
pinned away from the load, loaded at c=1 in interleaved rounds whose order alternates, and the
layer's added p50, p99 and CPU judged against a target. Used by ``bench guardian``, ``bench
pii``, ``bench cache`` and ``bench observe`` (which runs one of the two from a baseline
commit)."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from gateway_kit.bench._conversation import Rotation
from gateway_kit.bench._load import cpu_seconds, free_port, run_load, server_process
from gateway_kit.bench.routing import Series
from gateway_kit.bench.routing import series_table as table

__all__ = [
    "Server",
    "added",
    "announced_rounds",
    "bench_args",
    "interleaved",
    "pinning",
    "start_pair",
    "table",
]


@dataclass(frozen=True, slots=True)
class Server:
    name: str
    port: int
    pid: int
    headers: tuple[tuple[str, str], ...]


def pinning() -> tuple[set[int], set[int]] | None:
    """Where the load (the client and the upstream) and the gateways run: one CPU each, so
    that neither the scheduler's moves nor the client's work land in a gateway's figures;
    ``None`` when there are fewer than two CPUs to pin to."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    usable = sorted(os.sched_getaffinity(0))
    return ({usable[0]}, {usable[1]}) if len(usable) >= 2 else None


def start_pair(
    stack: ExitStack,
    transport: str,
    targets: Sequence[tuple[str, list[str]]],
    *,
    checkouts: dict[str, str] | None = None,
) -> list[Server]:
    """The mock upstream and the gateways of ``targets`` (a name, and the options of ``proxy
    --serve gateway`` that turn its layer on), with this process and the upstream pinned to
    one CPU and the gateways to another; prints the machine's state. ``checkouts`` runs a
    target by name from another checkout (a baseline commit's code)."""
    cores, load = os.cpu_count(), os.getloadavg()[0]
    pins = pinning()
    pinned = (
        "not pinned (one CPU)"
        if pins is None
        else f"the client and the upstream pinned to CPU {min(pins[0])}, the gateways to "
        f"CPU {min(pins[1])}"
    )
    print(f"machine: {cores} CPUs, load average {load:.2f} at the start; {pinned}", flush=True)
    load_cpus, gateway_cpus = pins or (None, None)
    if load_cpus is not None:
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, load_cpus)
        stack.callback(os.sched_setaffinity, 0, mine)
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    role = ["gateway_kit.bench", "proxy", "--serve", "upstream", "--port", str(upstream_port)]
    stack.enter_context(server_process(role, upstream_port, cpus=load_cpus))
    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gk-pair-")))
    servers = []
    for name, extra in targets:
        port = free_port()
        key_file = scratch / f"{port}.key"
        command = ["gateway_kit.bench", "proxy", "--serve", "gateway", "--port", str(port)]
        command += ["--upstream", upstream, "--transport", transport, "--storage", "memory://"]
        command += ["--key-file", str(key_file), *extra]
        pythonpath = (checkouts or {}).get(name)
        pid = stack.enter_context(
            server_process(command, port, cpus=gateway_cpus, pythonpath=pythonpath)
        )
        key = key_file.read_text().strip()  # written during the start-up, done by now
        servers.append(Server(name, port, pid, (("Authorization", f"Bearer {key}"),)))
    return servers


def interleaved(
    servers: Sequence[Server],
    rotations: dict[str, Rotation] | dict[str, bytes],
    *,
    requests: int,
    rounds: int,
    warmup: int,
    concurrency: int = 1,
) -> dict[str, Series]:
    """A warm-up, then ``rounds`` rounds at ``concurrency``, the order reversed every round;
    each server's rotation carries on from run to run, so no request is sent twice (a server
    given one request, ``bytes``, sends it every time)."""
    series = {s.name: Series() for s in servers}
    offsets = dict.fromkeys(series, 0)
    for number in range(rounds + 1):  # round 0 is the warm-up
        for server in servers if number % 2 else servers[::-1]:
            done = series[server.name]
            before = cpu_seconds(server.pid)
            result = run_load(
                server.port,
                rotations[server.name],
                concurrency=concurrency,
                requests=requests if number else warmup,
                offset=offsets[server.name],
            )
            offsets[server.name] += result.requests
            if number == 0:
                done.warmup = result
                continue
            done.runs.append(result)
            done.cpu_seconds += cpu_seconds(server.pid) - before
    return series


def announced_rounds(
    servers: Sequence[Server],
    requests: dict[str, bytes],
    *,
    count: int,
    rounds: int,
    warmup: int,
    concurrency: int,
) -> dict[str, Series]:
    """``interleaved`` at ``concurrency``, saying what it runs first and printing the table."""
    print(
        f"At c={concurrency}: {rounds} interleaved rounds of {count} requests per target after "
        "a warm-up",
        flush=True,
    )
    series = interleaved(
        servers, requests, requests=count, rounds=rounds, warmup=warmup, concurrency=concurrency
    )
    print(table(series), flush=True)
    return series


def added(
    series: dict[str, Series], on: str, off: str, layer: str, target_ms: float
) -> tuple[list[str], bool]:
    """What ``layer`` adds: the p50 (pooled, and the rounds' paired differences), p99 and
    CPU per request of ``on`` against ``off``, judged against ``target_ms``; a failed request
    fails the target."""
    now, before = series[on], series[off]
    extra = now.pooled.p50 - before.pooled.p50
    paired = [a.p50 - b.p50 for a, b in zip(now.runs, before.runs, strict=True)]
    failed = now.pooled.errors + before.pooled.errors
    passed = extra <= target_ms and not failed
    lines = [
        f"{layer} adds {extra:+.3f} ms p50 (rounds: median {statistics.median(paired):+.3f}, "
        f"{min(paired):+.3f} to {max(paired):+.3f}), "
        f"{now.pooled.p99 - before.pooled.p99:+.3f} ms p99, "
        f"{now.cpu_ms - before.cpu_ms:+.3f} ms of the gateway's CPU per request; "
        f"target <= {target_ms:.3f} ms p50: {'PASS' if passed else 'FAIL'}"
    ]
    lines += [
        f"{name}: {done.pooled.errors} requests failed{done.failures()}"
        for name, done in series.items()
        if done.pooled.errors
    ]
    return lines, passed


def bench_args(
    name: str, argv: list[str], full: dict[str, int], quick: dict[str, int]
) -> argparse.Namespace:
    """The options of ``python -m gateway_kit.bench <name>``: ``--transport`` and ``--quick``,
    with the run's sizes (``full``, or ``quick`` with ``--quick``) set on the namespace."""
    parser = argparse.ArgumentParser(prog=f"python -m gateway_kit.bench {name}")
    parser.add_argument(
        "--transport", default="auto", help="the provider's transport (default: auto, as users)"
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    for size, default in (quick if args.quick else full).items():
        setattr(args, size, default)
    return args
