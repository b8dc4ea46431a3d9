"""Benchmark the router: ``python -m gateway_kit.bench routing [--quick]``.

Two targets of the routing issue, measured in one run against the proxy benchmark's fast mock
upstream (uvicorn, raw ASGI, a fixed OpenAI-format answer), every server in its own process:

1. **A healthy single deployment at c=1**: the proxy benchmark's gateway (one model on one
   provider, Auth, Limits and Budget off, memory storage) against its twin from the commit
   before the router (``--baseline CHECKOUT``, by default a temporary git worktree of
   ``--baseline-commit``), in interleaved rounds whose order alternates, so drift falls on both.
   Target: the router adds at most 0.05 ms to the p50 (of every measured request).
2. **One of two deployments failing every call, at c=32**: a model with two deployments of
   weight 1 on two providers, with the default routing settings, in three setups measured in
   interleaved rounds: both on the mock (healthy), the second on a loopback port held bound
   but never listening (connection refused), or on a server answering every call 503 at once.
   Target:
   each failing setup keeps at least 80 % of the healthy req/s, every request answered 200 by
   the healthy deployment. The warm-up (where the failing deployment trips) is shown apart.

Calls that reached the failing deployment are counted from outside the gateway: the 503 server
counts them, and refused connections are the kernel's TCP ``AttemptFails`` counter (this
network namespace) read around each of the refused setup's own runs. Failed requests are shown
with their statuses and the rounds they fell in.

The default run takes about 80 s on two cores, ``--quick`` about 10 s.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

from gateway_kit.bench._baseline import twins, worktree
from gateway_kit.bench._load import (
    LoadResult,
    build_request,
    cpu_seconds,
    free_port,
    run_load,
    server_process,
)
from gateway_kit.bench._receiver import serve_asgi
from gateway_kit.bench.proxy import PATH, REQUEST_BODY, Target

#: The commit before the router landed.
BEFORE_ROUTER = "7460a35"
#: The issue's targets: added p50 at c=1 (ms), and the failing setups' share of healthy req/s.
ADDED_P50_MS = 0.05
FAILING_RATIO = 0.8
ROUTER, BEFORE = "gateway-kit", "gateway-kit, before the router"
HEALTHY, REFUSED, ANSWERS_503 = "both healthy", "one refused", "one answering 503"
SIZES = {
    "requests_c1": "requests per target and round at c=1",
    "rounds_c1": "rounds at c=1",
    "requests_c32": "requests per target and round at c=32",
    "rounds_c32": "rounds at c=32",
    "warmup": "warm-up requests per target",
}
FULL = {"requests_c1": 2000, "rounds_c1": 12, "requests_c32": 8000, "rounds_c32": 6, "warmup": 1000}
QUICK = {"requests_c1": 300, "rounds_c1": 3, "requests_c32": 1600, "rounds_c32": 2, "warmup": 300}

Calls = Callable[[], int]


# -- the servers this benchmark adds (each runs in its own process) -----------------------------


def _deployments_app(args: argparse.Namespace) -> Any:
    """gateway-kit serving one model from two deployments of weight 1: the mock upstream's, and
    ``--second``'s (the mock again, a dead port or the 503 server)."""
    from gateway_kit import GatewayConfig, create_app

    providers = [
        {"name": name, "base_url": f"{root}/v1", "transport": args.transport}
        for name, root in (("first", args.upstream), ("second", args.second))
    ]
    deployments = [{"provider": p["name"], "weight": 1} for p in providers]
    off = {"mode": "off"}
    config = GatewayConfig.model_validate(
        {
            "providers": providers,
            "models": [{"name": "bench-model", "deployments": deployments}],
            "storage": {"url": "memory://"},
            # Guardian is measured by `bench guardian`.
            **dict.fromkeys(("auth", "limits", "budget", "guardian"), off),
        }
    )
    return create_app(config)


