"""Benchmark Guardian: ``python -m gateway_kit.bench guardian [--quick]``.

Guardian's targets, measured in one run between two gateways of this commit, each in its own
process against the proxy benchmark's fast mock upstream, on memory storage, with Auth and
Limits on (a workspace and key made at start-up, plans far above the load): ``without
Guardian`` (off) and ``Guardian, every rule`` (``proxy --serve gateway --guardian``: every rule
on with thresholds far above the load, so that each is evaluated on every request and none
refuses one). Both are measured at concurrency 1 in interleaved rounds whose order alternates,
so that neither the machine's drift nor going first favours one; p50 and p99 pool every
measured request, and cpu/req is the gateway process's CPU time per request.

1. **A 2 KB prompt** (target: Guardian adds at most 0.1 ms p50). A chat application's request:
   a support assistant's system prompt (1.2 KB), the same on every request, and a customer's
   message (0.7 KB), new on every request (its order number, dates and wording change). So the
   memo of per-message facts knows the system prompt and works the customer's message out, as
   for a real application; one request sent again and again would measure the memo's lookups
   only (and, each time identical, count towards ``repeat``: its thresholds are far above the
   load here).
2. **A 200 KB conversation of 200 messages** (target: at most 1 ms), the same servers. A coding
   agent's session: its instructions and tools, the user's task and follow-ups, assistant turns
   calling tools and the tools' results (this package's source files, search hits, test runs).
   An agent re-sends its whole history on every turn with what happened since: its own last
   answer and the tool's result, both new to the gateway (which saw the answer only as a
   response). So request ``i`` is the session's first 198 messages, the same every time, then
   step ``i`` of the agent: an assistant tool call and its result, never sent before. The memo
   finds 198 messages and works out 2, as for an agent in its steady state; the conversation
   stays at 200 messages rather than growing, so every request weighs the same. The requests
   are made as they are sent (``Rotation``), so none repeats and none is held in memory. (A
   rotation of the conversation's prefixes would send nothing new after its first pass: the
   memo would know every message, which no agent's traffic looks like.)
3. **One storage round trip on Redis**: not measured here. ``tests/pipeline/test_round_trips.py``
   counts every storage operation a request makes, with Guardian on, on every backend.

What the memo saves is shown after target 2: ``--probes`` sessions of the same size whose
messages neither gateway has seen (another checkout path, other files, other call ids), each
sent once cold (every message worked out) and once more warm (every message known), on one
connection, after the rounds.

The default run takes about 2 minutes on two cores, ``--quick`` about 20 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from gateway_kit.bench._conversation import (
    AGENT_TOOLS,
    CONVERSATION_MESSAGES,
    Rotation,
    agent_session,
    agent_turn,
    chat_messages,
    conversation,
)
from gateway_kit.bench._load import (
    run_load,
)
from gateway_kit.bench._pair import Server, added, interleaved, start_pair, table
from gateway_kit.bench.proxy import PATH
from gateway_kit.bench.routing import Series

__all__ = ["chat_rotation", "conversation_rotation", "main", "probe_request"]

#: The issue's targets: what Guardian may add to the p50 at c=1 (ms).
SMALL_ADDED_P50_MS = 0.1
CONVERSATION_ADDED_P50_MS = 1.0
WITHOUT, WITH = "without Guardian", "Guardian, every rule"
MODEL = "bench-model"
#: The agent's rotation starts its steps here, past any step of its session.
FIRST_STEP = 10_000
SIZES = {
    "requests_small": "requests per target and round, 2 KB prompt",
    "requests_large": "requests per target and round, 200 KB conversation",
    "rounds": "interleaved rounds per target",
    "warmup_small": "warm-up requests per target, 2 KB prompt",
    "warmup_large": "warm-up requests per target, 200 KB conversation",
    "probes": "sessions sent cold, then warm",
}
FULL = {
    "requests_small": 2000,
    "requests_large": 300,
    "rounds": 10,
    "warmup_small": 1000,
    "warmup_large": 100,
    "probes": 5,
}
QUICK = {
    "requests_small": 600,
    "requests_large": 40,
    "rounds": 3,
    "warmup_small": 300,
    "warmup_large": 20,
    "probes": 3,
}


# -- the requests ------------------------------------------------------------------------------


def chat_rotation(headers: Sequence[tuple[str, str]] = ()) -> Rotation:
    """Target 1's requests: the support system prompt and a new customer message each."""
    system = chat_messages(0)[:1]
    params = {"model": MODEL, "temperature": 0.3, "max_tokens": 400}
    return Rotation(system, lambda i: chat_messages(i)[1:], params, headers, path=PATH)


def _agent_params() -> dict[str, Any]:
    return {"model": MODEL, "tools": AGENT_TOOLS, "temperature": 0.2, "max_tokens": 4096}


def conversation_rotation(headers: Sequence[tuple[str, str]] = ()) -> Rotation:
    """Target 2's requests: the agent's first 198 messages, then a new step each."""
    session = agent_session(0, CONVERSATION_MESSAGES - 2)
    return Rotation(
        session, lambda i: agent_turn(0, FIRST_STEP + i), _agent_params(), headers, path=PATH
    )


