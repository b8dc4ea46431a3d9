"""Benchmark the exact cache: ``python -m gateway_kit.bench cache [--quick]``.

1. **An exact hit in-process** (target: under 1 ms p50 at c=1): the standalone app called as
   an ASGI app, no sockets, with Auth, Limits and Budget on (the model priced, so a hit still
   reserves and settles) and the built-in mock provider; the same short chat request every
   time, so every request after the first is a hit. The baseline, measured in the same run:
   the same app with the cache off (every request goes to the mock).
2. **A semantic lookup** (target: at most 15 ms p50 for a short prompt on one core): the
   local embedder and a search of a partition of 1,000 prompts, measured alone; then the
   labelled pairs (``data/cache_pairs.jsonl``) replayed through the in-process stack with the
   semantic cache on: each pair's first prompt, the same again (an exact hit), then the second
   (a paraphrase to serve, or a near miss never to serve): the hit rates, the false-hit rate and
   each outcome's p50; and, for reference, the pairs' outcomes with the lenient guard, and
   those of ``data/cache_pairs_adversarial.jsonl`` (pairs written to get past the guard).
3. **Memory** (target: bounded by the configured size): 3x ``max_entries`` distinct answers
   through a store bounded to 2,000 entries and 2 MB; its entries, bytes and Python memory.
4. **Hits against misses over loopback at c=32** (target: hits at least 5x the req/s of
   misses): two gateways of this commit (``proxy --serve gateway``, memory storage, Auth and
   Limits on) against the proxy benchmark's mock upstream, one with the cache off (every
   request a miss through the mock), one with it on (the same request: hits), in interleaved
   rounds; p50, p99, req/s and the gateway's CPU per request. c=1 figures come along. For
   reference, not the target: the same two with Auth and Limits off (``--no-auth``; no
   workspace, so the shared scope and no per-workspace accounting), which shows how much of
   a hit's cost is the cache's own path and how much what every keyed request pays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import tracemalloc
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

from gateway_kit.bench._load import build_request
from gateway_kit.bench._pair import Server, announced_rounds, bench_args, start_pair
from gateway_kit.bench.proxy import PATH

__all__ = ["guard_outcomes", "main"]

HIT_P50_MS = 1.0
HIT_RPS_RATIO = 5.0
SEMANTIC_P50_MS = 15.0
PAIRS = Path(__file__).parent / "data" / "cache_pairs.jsonl"
#: Pairs written knowing the guard's rules, to get past them (see the README).
ADVERSARIAL = Path(__file__).parent / "data" / "cache_pairs_adversarial.jsonl"
OFF, ON = "cache off (misses)", "cache on (hits)"
BARE_OFF, BARE_ON = "no Auth/Limits, misses", "no Auth/Limits, hits"
REFUSED = "quota refused (402)"
HEALTH = "GET /healthz (hits')"
QUESTION = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant. Answer in one sentence."},
        {"role": "user", "content": "What is the capital of France, and why is it famous?"},
    ],
    "temperature": 0,
    "max_tokens": 64,
}
FULL = {
    "in_process": 5000,
    "lookups": 2000,
    "requests_c1": 2000,
    "requests_c32": 6400,
    "rounds": 3,
}
QUICK = {"in_process": 1000, "lookups": 300, "requests_c1": 300, "requests_c32": 1600, "rounds": 1}


# -- 1. in-process ------------------------------------------------------------------------------


def _config(cache: dict[str, Any]) -> Any:
    from gateway_kit import GatewayConfig

    return GatewayConfig.model_validate(
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
            "cache": cache,
            "webhooks": {"worker": False},
        }
    )


async def _in_process(cache: bool, requests: int) -> list[float]:
    """Per-request latencies (ms) of the app called directly, after a warm-up."""
    from gateway_kit import Gateway, create_app

    gateway = Gateway(_config({"mode": "enforce" if cache else "off"}))
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


async def _call_state(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> str:
    """The request's ``x-gateway-cache``."""
    found: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            for name, value in message.get("headers", ()):
                if name == b"x-gateway-cache":
                    found.append(value.decode())

    await _drive(app, body, headers, send)
    return found[0] if found else "none"


