"""Benchmark the proxy path: ``python -m gateway_kit.bench proxy``.

In one run, against one fast mock upstream on loopback (uvicorn, raw ASGI, a fixed JSON
answer), it measures:

- ``direct``: the load generator straight to the mock upstream;
- ``forwarder``: a bare Starlette + httpx forwarder (reads the body, POSTs it upstream,
  returns the answer), the floor any Python proxy pays;
- ``gateway-kit``: the standalone app with no policy layer;

each over both upstream transports (``httpx`` and ``aiohttp``), at concurrency 1 and 32, and
prints p50/p99 latency, requests/s, the server's peak RSS and the ratios that matter: the
gateway's added p50 over the forwarder at concurrency 1, and its requests/s relative to the
forwarder at concurrency 32. Every server runs in its own process with one uvicorn worker.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway_kit.bench._baseline import against_baseline, twins
from gateway_kit.bench._load import (
    LoadResult,
    build_request,
    cpu_seconds,
    free_port,
    peak_rss_mib,
    run_load,
    server_process,
)

if TYPE_CHECKING:
    from gateway_kit import GatewayConfig

PATH = "/v1/chat/completions"
REQUEST_BODY = json.dumps(
    {
        "model": "bench-model",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Summarise the plot of Hamlet in one sentence."},
        ],
        "temperature": 0.2,
        "max_tokens": 64,
    }
).encode()
RESPONSE_BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "A prince avenges his father's murder and most of the court dies.",
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 28, "completion_tokens": 14, "total_tokens": 42},
    }
).encode()


# -- the servers (each runs in its own process) -------------------------------------------------


async def _upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(RESPONSE_BODY)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": RESPONSE_BODY})


def _forwarder_app(upstream: str, transport: str) -> Any:
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from gateway_kit.gateway import create_http_client

    client = create_http_client(transport=transport)
    url = f"{upstream}/v1/chat/completions"

    async def forward(request: Request) -> Response:
        answer = await client.post(
            url, content=await request.body(), headers={"content-type": "application/json"}
        )
        return Response(answer.content, answer.status_code, media_type="application/json")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with client:
            yield

    return Starlette(routes=[Route(PATH, forward, methods=["POST"])], lifespan=lifespan)


#: ``--guardian``: every rule on (the default actions) with thresholds far above the load, so
#: that every rule is evaluated on every request and none refuses one. ``context_size``,
#: ``tool_loop`` and ``context_growth`` keep their defaults: the benchmarks' requests (a prompt
#: far below the context window, no tool call repeated, a user message within the last ten
#: assistant turns) never trip them.
GUARDIAN_FAR_ABOVE_THE_LOAD: dict[str, Any] = {
    "mode": "enforce",
    "rules": {
        "repeat": {"throttle_at": 10**9, "block_at": 10**9},
        "conversation_steps": {"max_steps": 10**9},
        "spend_spike": {"floor_usd": 10**9},
    },
}


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    """The configuration of the ``--serve gateway`` role (see ``_gateway_app``)."""
    from gateway_kit import GatewayConfig

    # --no-auth: Auth and Limits off even with --key-file (the key is made and sent, unread).
    keyed = bool(args.key_file) and not getattr(args, "no_auth", False)
    return GatewayConfig.model_validate(
        {
            "providers": [
                {"name": "bench", "base_url": f"{args.upstream}/v1", "transport": args.transport}
            ],
            "models": [
                {
                    "name": "bench-model",
                    "provider": "bench",
                    **(
                        {"price": {"input_usd_per_mtok": 1, "output_usd_per_mtok": 2}}
                        if args.budget
                        else {}
                    ),
                }
            ],
            "storage": {"url": args.storage, "redis_prefix": args.redis_prefix},
            "auth": {"mode": "enforce" if keyed else "off"},
            "limits": {"mode": "enforce" if keyed else "off"},
            # Limits far above the load: every request pays the checks, none is refused
            # (unless --included-requests puts the quota within it).
            "plans": {
                "bench": {
                    "included_requests": getattr(args, "included_requests", 10**12),
                    "burst_limit_rpm": 10**9,
                    **({"budget_usd": 10**8} if args.budget else {}),
                }
            },
            "budget": {"mode": "enforce" if args.budget else "off"},
            # Guardian is measured by `bench guardian` (which passes --guardian).
            "guardian": GUARDIAN_FAR_ABOVE_THE_LOAD if args.guardian else {"mode": "off"},
            # PII masking is measured by `bench pii` (which passes --pii).
            "pii": {"mode": "enforce" if getattr(args, "pii", False) else "off"},
            # The answer cache is measured by `bench cache` (which passes --cache).
            "cache": {"mode": "enforce" if getattr(args, "cache", False) else "off"},
            # Observability is measured by `bench observe` (which passes --metrics; the request
            # log is on by default, as for users).
            **(
                {"metrics": {"enabled": True, "access": "public"}}
                if getattr(args, "metrics", False)
                else {}
            ),
            "default_plan": "bench",
        }
    )


def _gateway_app(args: argparse.Namespace) -> Any:
    """gateway-kit on the mock upstream. With ``--key-file`` Auth and Limits are on: the
    process makes a workspace and key at start-up and writes the key there for the load
    (``--no-auth`` keeps them off all the same: the key is sent and not read). With
    ``--budget`` the model is priced and the plan has a cap far above the load, so Budget
    reserves and settles every request; without it, Budget is off. With ``--guardian`` (and
    Auth on) Guardian evaluates every rule on every request, refusing none; without it, it is
    off."""
    import anyio

    from gateway_kit import Gateway, create_app

    gateway = Gateway(gateway_config(args))
    inner = create_app(gateway=gateway)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await inner(scope, receive, send)
            return
        await receive()  # lifespan.startup
        async with gateway:
            if args.key_file:
                workspace = await gateway.workspaces.create("bench@example.com")
                made = await gateway.keys.create(workspace.id)
                await anyio.Path(args.key_file).write_text(made.secret)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    return app


def serve(args: argparse.Namespace) -> int:
    """Run one benchmark server (a role) in this process."""
    import uvicorn

    if args.serve == "upstream":
        app: Any = _upstream_app
    elif args.serve == "forwarder":
        app = _forwarder_app(args.upstream, args.transport)
    else:
        app = _gateway_app(args)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="error",
        access_log=False,
        loop="uvloop",
        http="httptools",
        lifespan="auto" if args.serve == "upstream" else "on",
    )
    return 0


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """The hidden options a benchmark server process is started with."""
    hidden = argparse.SUPPRESS
    parser.add_argument("--serve", choices=["upstream", "forwarder", "gateway"], help=hidden)
    parser.add_argument("--port", type=int, default=0, help=hidden)
    parser.add_argument("--upstream", default="", help=hidden)
    parser.add_argument("--transport", default="httpx", help=hidden)
    parser.add_argument("--storage", default="memory://", help=hidden)
    parser.add_argument("--redis-prefix", default="gk:", help=hidden)
    parser.add_argument("--key-file", default="", help=hidden)
    parser.add_argument("--budget", action="store_true", help=hidden)
    parser.add_argument("--guardian", action="store_true", help=hidden)
    parser.add_argument("--pii", action="store_true", help=hidden)
    parser.add_argument("--cache", action="store_true", help=hidden)
    parser.add_argument("--metrics", action="store_true", help=hidden)
    parser.add_argument("--no-auth", action="store_true", help=hidden)
    parser.add_argument("--included-requests", type=int, default=10**12, help=hidden)


# -- the measurement ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetResult:
    name: str
    runs: dict[int, LoadResult]
    rss_mib: float
    #: The server's CPU time per request (all its threads), in ms, by concurrency; 0 unknown.
    cpu_ms: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """One thing to measure: a server to start (``command``), or one already running."""

    name: str
    port: int
    command: Sequence[str] | None = None
    #: A file the server writes its API key to at start-up (Auth on).
    key_file: Path | None = None
    #: Prebuilt requests to rotate through (one per API key, say) instead of the default one.
    requests: tuple[bytes, ...] = ()
    #: A checkout whose ``gateway_kit`` the server runs (a baseline); ``None``: this one.
    pythonpath: str | None = None


def _requests(target: Target) -> tuple[bytes, ...]:
    if target.requests:
        return target.requests
    headers = []
    if target.key_file is not None:  # written during the server's start-up, done by now
        headers.append(("Authorization", f"Bearer {target.key_file.read_text().strip()}"))
    return (build_request(PATH, REQUEST_BODY, headers),)


def compare(targets: Sequence[Target], args: argparse.Namespace) -> dict[str, TargetResult]:
    """Start every target, then measure them round by round, interleaved.

    Interleaving (A, B, C, A, B, C...) spreads the machine's drift over all targets instead
    of handing it to whichever ran last; each figure is the round with the median req/s. The
    warm-up sends every rotating request at least once, and the rotation carries on from run
    to run, so first-touch misses (of a key cache, say) are never measured.
    """
    warmup_concurrency = 8
    with ExitStack() as stack:
        pids = {
            t.name: stack.enter_context(server_process(t.command, t.port, pythonpath=t.pythonpath))
            if t.command
            else None
            for t in targets
        }
        requests = {t.name: _requests(t) for t in targets}
        offsets = dict.fromkeys(requests, 0)
        for t in targets:
            # Each connection sends at least its share of the rotation: all are touched.
            share = math.ceil(len(requests[t.name]) / warmup_concurrency)
            count = max(args.warmup, warmup_concurrency * share)
            run_load(t.port, requests[t.name], concurrency=warmup_concurrency, requests=count)
        samples: dict[str, dict[int, list[LoadResult]]] = {t.name: {1: [], 32: []} for t in targets}
        cpu = {t.name: {1: 0.0, 32: 0.0} for t in targets}
        for _ in range(args.rounds):
            for concurrency in (1, 32):
                count = args.requests_c1 if concurrency == 1 else args.requests_c32
                for t in targets:
                    pid = pids[t.name]
                    before = cpu_seconds(pid) if pid is not None else 0.0
                    result = run_load(
                        t.port,
                        requests[t.name],
                        concurrency=concurrency,
                        requests=count,
                        offset=offsets[t.name],
                    )
                    if pid is not None:
                        cpu[t.name][concurrency] += cpu_seconds(pid) - before
                    offsets[t.name] += result.requests
                    samples[t.name][concurrency].append(result)
        rss = {name: peak_rss_mib(pid) if pid is not None else 0.0 for name, pid in pids.items()}
    results = {}
    for name, runs in samples.items():
        medians = {c: sorted(rs, key=lambda r: r.rps)[len(rs) // 2] for c, rs in runs.items()}
        sent = {c: sum(r.requests for r in rs) for c, rs in runs.items()}
        cpu_ms = {c: 1000 * cpu[name][c] / sent[c] if sent[c] else 0.0 for c in runs}
        results[name] = TargetResult(name, medians, rss[name], cpu_ms)
    return results


def table(results: Sequence[TargetResult]) -> str:
    """p50/p99/req-s at c=1 and c=32, peak RSS, and the server's CPU ms per request."""
    width = max(22, *(len(r.name) + 2 for r in results))
    header = (
        f"{'target':<{width}}{'c1 p50 ms':>10}{'c1 p99 ms':>10}{'c1 req/s':>10}"
        f"{'c32 p50 ms':>11}{'c32 p99 ms':>11}{'c32 req/s':>10}{'RSS MiB':>9}"
        f"{'cpu/req c1':>11}{'c32':>6}{'errors':>7}"
    )
    lines = [header, "-" * len(header)]
    for result in results:
        one, many = result.runs[1], result.runs[32]
        cpu = result.cpu_ms
        lines.append(
            f"{result.name:<{width}}{one.p50:>10.3f}{one.p99:>10.3f}{one.rps:>10.0f}"
            f"{many.p50:>11.3f}{many.p99:>11.3f}{many.rps:>10.0f}{result.rss_mib:>9.1f}"
            f"{_cpu(cpu.get(1, 0.0)):>11}{_cpu(cpu.get(32, 0.0)):>6}"
            f"{one.errors + many.errors:>7}"
        )
    return "\n".join(lines)