class _Overloaded:
    """Answers every call 503 at once (no ``Retry-After``) and counts them; ``GET /_calls``
    says how many so far."""

    BODY = b'{"error": {"message": "overloaded", "type": "server_error"}}'

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        if scope["path"] == "/_calls":
            status, body = 200, str(self.calls).encode()
        else:
            self.calls += 1
            status, body = 503, self.BODY
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _answered_503(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_calls", timeout=5) as answer:
        return int(answer.read())


def _refused_connects() -> int:
    """Connection attempts refused or failed in this network namespace (TCP AttemptFails)."""
    with open("/proc/net/snmp") as snmp:
        names, values = (line.split() for line in snmp if line.startswith("Tcp:"))
    return int(values[names.index("AttemptFails")])


# -- the measurement ----------------------------------------------------------------------------


@dataclass(slots=True)
class Series:
    """Every run of one target, and the calls its failing deployment saw during them."""

    warmup: LoadResult | None = None
    runs: list[LoadResult] = field(default_factory=list)
    cpu_seconds: float = 0.0
    warmup_calls: int = 0
    calls: int = 0

    @property
    def pooled(self) -> LoadResult:
        """The measured runs as one: every latency, requests over seconds."""
        runs = self.runs
        return LoadResult(
            runs[0].concurrency,
            sum(r.requests for r in runs),
            sum(r.errors for r in runs),
            sum(r.seconds for r in runs),
            tuple(chain.from_iterable(r.latencies for r in runs)),
            tuple(chain.from_iterable(r.error_statuses for r in runs)),
        )

    def failures(self) -> str:
        """The statuses of the failed requests and the rounds they failed in; "" when none."""
        statuses = Counter(self.pooled.error_statuses)
        if not statuses:
            return ""
        counts = ", ".join(f"{n} x {status}" for status, n in sorted(statuses.items()))
        rounds = ", ".join(str(i) for i, run in enumerate(self.runs, 1) if run.errors)
        return f" ({counts}; in round(s) {rounds})"

    @property
    def cpu_ms(self) -> float:
        """The server's CPU time per measured request, in ms."""
        return 1000 * self.cpu_seconds / max(1, self.pooled.requests)


def interleaved(
    targets: Sequence[Target],
    counters: dict[str, Calls],
    *,
    concurrency: int,
    requests: int,
    rounds: int,
    warmup: int,
) -> dict[str, Series]:
    """Start the targets, warm each up, then measure them round by round; the order reverses
    every round so that neither the drift nor going first favours one of them."""
    request = build_request(PATH, REQUEST_BODY)
    series = {t.name: Series() for t in targets}
    with ExitStack() as stack:
        pids = {}
        for t in targets:
            assert t.command is not None
            process = server_process(t.command, t.port, pythonpath=t.pythonpath)
            pids[t.name] = stack.enter_context(process)
        for number in range(rounds + 1):  # round 0 is the warm-up
            for t in targets if number % 2 else targets[::-1]:
                done, count = series[t.name], counters.get(t.name, lambda: 0)
                calls, cpu = count(), cpu_seconds(pids[t.name])
                size = requests if number else warmup
                result = run_load(t.port, request, concurrency=concurrency, requests=size)
                calls = count() - calls
                if number == 0:
                    done.warmup, done.warmup_calls = result, calls
                    continue
                done.runs.append(result)
                done.calls += calls
                done.cpu_seconds += cpu_seconds(pids[t.name]) - cpu
    return series


def _single(args: argparse.Namespace, upstream: str, checkout: str) -> tuple[list[str], bool]:
    """Target 1: the router's cost on a healthy single deployment at c=1."""
    port = free_port()
    command = ["gateway_kit.bench", "proxy", "--serve", "gateway", "--port", str(port)]
    new = Target(ROUTER, port, [*command, "--upstream", upstream, "--transport", args.transport])
    series = interleaved(
        [new, replace(twins([new], checkout)[0], name=BEFORE)],
        {},
        concurrency=1,
        requests=args.requests_c1,
        rounds=args.rounds_c1,
        warmup=args.warmup,
    )
    now, before = series[ROUTER], series[BEFORE]
    added = now.pooled.p50 - before.pooled.p50
    paired = [a.p50 - b.p50 for a, b in zip(now.runs, before.runs, strict=True)]
    passed = added <= ADDED_P50_MS
    lines = [
        f"1. A healthy single deployment at c=1: {args.rounds_c1} interleaved rounds of "
        f"{args.requests_c1} requests per target (transport {args.transport}); baseline: "
        f"{checkout}",
        series_table({ROUTER: now, f"{BEFORE} ({args.baseline_commit})": before}),
        f"the router adds {added:+.3f} ms p50 (rounds: median {statistics.median(paired):+.3f}, "
        f"{min(paired):+.3f} to {max(paired):+.3f}); p99 {_delta(now, before, 99)} ms; "
        f"target <= {ADDED_P50_MS:.3f} ms: {'PASS' if passed else 'FAIL'}",
    ]
    lines += [
        f"{name}: {done.pooled.errors} requests failed{done.failures()}"
        for name, done in series.items()
        if done.pooled.errors
    ]
    return lines, passed


def _failing(args: argparse.Namespace, upstream: str) -> tuple[list[str], bool]:
    """Target 2: req/s at c=32 with one of two deployments failing every call."""
    # The dead port stays bound without listening: connections to it are refused, and no
    # server (nor a connection's own end, looping back to itself) can take it meanwhile.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    overloaded = free_port()
    second_roots = {
        HEALTHY: upstream,
        REFUSED: f"http://127.0.0.1:{dead.getsockname()[1]}",
        ANSWERS_503: f"http://127.0.0.1:{overloaded}",
    }
    targets = []
    for name, second in second_roots.items():
        port = free_port()
        command = ["gateway_kit.bench", "routing", "--serve", "deployments", "--port", str(port)]
        command += ["--upstream", upstream, "--second", second, "--transport", args.transport]
        targets.append(Target(name, port, command))
    counters = {REFUSED: _refused_connects, ANSWERS_503: lambda: _answered_503(overloaded)}
    role = ["gateway_kit.bench", "routing", "--serve", "overloaded", "--port", str(overloaded)]
    with dead, server_process(role, overloaded):
        series = interleaved(
            targets,
            counters,
            concurrency=32,
            requests=args.requests_c32,
            rounds=args.rounds_c32,
            warmup=args.warmup,
        )
    healthy = series[HEALTHY].pooled
    lines = [
        f"2. One of two deployments (weight 1 each) failing every call, at c=32: "
        f"{args.rounds_c32} interleaved rounds of {args.requests_c32} requests per target after "
        f"a warm-up of {args.warmup}; default routing settings (retries 1, allowed_fails 3, "
        "cooldown_s 30)",
        series_table(series),
    ]
    passed = True
    if healthy.errors:
        lines.append(f"{HEALTHY}: {healthy.errors} requests failed{series[HEALTHY].failures()}")
    for name in (REFUSED, ANSWERS_503):
        failing = series[name]
        pooled = failing.pooled
        ratio = pooled.rps / healthy.rps
        paired = [f.rps / h.rps for f, h in zip(failing.runs, series[HEALTHY].runs, strict=True)]
        ok = ratio >= FAILING_RATIO and pooled.errors == 0
        passed = passed and ok
        warm = failing.warmup
        assert warm is not None
        lines += [
            f"{name}: {ratio:.2f}x the healthy req/s (rounds {min(paired):.2f} to "
            f"{max(paired):.2f}), {pooled.errors} of {pooled.requests} requests failed"
            f"{failing.failures()}; target "
            f">= {FAILING_RATIO:.2f}x and none failed: {'PASS' if ok else 'FAIL'}",
            f"  calls that reached the failing deployment: {failing.calls} while measured, "
            f"{failing.warmup_calls} in the warm-up ({warm.requests} requests, {warm.errors} "
            f"failed, {warm.rps:.0f} req/s, p99 {warm.p99:.1f} ms, slowest "
            f"{warm.percentile(100):.1f} ms)",
        ]
    return lines, passed


def series_table(series: dict[str, Series]) -> str:
    """p50/p99/req/s of every measured request, server CPU per request, failed requests."""
    width = max(len(name) for name in series) + 2
    header = f"{'target':<{width}}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>8}{'cpu/req ms':>12}"
    lines = [header + f"{'failed':>8}", "-" * (len(header) + 8)]
    for name, done in series.items():
        r = done.pooled
        lines.append(
            f"{name:<{width}}{r.p50:>9.3f}{r.p99:>9.3f}{r.rps:>8.0f}{done.cpu_ms:>12.3f}"
            f"{r.errors:>8}"
        )
    return "\n".join(lines)


def _delta(now: Series, before: Series, percentile: float) -> str:
    return f"{now.pooled.percentile(percentile) - before.pooled.percentile(percentile):+.3f}"


def measure(args: argparse.Namespace) -> int:
    cores, load = os.cpu_count(), os.getloadavg()[0]
    print(f"machine: {cores} CPUs, load average {load:.2f} at the start", flush=True)
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    role = ["gateway_kit.bench", "proxy", "--serve", "upstream", "--port", str(upstream_port)]
    verdicts = []
    with ExitStack() as stack:
        stack.enter_context(server_process(role, upstream_port))
        if args.only in (None, "single"):
            checkout = args.baseline or stack.enter_context(worktree(args.baseline_commit))
            lines, passed = _single(args, upstream, checkout)
            print("\n".join(lines), end="\n\n", flush=True)
            verdicts.append(passed)
        if args.only in (None, "failing"):
            lines, passed = _failing(args, upstream)
            print("\n".join(lines), end="\n\n", flush=True)
            verdicts.append(passed)
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end; p50/p99 and req/s pool every "
        "measured request of a target; cpu/req: the gateway process's CPU ms per request"
    )
    return 0 if all(verdicts) else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench routing")
    hidden = argparse.SUPPRESS
    parser.add_argument("--serve", choices=["deployments", "overloaded"], help=hidden)
    parser.add_argument("--port", type=int, default=0, help=hidden)
    parser.add_argument("--upstream", default="", help=hidden)
    parser.add_argument("--second", default="", help=hidden)
    parser.add_argument(
        "--transport", default="auto", help="the providers' transport (default: auto, as users)"
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--only", choices=["single", "failing"], help="measure one target only")
    parser.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="a checkout of the commit before the router (default: a temporary git worktree "
        "of --baseline-commit)",
    )
    parser.add_argument(
        "--baseline-commit", default=BEFORE_ROUTER, help="the commit before the router"
    )
    for name, what in SIZES.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            help=f"{what} (default {FULL[name]}, with --quick {QUICK[name]})",
        )
    args = parser.parse_args(argv)
    if args.serve == "deployments":
        return serve_asgi(_deployments_app(args), args.port, lifespan="on")
    if args.serve == "overloaded":
        return serve_asgi(_Overloaded(), args.port)
    for name, default in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return measure(args)