async def _call(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await _drive(app, body, headers, send)
    return status


async def _drive(app: Any, body: bytes, headers: list[tuple[bytes, bytes]], send: Any) -> None:
    """One POST of ``body`` to the chat route, called as ASGI."""
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

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    await app(scope, receive, send)


def _median_p50(latencies: list[float]) -> float:
    return statistics.median(latencies)


# -- 2. semantic --------------------------------------------------------------------------------


async def _semantic_alone(lookups: int) -> list[float]:
    """Embedding a short prompt and searching a partition of 1,000: ms per lookup."""
    import numpy

    from gateway_kit.cache.embedders import LocalEmbedder
    from gateway_kit.cache.index import IndexEntry, LocalVectorIndex
    from gateway_kit.cache.store import CacheKey

    embedder = LocalEmbedder()
    index = LocalVectorIndex(per_partition=1000)
    rng = numpy.random.default_rng(7)
    for number in range(1000):
        vector = rng.standard_normal(256).astype(numpy.float32)
        vector /= numpy.linalg.norm(vector)
        await index.add(
            "ws", "p", IndexEntry(vector, f"prompt {number}", CacheKey("ws", "m", str(number)))
        )
    prompts = [
        f"What is the capital of country number {i}, and why is it famous?" for i in range(lookups)
    ]
    took = []
    for prompt in prompts:
        started = time.perf_counter()
        vector = (await embedder.embed([prompt]))[0]
        await index.search("ws", "p", vector, threshold=0.93)
        took.append((time.perf_counter() - started) * 1000)
    return took


async def _replay_pairs() -> dict[str, Any]:
    """The labelled pairs through the stack: outcomes and latencies."""
    from gateway_kit import Gateway, create_app

    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    gateway = Gateway(_config({"semantic": {"models": ["mock-large"]}}))
    app = create_app(gateway=gateway)
    outcomes: dict[str, list[str]] = {"repeat": [], "paraphrase": [], "near_miss": []}
    latencies: dict[str, list[float]] = {}
    async with gateway:
        workspace = await gateway.workspaces.create("bench@example.com")
        key = (await gateway.keys.create(workspace.id)).secret
        for pair in pairs:
            await gateway.cache.purge()  # each pair alone
            for role, text in (
                ("first", pair["a"]),
                ("repeat", pair["a"]),
                (pair["label"], pair["b"]),
            ):
                body = json.dumps(
                    {
                        "model": "mock-large",
                        "messages": [{"role": "user", "content": text}],
                        "temperature": 0,
                    }
                ).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"authorization", f"Bearer {key}".encode()),
                ]
                started = time.perf_counter()
                state = await _call_state(app, body, headers)
                latencies.setdefault(state, []).append((time.perf_counter() - started) * 1000)
                if role != "first":
                    outcomes[role].append(state)
    return {"outcomes": outcomes, "latencies": latencies, "pairs": len(pairs)}


def _memory() -> dict[str, float]:
    """Fill a store bounded to 2,000 entries and 2 MB with 3x as many answers."""
    from gateway_kit.cache import CachedAnswer, CacheKey, LocalCacheStore
    from gateway_kit.cost.usage import Usage

    tracemalloc.start()
    store = LocalCacheStore(
        max_entries=2000, max_bytes=2_000_000, max_entry_bytes=100_000, ttl_s=3600
    )
    base = tracemalloc.get_traced_memory()[0]
    peak_entries = peak_bytes = 0
    for number in range(6000):
        text = f"Answer number {number}: " + "lorem ipsum dolor sit amet " * (number % 40 + 5)
        answer = CachedAnswer.made("m", {"content": text}, "stop", Usage(10, 20))
        store.put_now(CacheKey("ws", "m", f"{number:032x}"), answer)
        figures = store.figures_now()
        peak_entries, peak_bytes = (
            max(peak_entries, figures.entries),
            max(peak_bytes, figures.bytes),
        )
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {"entries": peak_entries, "bytes": peak_bytes, "python_mib": used / 2**20}


# -- 4. over loopback ---------------------------------------------------------------------------