def _cpu(ms: float) -> str:
    return f"{ms:.2f}" if ms else "-"


def as_json(results: dict[str, TargetResult]) -> str:
    return json.dumps(
        {
            name: {
                f"c{c}": {
                    "p50_ms": r.p50,
                    "p99_ms": r.p99,
                    "rps": r.rps,
                    "errors": r.errors,
                    "server_cpu_ms_per_request": result.cpu_ms.get(c, 0.0),
                }
                for c, r in result.runs.items()
            }
            | {"peak_rss_mib": result.rss_mib}
            for name, result in results.items()
        },
        indent=2,
    )


def _ratios(results: dict[str, TargetResult], transport: str) -> list[str]:
    forwarder = results[f"forwarder ({transport})"]
    gateway = results[f"gateway-kit ({transport})"]
    added = gateway.runs[1].p50 - forwarder.runs[1].p50
    ratio = gateway.runs[32].rps / forwarder.runs[32].rps
    return [
        f"{transport}: gateway-kit adds {added:+.3f} ms p50 over the forwarder at c=1 "
        f"(target <= 0.300): {'PASS' if added <= 0.3 else 'FAIL'}",
        f"{transport}: gateway-kit reaches {ratio:.2f}x the forwarder's req/s at c=32 "
        f"(target >= 0.90): {'PASS' if ratio >= 0.9 else 'FAIL'}",
    ]