def probe_request(variant: int, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A whole conversation of session ``variant`` (1 on), none of its messages seen before."""
    messages = conversation(variant)
    return Rotation(messages, lambda i: [], _agent_params(), headers, path=PATH)[0]


# -- the measurement ---------------------------------------------------------------------------


@dataclass(slots=True)
class Probes:
    """Cold and warm latencies (ms) of the probe sessions on one server."""

    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    failed: int = 0


def probe(servers: Sequence[Server], count: int) -> dict[str, Probes]:
    """Sessions no server has seen, each sent twice on one connection: cold, then warm."""
    found = {s.name: Probes() for s in servers}
    for variant in range(1, count + 1):
        for server in servers if variant % 2 else servers[::-1]:
            request = probe_request(variant, server.headers)
            result = run_load(server.port, [request], concurrency=1, requests=2)
            cold, warm = (latency * 1000 for latency in result.latencies)
            done = found[server.name]
            done.cold.append(cold)
            done.warm.append(warm)
            done.failed += result.errors
    return found


def _first(series: dict[str, Series]) -> str:
    """The conversation's first request (its warm-up's first) against the measured p50."""
    now, before = series[WITH], series[WITHOUT]
    first, first_before = (s.warmup.latencies[0] * 1000 if s.warmup else 0.0 for s in (now, before))
    return (
        f"  the conversation's first request, none of its messages in the memo yet: "
        f"{first:.3f} ms with Guardian ({first_before:.3f} without: "
        f"{first - first_before:+.3f}); measured p50 {now.pooled.p50:.3f} "
        f"({now.pooled.p50 - before.pooled.p50:+.3f})"
    )


def _memo(found: dict[str, Probes]) -> list[str]:
    width = max(len(name) for name in found) + 2
    lines = [
        f"  {'target':<{width}}{'cold ms':>9}{'warm ms':>9}{'failed':>8}",
        "  " + "-" * (width + 26),
    ]
    for name, done in found.items():
        cold, warm = statistics.median(done.cold), statistics.median(done.warm)
        lines.append(f"  {name:<{width}}{cold:>9.3f}{warm:>9.3f}{done.failed:>8}")
    now, before = found[WITH], found[WITHOUT]
    cold_added = statistics.median(a - b for a, b in zip(now.cold, before.cold, strict=True))
    warm_added = statistics.median(a - b for a, b in zip(now.warm, before.warm, strict=True))
    lines.append(
        f"  Guardian adds {cold_added:+.3f} ms to a cold request (all 200 messages worked out) "
        f"and {warm_added:+.3f} ms to the same request warm (all 200 found in the memo); "
        "medians of the sessions' paired differences"
    )
    return lines


def measure(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        targets = [(WITHOUT, []), (WITH, ["--guardian"])]
        servers = start_pair(stack, args.transport, targets)
        where = (
            f"at c=1, memory storage, Auth + Limits on, transport {args.transport}: "
            f"{args.rounds} interleaved rounds of"
        )

        chats = {s.name: chat_rotation(s.headers) for s in servers}
        small = chats[WITHOUT]
        sizes = [len(small.body(i)) for i in range(100)]
        system, user = chat_messages(0)
        print(
            f"1. A 2 KB prompt ({min(sizes):,} to {max(sizes):,} bytes: a system prompt of "
            f"{len(system['content']):,} characters, the same every time, and a customer's "
            f"message of about {len(user['content']):,}, new every time) {where} "
            f"{args.requests_small} requests per target after a warm-up of {args.warmup_small}",
            flush=True,
        )
        series = interleaved(
            servers,
            chats,
            requests=args.requests_small,
            rounds=args.rounds,
            warmup=args.warmup_small,
        )
        lines, small_passed = added(series, WITH, WITHOUT, "Guardian", SMALL_ADDED_P50_MS)
        print(table(series), *lines, sep="\n", end="\n\n", flush=True)

        agents = {s.name: conversation_rotation(s.headers) for s in servers}
        sizes = [len(agents[WITHOUT].body(i)) for i in range(20)]
        print(
            f"2. A 200 KB conversation ({min(sizes):,} to {max(sizes):,} bytes, "
            f"{CONVERSATION_MESSAGES} messages: the same first {CONVERSATION_MESSAGES - 2}, then "
            f"a new assistant tool call and its result each time) {where} "
            f"{args.requests_large} requests per target after a warm-up of {args.warmup_large}",
            flush=True,
        )
        series = interleaved(
            servers,
            agents,
            requests=args.requests_large,
            rounds=args.rounds,
            warmup=args.warmup_large,
        )
        lines, large_passed = added(series, WITH, WITHOUT, "Guardian", CONVERSATION_ADDED_P50_MS)
        print(table(series), *lines, _first(series), sep="\n", flush=True)
        found = probe(servers, args.probes)
        print(
            f"  the memo: {args.probes} sessions of {CONVERSATION_MESSAGES} messages (about "
            "200 KB) no gateway had seen, each sent cold, then again warm:",
            *_memo(found),
            sep="\n",
            end="\n\n",
        )
        if any(done.failed for done in found.values()):
            large_passed = False
    print(
        "3. One storage round trip on Redis: not measured here; tests/pipeline/test_round_trips.py "
        "counts every storage operation of a request with Guardian on (one before the upstream "
        "call for every layer together, one after it to settle).\n"
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end; p50/p99 and req/s pool every "
        "measured request of a target; cpu/req: the gateway process's CPU ms per request"
    )
    return 0 if small_passed and large_passed else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench guardian")
    parser.add_argument(
        "--transport", default="auto", help="the provider's transport (default: auto, as users)"
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    for name, what in SIZES.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            help=f"{what} (default {FULL[name]}, with --quick {QUICK[name]})",
        )
    args = parser.parse_args(argv)
    for name, default in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return measure(args)
