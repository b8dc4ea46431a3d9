"""Benchmark PII masking: ``python -m gateway_kit.bench pii [--quick]``.

What masking and restore add, measured between two gateways of this commit (``_pair``): PII
masking off, and on (``proxy --serve gateway --pii``: ``enforce``, every built-in kind, scope
``full``), at c=1 on memory storage with Auth and Limits on, in interleaved rounds.

1. **A 2 KB prompt** (target: at most 0.2 ms p50): the support chat of ``bench guardian``, its
   customer's message (new every time) now holding an e-mail address and a phone number, so
   every request has values to mask; the answer is restored (the mock's fixed answer is
   searched for placeholders, as every answer is).
2. **A 50 KB conversation** (target: at most 2 ms): the coding agent's session of ``bench
   guardian`` cut to about 50 KB, the user's messages holding an e-mail address, then a new
   step each time; the history's texts are found in the memo of spans, the new step's are
   scanned.
3. **A stream's latency** (target: unchanged within noise): the 2 KB prompt with ``stream:
   true``; the mock answers in one event, so the time to the first byte is the request's.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from typing import Any

from gateway_kit.bench._conversation import (
    AGENT_TOOLS,
    Message,
    Rotation,
    agent_session,
    agent_turn,
    chat_messages,
)
from gateway_kit.bench._pair import added, bench_args, interleaved, start_pair, table
from gateway_kit.bench.proxy import PATH

__all__ = ["chat_rotation", "conversation_rotation", "main"]

SMALL_ADDED_P50_MS = 0.2
CONVERSATION_ADDED_P50_MS = 2.0
WITHOUT, WITH = "PII masking off", "PII masking on"
MODEL = "bench-model"
CONVERSATION_BYTES = 50_000
FULL = {"requests_small": 2000, "requests_large": 500, "rounds": 10, "warmup": 500}
QUICK = {"requests_small": 600, "requests_large": 100, "rounds": 3, "warmup": 100}


def _with_pii(message: Message, index: int) -> Message:
    """The customer's message, signed with an e-mail address and a (valid) phone number."""
    signature = (
        f"\n\nBest regards, Anna Lindqvist\nanna.lindqvist{index}@example.se, "
        f"+44 20 7946 {index % 10_000:04d}"
    )
    return {**message, "content": message["content"] + signature}


def chat_rotation(headers: tuple[tuple[str, str], ...] = (), *, stream: bool = False) -> Rotation:
    system = chat_messages(0)[:1]
    params: dict[str, Any] = {"model": MODEL, "temperature": 0.3, "max_tokens": 400}
    if stream:
        params["stream"] = True
    return Rotation(
        system, lambda i: [_with_pii(chat_messages(i)[1], i)], params, headers, path=PATH
    )


def _session() -> list[Message]:
    """The agent's session cut to about ``CONVERSATION_BYTES``, its user messages signed."""
    kept: list[Message] = []
    size = 0
    for index, message in enumerate(agent_session(0)):
        if message["role"] == "user":
            message = _with_pii(message, index)
        size += len(json.dumps(message))
        if size > CONVERSATION_BYTES and message["role"] != "tool":
            break
        kept.append(message)
    return kept


def conversation_rotation(headers: tuple[tuple[str, str], ...] = ()) -> Rotation:
    params = {"model": MODEL, "tools": AGENT_TOOLS, "temperature": 0.2, "max_tokens": 4096}
    return Rotation(_session(), lambda i: agent_turn(0, 10_000 + i), params, headers, path=PATH)


def measure(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        servers = start_pair(stack, args.transport, [(WITHOUT, []), (WITH, ["--pii"])])
        where = f"at c=1, memory storage, Auth + Limits on: {args.rounds} interleaved rounds of"
        results: list[bool] = []
        for title, rotations, requests, target in (
            (
                "1. A 2 KB prompt (a support chat; the customer's message, new each time, signs "
                "with an e-mail address and a phone number)",
                {s.name: chat_rotation(s.headers) for s in servers},
                args.requests_small,
                SMALL_ADDED_P50_MS,
            ),
            (
                f"2. A {CONVERSATION_BYTES // 1000} KB conversation (an agent's session, the "
                "user's messages signed with an e-mail address; a new step each time)",
                {s.name: conversation_rotation(s.headers) for s in servers},
                args.requests_large,
                CONVERSATION_ADDED_P50_MS,
            ),
            (
                "3. The 2 KB prompt streamed (the mock answers in one event: the latency is the "
                "time to the first byte)",
                {s.name: chat_rotation(s.headers, stream=True) for s in servers},
                args.requests_small,
                SMALL_ADDED_P50_MS,
            ),
        ):
            sizes = [len(next(iter(rotations.values())).body(i)) for i in range(20)]
            print(
                f"{title}: {min(sizes):,} to {max(sizes):,} bytes, {where} {requests} "
                f"requests per target after a warm-up of {args.warmup}",
                flush=True,
            )
            series = interleaved(
                servers, rotations, requests=requests, rounds=args.rounds, warmup=args.warmup
            )
            lines, passed = added(series, WITH, WITHOUT, "PII masking", target)
            results.append(passed)
            print(table(series), *lines, sep="\n", end="\n\n", flush=True)
    return 0 if all(results) else 1


def main(argv: list[str]) -> int:
    return measure(bench_args("pii", argv, FULL, QUICK))