def add_load_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests-c1", type=int, default=2000, help="requests per round at c=1")
    parser.add_argument("--requests-c32", type=int, default=6400, help="requests per round at c=32")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median kept)")
    parser.add_argument("--warmup", type=int, default=500, help="warm-up requests per target")
    parser.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="also run each gateway-kit target from this checkout of another commit (git "
        "worktree add /tmp/base <commit>), interleaved, and compare",
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench proxy")
    add_server_options(parser)
    add_load_options(parser)
    parser.add_argument(
        "--transports", default="httpx,aiohttp", help="upstream transports to compare"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args)

    me = ["gateway_kit.bench", "proxy"]
    upstream_port = free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    targets = [Target("direct", upstream_port)]
    for transport in args.transports.split(","):
        for role, label in (("forwarder", "forwarder"), ("gateway", "gateway-kit")):
            port = free_port()
            command = [*me, "--serve", role, "--port", str(port)]
            command += ["--upstream", upstream_url, "--transport", transport]
            targets.append(Target(f"{label} ({transport})", port, command))
    if args.baseline:
        targets += twins([t for t in targets if t.name.startswith("gateway-kit")], args.baseline)
    with server_process([*me, "--serve", "upstream", "--port", str(upstream_port)], upstream_port):
        results = compare(targets, args)
    if args.json:
        print(as_json(results))
        return 0
    print(table(list(results.values())))
    print()
    for transport in args.transports.split(","):
        print("\n".join(_ratios(results, transport)))
    print("\n".join(against_baseline(results)))
    fastest = max(
        (r for n, r in results.items() if n.startswith("gateway-kit")), key=lambda r: r.runs[32].rps
    )
    print(
        f"best gateway-kit at c=32: {fastest.name}, {fastest.runs[32].rps:.0f} req/s, "
        f"median of {args.rounds} rounds; direct: {results['direct'].runs[32].rps:.0f} req/s"
    )
    return 0
