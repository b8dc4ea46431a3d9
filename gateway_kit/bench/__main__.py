"""Run a benchmark: ``python -m gateway_kit.bench <name> [options]``."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "proxy": "the proxy path: direct, a bare Starlette+httpx forwarder, gateway-kit",
    "layers": "what Auth + Limits add, on memory and on Redis storage",
    "serve": "`gateway-kit serve` as a user runs it (SQLite, Redis, 10k keys) against the floor",
    "storage": "storage operations per second per backend, round trips per admission",
    "routing": "the router's cost on a healthy deployment, req/s with one deployment failing",
    "webhooks": "webhook deliveries per second and publish-to-arrival latency per backend",
    "guardian": "what Guardian adds for a 2 KB prompt and a 200 KB agent conversation",
    "pii": "what PII masking and restore add for a 2 KB prompt, a 50 KB conversation, a stream",
    "pii_corpus": "PII detection's precision and recall per kind on a labelled corpus",
    "cache": "an exact hit in-process, and hits against misses in req/s at c=32",
    "observe": "what the request log and metrics add against the commit before them; memory",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"} or args[0] not in BENCHMARKS:
        print("usage: python -m gateway_kit.bench <name> [options]\n\nbenchmarks:")
        for name, what in BENCHMARKS.items():
            print(f"  {name:<10} {what}")
        return 0 if args and args[0] in {"-h", "--help"} else 2
    module = importlib.import_module(f"gateway_kit.bench.{args[0]}")
    result: int = module.main(args[1:])
    return result


if __name__ == "__main__":
    raise SystemExit(main())