def _loopback(args: argparse.Namespace) -> bool:
    with ExitStack() as stack:
        targets = [(OFF, []), (ON, ["--cache"])]
        targets += [(BARE_OFF, ["--no-auth"]), (BARE_ON, ["--cache", "--no-auth"])]
        # A quota of one request: all but the first are refused by the admission step.
        targets += [(REFUSED, ["--cache", "--included-requests", "1"])]
        servers = start_pair(stack, args.transport, targets)
        requests = {s.name: _request(s) for s in servers}
        # The floor of any request to the hits' gateway: the HTTP server and the app's entry.
        hits = next(s for s in servers if s.name == ON)
        servers.append(Server(HEALTH, hits.port, hits.pid, ()))
        requests[HEALTH] = build_request("/healthz", b"", method="GET")
        verdicts = []
        for concurrency, count in ((32, args.requests_c32), (1, args.requests_c1)):
            series = announced_rounds(
                servers
                if concurrency == 32
                else [s for s in servers if s.name not in (REFUSED, HEALTH)],
                requests,
                count=count,
                rounds=args.rounds,
                warmup=max(200, count // 4),
                concurrency=concurrency,
            )
            if concurrency == 32:
                ratio = series[ON].pooled.rps / series[OFF].pooled.rps
                failed = series[ON].pooled.errors + series[OFF].pooled.errors
                passed = ratio >= HIT_RPS_RATIO and not failed
                verdicts.append(passed)
                print(
                    f"hits answer {ratio:.2f}x the req/s of misses; target >= "
                    f"{HIT_RPS_RATIO:.1f}x: {'PASS' if passed else 'FAIL'}",
                    flush=True,
                )
                bare = series[BARE_ON].pooled.rps / series[BARE_OFF].pooled.rps
                keyed = series[ON].cpu_ms - series[BARE_ON].cpu_ms
                print(
                    f"for reference, without Auth and Limits: hits answer {bare:.2f}x the req/s "
                    f"of misses; with them a hit costs {keyed:+.3f} ms of the gateway's CPU "
                    f"({series[ON].cpu_ms:.3f} against {series[BARE_ON].cpu_ms:.3f})",
                    flush=True,
                )
                refused = series[REFUSED]
                floor = refused.pooled.rps / series[OFF].pooled.rps
                print(
                    f"for reference, a request the quota refuses (Auth, its body read, its key, "
                    f"the admission step, a 402 and its record: all a hit does but the lookup "
                    f"and the answer) answers {floor:.2f}x the req/s of misses "
                    f"({refused.cpu_ms:.3f} ms of CPU): the most hits could reach were "
                    f"the cache's own work free",
                    flush=True,
                )
                print(_ceiling(series[OFF].cpu_ms, series[ON].cpu_ms, series[HEALTH].cpu_ms))
            else:
                extra = series[ON].pooled.p50 - series[OFF].pooled.p50
                print(f"a hit's p50 against a miss's: {extra:+.3f} ms\n", flush=True)
        return all(verdicts)


def _ceiling(miss_ms: float, hit_ms: float, health_ms: float) -> str:
    """What the target leaves a hit, against the floor of any request (a health check)."""
    # A miss is the floor, what every keyed request does, and its upstream call; a hit the
    # floor, the same keyed work, and its lookup. With all of a hit's work above the floor
    # free, the misses would still pay their upstream call: miss - hit more than the floor.
    upstream = miss_ms - hit_ms
    ceiling = (health_ms + upstream) / health_ms
    room = (upstream - (HIT_RPS_RATIO - 1) * health_ms) / (HIT_RPS_RATIO - 1)
    return (
        f"for reference, the floor: a GET /healthz through the hits' gateway costs "
        f"{health_ms:.3f} ms of CPU; were all a hit does above it free (Auth, the body read "
        f"and checked, the key, the admission step, the lookup, the answer, the record), hits "
        f"would answer {ceiling:.2f}x the req/s of misses; {HIT_RPS_RATIO:.0f}x leaves all of "
        f"that {room * 1000:.0f} us together (now {(hit_ms - health_ms) * 1000:.0f} us)\n"
    )


def _request(server: Server) -> bytes:
    body = json.dumps({"model": "bench-model", **QUESTION}).encode()
    return build_request(PATH, body, server.headers)


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
    semantic_ok = _report_semantic(args)
    memory_ok = _report_memory()
    print(
        "4. Hits against misses over loopback (proxy --serve gateway, memory storage, Auth + "
        "Limits on, the proxy benchmark's mock upstream; for reference, the same with Auth and "
        "Limits off)",
        flush=True,
    )
    loopback_ok = _loopback(args)
    return 0 if in_process_ok and semantic_ok and memory_ok and loopback_ok else 1


def _report_semantic(args: argparse.Namespace) -> bool:
    print(
        f"2. A semantic lookup: embedding a short prompt and searching a partition of 1,000 "
        f"prompts, {args.lookups} times; then the {PAIRS.name} replayed through the stack",
        flush=True,
    )
    took = anyio.run(_semantic_alone, args.lookups)
    p50 = _median_p50(took)
    passed = p50 <= SEMANTIC_P50_MS
    print(
        f"a semantic lookup takes {p50:.3f} ms p50 ({max(took):.3f} ms at most); target <= "
        f"{SEMANTIC_P50_MS:.0f} ms: {'PASS' if passed else 'FAIL'}",
        flush=True,
    )
    replay = anyio.run(_replay_pairs, backend_options={"use_uvloop": True})
    outcomes = replay["outcomes"]

    def rate(role: str, states: tuple[str, ...]) -> str:
        seen = outcomes[role]
        hits = sum(1 for state in seen if state in states)
        return f"{hits}/{len(seen)} ({hits / len(seen):.1%})" if seen else "none"

    false_hits = sum(1 for state in outcomes["near_miss"] if state in ("hit", "semantic"))
    print(
        f"{replay['pairs']} pairs: repeats served exactly {rate('repeat', ('hit',))}, "
        f"paraphrases served by meaning {rate('paraphrase', ('semantic',))}, near misses "
        f"served {rate('near_miss', ('hit', 'semantic'))}; target 0 false hits: "
        f"{'PASS' if false_hits == 0 else 'FAIL'}"
    )
    for state, latencies in sorted(replay["latencies"].items()):
        print(f"  {state:<9} p50 {_median_p50(latencies):.3f} ms over {len(latencies)} requests")
    lenient = guard_outcomes(PAIRS, lenient=True)
    print(
        f'with guard = "lenient" (replaced words left to the embedder), the same pairs: '
        f"paraphrases served {_served(lenient['paraphrase'])}, near misses served "
        f"{_served(lenient['near_miss'])} (not the default; for reference)"
    )
    attack = guard_outcomes(ADVERSARIAL, lenient=False)
    print(
        f"{ADVERSARIAL.name}, written to pass the guard's rules (for reference): paraphrases "
        f"served {_served(attack['paraphrase'])}, near misses served "
        f"{_served(attack['near_miss'])}"
    )
    print(flush=True)
    return passed and false_hits == 0


def guard_outcomes(path: Path, *, lenient: bool) -> dict[str, tuple[list[dict[str, str]], int]]:
    """The labelled pairs in ``path`` through the local embedder, the default threshold and
    the guard (``lenient`` or strict), no ASGI: by label, the pairs served and how many there
    are (the test suite holds the README's figures with it)."""
    from gateway_kit.cache.embedders import LocalEmbedder
    from gateway_kit.cache.guard import same_meaning_words
    from gateway_kit.config.cache import SemanticCacheConfig

    threshold = SemanticCacheConfig().threshold
    pairs = [json.loads(line) for line in path.read_text().splitlines()]
    embedder = LocalEmbedder()
    firsts = embedder.embed_now([pair["a"] for pair in pairs])
    seconds = embedder.embed_now([pair["b"] for pair in pairs])
    outcomes: dict[str, tuple[list[dict[str, str]], int]] = {}
    for label in ("paraphrase", "near_miss"):
        labelled = [
            (pair, first, second)
            for pair, first, second in zip(pairs, firsts, seconds, strict=True)
            if pair["label"] == label
        ]
        served = [
            pair
            for pair, first, second in labelled
            if float(first @ second) >= threshold
            and same_meaning_words(pair["a"], pair["b"], lenient=lenient)
        ]
        outcomes[label] = (served, len(labelled))
    return outcomes


def _served(outcome: tuple[list[dict[str, str]], int]) -> str:
    served, total = outcome
    return f"{len(served)}/{total} ({len(served) / total:.1%})"


def _report_memory() -> bool:
    print("3. Memory: 6,000 distinct answers into a store bounded to 2,000 entries and 2 MB")
    figures = _memory()
    passed = figures["entries"] <= 2000 and figures["bytes"] <= 2_000_000
    print(
        f"at most {figures['entries']:.0f} entries and {figures['bytes']:,.0f} bytes of answers "
        f"held, {figures['python_mib']:.1f} MiB of Python memory at the end; bounded: "
        f"{'PASS' if passed else 'FAIL'}\n",
        flush=True,
    )
    return passed


def main(argv: list[str]) -> int:
    return measure(bench_args("cache", argv, FULL, QUICK))
