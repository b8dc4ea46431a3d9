"""Guardian's rules, each a plain function from what it observed to a ``Trip`` (or nothing).

The stateless rules read the request alone: ``context_size`` (the prompt's tokens),
``tool_loop`` (the history's last tool turns) and ``context_growth`` (the prompt against what
it was at the last user message). The stateful ones read counters the admission step kept:
``repeat`` (the same canonical request from the same key in a window), ``conversation_steps``
(requests of one conversation in a window) and ``spend_spike`` (a key's spend rate against its
own average).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gateway_kit.config.guardian import (
    ContextGrowthRule,
    ContextSizeRule,
    ConversationStepsRule,
    RepeatRule,
    SpendSpikeRule,
    ToolLoopRule,
)
from gateway_kit.layers.guardian.facts import RequestFacts, ping_pong_cycles, tail_run

__all__ = [
    "Trip",
    "context_growth",
    "context_size",
    "conversation_steps",
    "repeat",
    "spend_spike",
    "tool_loop",
]

TripAction = Literal["block", "throttle", "warn"]

#: A block decided from the request's own history (``tool_loop``, ``context_growth``): the
#: same history is refused again, so it answers as a refused request, not a rate limit (a 429
#: had clients retry it, and told them when).
_HISTORY = 400


@dataclass(frozen=True, slots=True)
class Trip:
    """A rule that tripped: what it does about it, and the figures it saw."""

    rule: str
    action: TripAction
    threshold: int
    observed: int
    #: What happened, for people (the answer's message, the event's ``message``).
    message: str
    #: The status a block answers with: 429 for a rule whose count a wait brings down; one
    #: decided from the request alone (its prompt, its history) is refused again if sent
    #: again, so it is no rate limit (no ``Retry-After``: clients would retry it).
    status: int = 429
    #: A throttle: how long the request should wait before it is served; a block: when to
    #: come back (``Retry-After``).
    wait_s: float = 0.0
    #: A throttle refused for waiting too long: when to come back, if not after ``wait_s``. A
    #: count kept in a fixed window comes down only when the window ends (a refused request
    #: counts nothing), so waiting ``wait_s`` and sending again met the same refusal, ten
    #: times over.
    retry_s: float | None = None


def _action(rule_action: str) -> TripAction | None:
    return None if rule_action == "off" else rule_action  # type: ignore[return-value]


def context_size(
    rule: ContextSizeRule, tokens: int, exact: bool, window: int | None
) -> Trip | None:
    """The prompt's tokens against ``window_share`` of the model's context window."""
    action = _action(rule.acting)
    threshold = math.floor(window * rule.window_share) if window else rule.max_tokens
    if action is None or tokens <= threshold:
        return None
    counted = f"{tokens:,} tokens" if exact else f"about {tokens:,} tokens (estimated)"
    return Trip(
        "context_size",
        action,
        threshold,
        tokens,
        f"the prompt has {counted}, over the limit of {threshold:,}",
        status=413,
    )


def tool_loop(rule: ToolLoopRule, facts: RequestFacts) -> Trip | None:
    """The history's last assistant tool turns (the same calls again and again, or two
    alternating) and its last tool results (the same error again and again)."""
    action = _action(rule.acting)
    if action is None:
        return None
    turns = facts.tool_turns
    same = tail_run(turns)
    if same >= rule.identical_turns:
        return Trip(
            "tool_loop",
            action,
            rule.identical_turns,
            same,
            f"the last {same} assistant turns call the same tools with the same arguments",
            status=_HISTORY,
        )
    cycles = ping_pong_cycles(turns)
    if cycles >= rule.ping_pong_cycles:
        return Trip(
            "tool_loop",
            action,
            rule.ping_pong_cycles,
            cycles,
            f"the last {2 * cycles} assistant turns alternate between the same two tool calls",
            status=_HISTORY,
        )
    errors = tail_run(facts.tool_results)
    if errors >= rule.repeated_errors:
        return Trip(
            "tool_loop",
            action,
            rule.repeated_errors,
            errors,
            f"the last {errors} tool results are the same error",
            status=_HISTORY,
        )
    return None


def context_growth(rule: ContextGrowthRule, facts: RequestFacts) -> Trip | None:
    """A context grown ``factor`` times since the last user message, without new input."""
    action = _action(rule.acting)
    if action is None:
        return None
    turns, total, at_input = facts.turns_since_input, facts.tokens, facts.tokens_at_input
    if turns < rule.min_turns or total < rule.min_tokens:
        return None
    threshold = max(rule.min_tokens, math.ceil(rule.factor * max(at_input, 1)))
    if total < threshold:
        return None
    return Trip(
        "context_growth",
        action,
        threshold,
        total,
        f"the context grew from about {at_input:,} to {total:,} tokens over {turns} assistant "
        "turns without new user input",
        status=_HISTORY,
    )


def repeat(rule: RepeatRule, count: int, *, refused: bool = False) -> Trip | None:
    """The ``count``-th identical request within the window: throttled from ``throttle_at``,
    blocked from ``block_at`` (``refused``: the storage refused it there), or only warned of
    with ``action = "warn"``."""
    action = _action(rule.acting)
    if action is None or (count < rule.throttle_at and not refused):
        return None
    window = f"{rule.window_s:g} s"
    if action != "warn" and (refused or count >= rule.block_at):
        observed = max(count, rule.block_at)
        return Trip(
            "repeat",
            "block",
            rule.block_at,
            observed,
            f"{observed} identical requests from this key within {window} (blocked from "
            f"{rule.block_at})",
            wait_s=rule.window_s,
        )
    spacing = rule.window_s / rule.throttle_at
    return Trip(
        "repeat",
        "warn" if action == "warn" else "throttle",
        rule.throttle_at,
        count,
        f"{count} identical requests from this key within {window} (throttled from "
        f"{rule.throttle_at}, blocked from {rule.block_at})",
        wait_s=spacing * (count - rule.throttle_at + 1),
        retry_s=rule.window_s,  # the window ends at most this long after now
    )


def conversation_steps(
    rule: ConversationStepsRule, count: int, *, refused: bool = False
) -> Trip | None:
    """The ``count``-th request of one conversation within the window."""
    action = _action(rule.acting)
    if action is None or (count <= rule.max_steps and not refused):
        return None
    observed = max(count, rule.max_steps + 1)
    return Trip(
        "conversation_steps",
        "block" if refused else action,
        rule.max_steps,
        observed,
        f"{observed} requests of this conversation within {rule.window_s:g} s (the limit is "
        f"{rule.max_steps})",
        wait_s=(
            rule.window_s
            if refused or action == "block"
            else rule.window_s / rule.max_steps * (observed - rule.max_steps)
        ),
        retry_s=rule.window_s,
    )


def spend_spike(
    rule: SpendSpikeRule,
    recent: int,
    recent_s: float,
    average: int,
    average_s: float,
    *,
    current: int | None = None,
    into_s: float = 0.0,
) -> Trip | None:
    """``recent`` micro-USD spent in the last ``recent_s`` against ``average`` micro-USD over
    the last ``average_s`` (the key's own pace). ``current`` is the part of ``recent`` spent
    in the current fixed window, ``into_s`` seconds old (the rest is the previous window's,
    weighted by how much of it the sliding window still covers): the wait follows them."""
    action = _action(rule.acting)
    floor = int(rule.floor_usd * 1_000_000)
    if action is None or recent < max(floor, 1) or recent_s <= 0:
        return None
    usual = average / max(average_s, 1.0) * recent_s  # what the key usually spends in as long
    limit = max(floor, math.ceil(rule.factor * usual))
    if recent < limit:
        return None
    return Trip(
        "spend_spike",
        action,
        limit,
        recent,
        f"${recent / 1e6:,.2f} spent in the last {recent_s / 60:.0f} min, {rule.factor:g} times "
        f"this key's usual pace is ${limit / 1e6:,.2f}",
        wait_s=_spend_wait(recent, limit, recent_s, current, into_s),
    )


def _spend_wait(
    recent: int, limit: int, window: float, current: int | None, into_s: float
) -> float:
    """Until the sliding window's spend is back under ``limit``, were nothing more spent: the
    previous window's part fades out over the rest of the current one, then the current
    one's over the next. (Spread evenly, as it was once assumed, the wait came out a dozen
    times too short.)"""
    if current is None:
        return window * (1 - limit / recent)
    left = max(window - into_s, 0.0)
    previous = recent - current  # its weighted part, now
    if current < limit:
        return left * (1 - (limit - current) / previous) if previous > 0 else 0.0
    return left + window * (1 - limit / current)
