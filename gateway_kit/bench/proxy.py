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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway_kit.bench._load import (
    LoadResult,
    build_request,
    free_port,
    peak_rss_mib,
    run_load,
    server_process,
)

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


def _gateway_app(upstream: str, transport: str) -> Any:
    from gateway_kit import GatewayConfig, ModelConfig, ProviderConfig, create_app

    config = GatewayConfig(
        providers=(
            ProviderConfig(name="bench", base_url=f"{upstream}/v1", transport=transport),  # type: ignore[arg-type]
        ),
        models=(ModelConfig(name="bench-model", provider="bench"),),
    )
    return create_app(config)


def _serve(role: str, port: int, upstream: str, transport: str) -> int:
    import uvicorn

    if role == "upstream":
        app: Any = _upstream_app
    elif role == "forwarder":
        app = _forwarder_app(upstream, transport)
    else:
        app = _gateway_app(upstream, transport)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        access_log=False,
        loop="uvloop",
        http="httptools",
        lifespan="auto" if role == "upstream" else "on",
    )
    return 0


# -- the measurement ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetResult:
    name: str
    runs: dict[int, LoadResult]
    rss_mib: float


def _measure(port: int, pid: int | None, args: argparse.Namespace, name: str) -> TargetResult:
    request = build_request(PATH, REQUEST_BODY)
    run_load(port, request, concurrency=8, requests=args.warmup)
    runs = {}
    for concurrency in (1, 32):
        count = args.requests_c1 if concurrency == 1 else args.requests_c32
        results = [
            run_load(port, request, concurrency=concurrency, requests=count)
            for _ in range(args.rounds)
        ]
        # The round with the median throughput: robust against a noisy neighbour.
        results.sort(key=lambda r: r.rps)
        runs[concurrency] = results[len(results) // 2]
    rss = peak_rss_mib(pid) if pid is not None else 0.0
    return TargetResult(name, runs, rss)


def _table(results: Sequence[TargetResult]) -> str:
    header = (
        f"{'target':<22}{'c1 p50 ms':>10}{'c1 p99 ms':>10}{'c1 req/s':>10}"
        f"{'c32 p50 ms':>11}{'c32 p99 ms':>11}{'c32 req/s':>10}{'RSS MiB':>9}{'errors':>7}"
    )
    lines = [header, "-" * len(header)]
    for result in results:
        one, many = result.runs[1], result.runs[32]
        lines.append(
            f"{result.name:<22}{one.p50:>10.3f}{one.p99:>10.3f}{one.rps:>10.0f}"
            f"{many.p50:>11.3f}{many.p99:>11.3f}{many.rps:>10.0f}{result.rss_mib:>9.1f}"
            f"{one.errors + many.errors:>7}"
        )
    return "\n".join(lines)


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench proxy")
    parser.add_argument(
        "--serve", choices=["upstream", "forwarder", "gateway"], help=argparse.SUPPRESS
    )
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--transport", default="httpx", help=argparse.SUPPRESS)
    parser.add_argument("--requests-c1", type=int, default=2000, help="requests per round at c=1")
    parser.add_argument("--requests-c32", type=int, default=6400, help="requests per round at c=32")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median kept)")
    parser.add_argument("--warmup", type=int, default=500, help="warm-up requests per target")
    parser.add_argument(
        "--transports", default="httpx,aiohttp", help="upstream transports to compare"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.serve:
        return _serve(args.serve, args.port, args.upstream, args.transport)

    me = ["gateway_kit.bench", "proxy"]
    upstream_port = free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    results: dict[str, TargetResult] = {}
    with server_process([*me, "--serve", "upstream", "--port", str(upstream_port)], upstream_port):
        results["direct"] = _measure(upstream_port, None, args, "direct")
        for transport in args.transports.split(","):
            for role, label in (("forwarder", "forwarder"), ("gateway", "gateway-kit")):
                port = free_port()
                command = [*me, "--serve", role, "--port", str(port)]
                command += ["--upstream", upstream_url, "--transport", transport]
                with server_process(command, port) as pid:
                    name = f"{label} ({transport})"
                    results[name] = _measure(port, pid, args, name)
    if args.json:
        print(
            json.dumps(
                {
                    name: {
                        f"c{c}": {
                            "p50_ms": r.p50,
                            "p99_ms": r.p99,
                            "rps": r.rps,
                            "errors": r.errors,
                        }
                        for c, r in result.runs.items()
                    }
                    | {"peak_rss_mib": result.rss_mib}
                    for name, result in results.items()
                },
                indent=2,
            )
        )
        return 0
    print(_table(list(results.values())))
    print()
    for transport in args.transports.split(","):
        print("\n".join(_ratios(results, transport)))
    fastest = max(
        (r for n, r in results.items() if n.startswith("gateway-kit")), key=lambda r: r.runs[32].rps
    )
    print(
        f"best gateway-kit at c=32: {fastest.name}, {fastest.runs[32].rps:.0f} req/s, "
        f"median of {args.rounds} rounds; direct: {results['direct'].runs[32].rps:.0f} req/s"
    )
    return 0
