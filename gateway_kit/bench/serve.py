"""Benchmark ``gateway-kit serve`` as a user runs it: ``python -m gateway_kit.bench serve``.

In one run, against one fast mock upstream on loopback (the proxy benchmark's), it measures:

- ``direct``: the load generator straight to the mock upstream;
- ``forwarder (aiohttp)``: the proxy benchmark's bare Starlette + aiohttp forwarder;
- ``gateway-kit, no layers``: the proxy benchmark's gateway (no Auth, Limits or Budget, aiohttp);
- ``gateway-kit serve, sqlite`` and ``gateway-kit serve, redis``: the command line itself,
  ``python -m gateway_kit.cli serve --config FILE``, with uvicorn as the CLI sets it up (log
  level info, access log on; stdout, where it goes, is ``/dev/null``) and the configuration a
  production user writes (``_provision.write_config``): one OpenAI-compatible provider on the mock's
  ``/v1`` with the default transport, ``gpt-4o-mini`` (the price table knows it: Budget reserves
  and settles every request), a plan whose limits and budget are far above the load, Auth,
  Limits, Budget and the webhook worker on as by default, Guardian off (``bench guardian``
  measures it; its ``repeat`` rule would refuse the one request sent again and again; a
  baseline checkout from before Guardian gets the file without it), and as storage a fresh
  SQLite file or Redis under a unique prefix. Its workspace and key are made beforehand on the
  same storage by ``gateway-kit workspaces create --with-key --json``;
- ``gateway-kit serve, redis, 10k keys``: the same with 10,000 workspaces of one key each (the
  worst case for per-workspace caches), made beforehand by one asyncio program (the time it
  takes is printed); the requests rotate over every key and the warm-up sends each at least
  once, so first-touch misses are not measured (expiries of the key cache are).

It prints the proxy benchmark's table (with the server's CPU per request) and the ratios of the
issue: what each serve target adds to the forwarder's p50 at c=1 (target on Redis: at most
0.6 ms), its c=32 req/s against the forwarder's, and the 10k-key target's c=32 req/s against
the one-key Redis target's (target: at least 0.9x). ``--variants`` adds the Redis target with
one setting changed at a time (aiohttp transport, no access log, no webhook worker, then all
three), so that what each costs is measured, not guessed.

``--profile`` instead runs the Redis target (or ``--profile sqlite``) alone under load, at
``--profile-concurrency``, attached to ``--profiler``: py-spy (the default when installed:
where the CPU goes, by area and function), strace (system calls per request) or cProfile (the
server started under it); see ``gateway_kit.bench._profile``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from gateway_kit.bench._baseline import against_baseline, twins
from gateway_kit.bench._load import (
    build_request,
    cpu_seconds,
    delete_redis_prefix,
    free_port,
    run_load,
    server_process,
)
from gateway_kit.bench._profile import (
    attached,
    cprofile_command,
    py_spy_command,
    py_spy_path,
    strace_command,
    summarize_pstats,
    summarize_py_spy,
    summarize_strace,
)
from gateway_kit.bench._provision import (
    MODEL,
    PROVISIONING_TASKS,
    Setup,
    provision_many,
    provision_with_cli,
    write_config,
)
from gateway_kit.bench.proxy import (
    PATH,
    REQUEST_BODY,
    Target,
    TargetResult,
    add_load_options,
    as_json,
    compare,
    table,
)

SERVE = "gateway-kit serve"
BODY = json.dumps({**json.loads(REQUEST_BODY), "model": MODEL}).encode()
FORWARDER = "forwarder (aiohttp)"
NO_LAYERS = "gateway-kit, no layers"
#: The issue's targets: added p50 at c=1 on Redis (ms), and the 10k-key req/s ratio at c=32.
ADDED_P50_MS = 0.6
ROTATION_RATIO = 0.9


def setups(args: argparse.Namespace) -> list[Setup]:
    """The serve targets the options ask for, in the order they are measured."""
    chosen = [] if args.skip_sqlite else [Setup(f"{SERVE}, sqlite", redis=False)]
    if args.skip_redis:
        return chosen
    redis = Setup(f"{SERVE}, redis", redis=True)
    chosen.append(redis)
    if args.keys > 1:
        chosen.append(Setup(f"{redis.label}, {_count(args.keys)} keys", True, keys=args.keys))
    if args.variants:
        chosen += [
            Setup(f"{redis.label}, aiohttp", True, transport="aiohttp"),
            Setup(f"{redis.label}, no access log", True, log_level="warning"),
            Setup(f"{redis.label}, no worker", True, worker=False),
            Setup(
                f"{redis.label}, all three",
                True,
                transport="aiohttp",
                worker=False,
                log_level="warning",
            ),
        ]
    return chosen


def _count(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def serve_target(
    setup: Setup, args: argparse.Namespace, scratch: Path, upstream: str
) -> tuple[Target, float]:
    """Write the setup's configuration and provision its keys (seconds it took, returned too)."""
    port = free_port()
    storage = args.redis_url if setup.redis else f"sqlite:///{scratch / str(port)}.db"
    config = write_config(
        scratch / f"{port}.toml",
        setup,
        upstream=upstream,
        port=port,
        storage=storage,
        redis_prefix=f"{args.redis_prefix}{port}:",
    )
    started = time.perf_counter()
    keys = [provision_with_cli(config)] if setup.keys == 1 else provision_many(config, setup.keys)
    seconds = time.perf_counter() - started
    command = ["gateway_kit.cli", "serve", "--config", str(config)]
    if setup.log_level:
        command += ["--log-level", setup.log_level]
    requests = tuple(build_request(PATH, BODY, [("Authorization", f"Bearer {k}")]) for k in keys)
    return Target(setup.label, port, command, requests=requests), seconds


