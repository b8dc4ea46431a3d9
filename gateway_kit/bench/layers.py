"""Benchmark the cost of the policy layers: ``python -m gateway_kit.bench layers``.

Against the same mock upstream (aiohttp transport), it measures gateway-kit with no layer,
then with Auth + Limits on memory storage and on Redis (every request: a key check and one
atomic admission, plans so large that nothing is refused), then Auth + Limits + Budget on Redis
(a priced model and a cap far above the load: every request also reserves its estimate and
settles its cost). It prints what each adds over its baseline: p50 at concurrency 1 (targets:
at most 0.15 ms for Auth + Limits on memory, 0.5 ms on Redis; 0.3 ms for Budget on Redis) and
requests/s at concurrency 32 relative to the baseline (target: at least 0.8x). Guardian is off
in every target: ``bench guardian`` measures it.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from gateway_kit.bench._baseline import against_baseline, twins
from gateway_kit.bench._load import delete_redis_prefix, free_port, server_process
from gateway_kit.bench.proxy import Target, add_load_options, compare, table

#: (label, storage URL or None for Redis, auth+limits on, budget on, baseline, p50 target ms)
TARGETS = [
    ("no layers", "memory://", False, False, None, None),
    ("auth+limits, memory", "memory://", True, False, "no layers", 0.15),
    ("auth+limits, redis", None, True, False, "no layers", 0.5),
    ("auth+limits+budget, redis", None, True, True, "auth+limits, redis", 0.3),
]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench layers")
    add_load_options(parser)
    parser.add_argument(
        "--redis-url", default="redis://127.0.0.1:6379/15", help="the Redis to measure against"
    )
    parser.add_argument("--skip-redis", action="store_true", help="measure memory storage only")
    args = parser.parse_args(argv)

    me = ["gateway_kit.bench", "proxy"]
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    prefix = f"gkbench:{uuid.uuid4().hex[:8]}:"
    budgets: dict[str, tuple[str, float]] = {}
    with (
        server_process([*me, "--serve", "upstream", "--port", str(upstream_port)], upstream_port),
        tempfile.TemporaryDirectory() as scratch,
    ):
        targets = []
        for label, storage, layers, budget_layer, baseline, budget in TARGETS:
            if storage is None and args.skip_redis:
                continue
            port = free_port()
            command = [*me, "--serve", "gateway", "--port", str(port), "--upstream", upstream]
            command += ["--transport", "aiohttp", "--storage", storage or args.redis_url]
            command += ["--redis-prefix", prefix]
            if budget_layer:
                command.append("--budget")
            key_file = Path(scratch) / f"{port}.key" if layers else None
            if key_file is not None:
                command += ["--key-file", str(key_file)]
            targets.append(Target(label, port, command, key_file))
            if baseline is not None and budget is not None:
                budgets[label] = (baseline, budget)
        if args.baseline:
            targets += twins(targets, args.baseline)
        try:
            results = compare(targets, args)
        finally:
            if not args.skip_redis:
                delete_redis_prefix(args.redis_url, prefix)
    print(table(list(results.values())))
    print()
    for label, (baseline, budget) in budgets.items():
        result, base = results[label], results[baseline]
        added = result.runs[1].p50 - base.runs[1].p50
        ratio = result.runs[32].rps / base.runs[32].rps
        print(
            f"{label} vs {baseline}: adds {added:+.3f} ms p50 at c=1 "
            f"(target <= {budget:.3f}): {'PASS' if added <= budget else 'FAIL'}; "
            f"{ratio:.2f}x its req/s at c=32 (target >= 0.80): "
            f"{'PASS' if ratio >= 0.8 else 'FAIL'}"
        )
    print("\n".join(against_baseline(results)))
    return 0