def _twin(target: Target, checkout: str) -> Target:
    """The baseline twin of a serve target; a checkout from before Guardian gets the same
    configuration without its ``[guardian]`` table (which it would refuse as unknown)."""
    twin = twins([target], checkout)[0]
    if (Path(checkout) / "gateway_kit" / "config" / "guardian.py").exists():
        return twin
    assert twin.command is not None
    command = list(twin.command)
    config = Path(command[command.index("--config") + 1])
    older = config.with_name(f"{twin.port}.toml")
    older.write_text(config.read_text().replace('\n\n[guardian]\nmode = "off"\n', "\n"))
    command[command.index("--config") + 1] = str(older)
    return replace(twin, command=command)


def baselines(upstream_port: int) -> list[Target]:
    """The mock upstream itself, the bare forwarder and the gateway with no layer (aiohttp)."""
    me = ["gateway_kit.bench", "proxy"]
    upstream = f"http://127.0.0.1:{upstream_port}"
    targets = [Target("direct", upstream_port)]
    for role, label in (("forwarder", FORWARDER), ("gateway", NO_LAYERS)):
        port = free_port()
        command = [*me, "--serve", role, "--port", str(port), "--upstream", upstream]
        targets.append(Target(label, port, [*command, "--transport", "aiohttp"]))
    return targets


def ratios(results: dict[str, TargetResult], chosen: list[Setup]) -> list[str]:
    """The issue's figures: added p50 at c=1, and req/s at c=32, against their baselines."""
    forwarder, bare = results[FORWARDER], results[NO_LAYERS]
    lines = [
        f"{NO_LAYERS}: {_added(bare, forwarder)} ms p50 over the forwarder at c=1; "
        f"{_ratio(bare, forwarder)}x its req/s at c=32"
    ]
    redis = results.get(f"{SERVE}, redis")
    for setup in chosen:
        result = results[setup.label]
        line = f"{setup.label}: {_added(result, forwarder)} ms p50 over the forwarder at c=1"
        if setup.label == f"{SERVE}, redis":
            line += f" (target <= {ADDED_P50_MS:.3f}): {_verdict(result, forwarder)}"
        line += f", {_added(result, bare)} over no layers; {_ratio(result, forwarder)}x the "
        line += "forwarder's req/s at c=32"
        if setup.keys > 1 and redis is not None:
            ratio = result.runs[32].rps / redis.runs[32].rps
            line += (
                f"; {ratio:.2f}x the one-key redis target's (target >= {ROTATION_RATIO:.2f}): "
                f"{'PASS' if ratio >= ROTATION_RATIO else 'FAIL'}"
            )
        elif redis is not None and setup.label.startswith(f"{redis.name}, "):
            line += f"; {_added(result, redis)} ms p50 at c=1 against {redis.name}"
        lines.append(line)
    return lines


def _added(result: TargetResult, base: TargetResult) -> str:
    return f"{result.runs[1].p50 - base.runs[1].p50:+.3f}"


def _ratio(result: TargetResult, base: TargetResult) -> str:
    return f"{result.runs[32].rps / base.runs[32].rps:.2f}"


def _verdict(result: TargetResult, forwarder: TargetResult) -> str:
    return "PASS" if result.runs[1].p50 - forwarder.runs[1].p50 <= ADDED_P50_MS else "FAIL"


def _errors(results: dict[str, TargetResult]) -> list[str]:
    return [
        f"WARNING: {name} answered {errors} request(s) with a status other than 200: "
        "its figures measure errors, not the proxy path"
        for name, result in results.items()
        if (errors := sum(run.errors for run in result.runs.values()))
    ]


@contextmanager
def _upstream_and_scratch(args: argparse.Namespace) -> Iterator[tuple[str, int, Path]]:
    """The mock upstream and a scratch directory; the run's Redis keys go away afterwards."""
    port = free_port()
    role = ["gateway_kit.bench", "proxy", "--serve", "upstream", "--port", str(port)]
    with (
        server_process(role, port),
        tempfile.TemporaryDirectory(prefix="gk-bench-serve-") as scratch,
    ):
        try:
            yield f"http://127.0.0.1:{port}", port, Path(scratch)
        finally:
            if not args.skip_redis:
                delete_redis_prefix(args.redis_url, args.redis_prefix)


def measure(args: argparse.Namespace) -> int:
    """Provision, start every target, measure them interleaved, print the table and ratios."""
    chosen = setups(args)
    notes = []
    with _upstream_and_scratch(args) as (upstream, upstream_port, scratch):
        targets = baselines(upstream_port)
        for setup in chosen:
            target, seconds = serve_target(setup, args, scratch, upstream)
            targets.append(target)
            if args.baseline:
                targets.append(_twin(target, args.baseline))
            if setup.keys > 1:
                notes.append(
                    f"{setup.label}: {setup.keys:,} workspaces and keys provisioned on Redis in "
                    f"{seconds:.1f} s (one Gateway, {PROVISIONING_TASKS} tasks)"
                )
                print(notes[-1], flush=True)
        results = compare(targets, args)
    if args.json:
        print(as_json(results))
        return 0
    print(table(list(results.values())))
    print()
    lines = [*ratios(results, chosen), *against_baseline(results), *notes, *_errors(results)]
    print("\n".join(lines))
    print(
        f"median of {args.rounds} round(s) of {args.requests_c1} requests at c=1 and "
        f"{args.requests_c32} at c=32; cpu/req: the server process's CPU ms per request"
    )
    return 0


def profile(args: argparse.Namespace) -> int:
    """Profile one serve target while the load runs; print where its time goes."""
    keys = args.profile_keys
    label = f"{SERVE}, {args.profile}" + (f", {_count(keys)} keys" if keys > 1 else "")
    setup = Setup(label, redis=args.profile == "redis", keys=keys)
    with _upstream_and_scratch(args) as (upstream, _, scratch):
        target, _ = serve_target(setup, args, scratch, upstream)
        assert target.command is not None
        output = scratch / "profile.out"
        command = list(target.command)
        if args.profiler == "cprofile":
            command = cprofile_command(command, output)
        # cProfile writes its file at exit, which SIGTERM skips (see server_process).
        stop = signal.SIGINT if args.profiler == "cprofile" else signal.SIGTERM
        with server_process(command, target.port, stop=stop) as pid:
            warmup = max(args.warmup, 8 * math.ceil(len(target.requests) / 8))
            run_load(target.port, target.requests, concurrency=8, requests=warmup)
            before = cpu_seconds(pid)
            with _profiler(args.profiler, pid, output):
                result = run_load(
                    target.port,
                    target.requests,
                    concurrency=args.profile_concurrency,
                    requests=args.profile_requests,
                )
            cpu_ms = 1000 * (cpu_seconds(pid) - before) / max(1, result.requests)
        # The server has exited: cProfile's file is written.
        if args.profiler == "py-spy":
            summary = summarize_py_spy(output)
        elif args.profiler == "strace":
            summary = summarize_strace(output, result.requests)
        else:
            summary = summarize_pstats(output)
        if args.profile_output:
            shutil.copyfile(output, args.profile_output)
    print(
        f"{setup.label} under {args.profiler}: {result.requests} requests at "
        f"c={result.concurrency}, p50 {result.p50:.3f} ms and {result.rps:.0f} req/s while "
        f"profiled, server CPU {cpu_ms:.3f} ms per request, {result.errors} error(s)\n"
    )
    print(summary)
    return 0


def _profiler(name: str, pid: int, output: Path) -> AbstractContextManager[None]:
    """py-spy and strace attach to the running server; cProfile was started with it."""
    if name == "py-spy":
        return attached(py_spy_command(pid, output), output)
    if name == "strace":
        return attached(strace_command(pid, output), output)
    return nullcontext()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench serve")
    add_load_options(parser)
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("GATEWAY_KIT_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="the Redis to measure; keys go under a random prefix, then go away",
    )
    parser.add_argument("--skip-redis", action="store_true", help="measure SQLite only")
    parser.add_argument("--skip-sqlite", action="store_true", help="measure Redis only")
    parser.add_argument(
        "--keys",
        type=int,
        default=10_000,
        help="keys (one workspace each) of the rotation target on Redis; 1 to skip it",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="add the Redis target with the transport, access log and worker changed",
    )
    parser.add_argument(
        "--profile",
        nargs="?",
        const="redis",
        choices=["redis", "sqlite"],
        help="profile this serve target (default redis) under load instead of comparing",
    )
    parser.add_argument(
        "--profiler",
        choices=["py-spy", "strace", "cprofile"],
        default="py-spy" if py_spy_path() else "cprofile",
        help="py-spy (sampling from outside; the default when installed), strace (system "
        "calls per request) or cProfile (inside the server)",
    )
    parser.add_argument("--profile-requests", type=int, default=5000, help="requests profiled")
    parser.add_argument("--profile-concurrency", type=int, default=1, help="while profiled")
    parser.add_argument(
        "--profile-keys", type=int, default=1, help="keys in rotation while profiled"
    )
    parser.add_argument(
        "--profile-output",
        metavar="FILE",
        help="also keep the profiler's output (py-spy: collapsed stacks, for flame graphs)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    args.redis_prefix = f"gkbench:{uuid.uuid4().hex[:8]}:"
    if args.profile == "redis" and args.skip_redis:
        parser.error("--profile redis needs Redis")
    return profile(args) if args.profile else measure(args)
