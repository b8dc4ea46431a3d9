"""``GuardianPolicy``: which rules apply to a request, and what their trips amount to.

No ASGI and no storage in here: the middleware gathers what the rules observed (the request's
facts, the admission step's counters) and the policy turns the trips into a
``GuardianVerdict``:

- a rule in ``monitor`` mode (``guardian.mode``, or its own ``mode``) never acts: it says
  ``would-<action>=<rule>`` in ``x-gateway-guardian`` and still publishes its event, marked;
- an enforced ``block`` refuses: 429 (413 for ``context_size``), code ``guardian_block``, with
  ``Retry-After``;
- an enforced ``throttle`` holds the request for its wait when that is within
  ``throttle_max_wait_s``, and refuses it (429, ``Retry-After``) when it is not;
- an enforced ``warn`` passes, with ``warn=<rule>`` in ``x-gateway-guardian``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway_kit._ttl import TTLMap
from gateway_kit.config import GuardianConfig, Mode, PlanConfig
from gateway_kit.config.guardian import GuardianRules, merge_rules
from gateway_kit.layers.guardian.rules import Trip
from gateway_kit.pipeline.verdicts import Refusal, Verdict

logger = logging.getLogger("gateway_kit.guardian")

__all__ = ["PASS", "GuardianPolicy", "GuardianVerdict", "Outcome", "StepPlan"]

_SEVERITY = {"block": 3, "throttle": 2, "warn": 1}


@dataclass(frozen=True, slots=True)
class Outcome:
    """A trip with the mode it is judged in."""

    trip: Trip
    monitor: bool

    @property
    def event_action(self) -> str:
        return "blocked" if self.trip.action == "block" else "throttled"

    @property
    def published(self) -> bool:
        """Blocks and throttles publish ``guardian.block`` (warnings do not)."""
        return self.trip.action in ("block", "throttle")


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardianVerdict(Verdict):
    """What Guardian decided: ``pass``, ``warn``, ``throttle`` (held ``delay_s``), ``block``
    (``refusal`` set) or ``would-block`` / ``would-throttle`` in monitor mode."""

    outcomes: tuple[Outcome, ...] = ()
    delay_s: float = 0.0
    headers: tuple[tuple[bytes, bytes], ...] = field(default=())

    def details(self) -> dict[str, Any]:
        if not self.outcomes:
            return {}
        return {
            "rules": [
                {"rule": o.trip.rule, "action": o.trip.action, "monitor": o.monitor}
                for o in self.outcomes
            ]
        }


#: The verdict of a request nothing tripped (a verdict is immutable: one for all of them).
PASS = GuardianVerdict()


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the admission step counts and reads under a set of rules, worked out once per set
    (``GuardianPolicy.plan``): a counter's TTL and limit (``None``: counted, never refused
    there), or ``None`` for a rule that is off."""

    repeat: tuple[float, int | None] | None
    conversation: tuple[float, int | None] | None
    spend: bool
    #: ``spend_spike``'s floor in micro-USD: below it the rule is not looked at.
    spend_floor: int


class GuardianPolicy:
    """The rules in force for a request, and the verdict of their trips."""

    def __init__(self, config: GuardianConfig) -> None:
        self.config = config
        # Memos, not per-request state: merged rules by plan and key overrides, and each set
        # of rules' plan by its identity (the set kept with it, so the identity stays its own).
        self._merged: TTLMap[tuple[str, str], GuardianRules] = TTLMap(3600.0, maxsize=10_000)
        self._plans: dict[int, tuple[GuardianRules, StepPlan]] = {}

    def rules_for(
        self,
        plan_name: str,
        plan: PlanConfig | None,
        key_rules: dict[str, dict[str, Any]] | None = None,
    ) -> GuardianRules:
        """The configuration's rules, with the plan's then the key's overrides applied."""
        if not key_rules and (plan is None or not plan.guardian):
            return self.config.rules
        memo_key = (plan_name, repr(sorted((key_rules or {}).items())))
        merged = self._merged.get(memo_key)
        if merged is None:
            merged = self.config.rules
            if plan is not None and plan.guardian:
                merged = merge_rules(merged, plan.guardian)
            if key_rules:
                merged = _with_key_rules(merged, key_rules)
            self._merged.set(memo_key, merged)
        return merged

    def plan(self, rules: GuardianRules) -> StepPlan:
        """The admission step's counters and reads under ``rules``."""
        known = self._plans.get(id(rules))
        if known is not None and known[0] is rules:
            return known[1]
        repeat, steps, spend = rules.repeat, rules.conversation_steps, rules.spend_spike
        enforced = self.enforced(rules, "repeat") and repeat.acting != "warn"
        counted = self.enforced(rules, "conversation_steps") and steps.acting == "block"
        plan = StepPlan(
            repeat=(
                None
                if repeat.acting == "off"
                else (repeat.window_s, repeat.block_at - 1 if enforced else None)
            ),
            conversation=(
                None
                if steps.acting == "off"
                else (steps.window_s, steps.max_steps if counted else None)
            ),
            spend=spend.acting != "off",
            spend_floor=max(int(spend.floor_usd * 1_000_000), 1),
        )
        if len(self._plans) >= 10_000:
            self._plans.clear()
        self._plans[id(rules)] = (rules, plan)
        return plan

    def monitors(self, rules: GuardianRules, rule: str) -> bool:
        """Whether ``rule`` is only watched (monitor mode), not enforced."""
        own: Mode | None = getattr(rules, rule).mode
        return (own or self.config.mode) is Mode.MONITOR

    def enforced(self, rules: GuardianRules, rule: str) -> bool:
        own: Mode | None = getattr(rules, rule).mode
        return (own or self.config.mode) is Mode.ENFORCE

    def verdict(self, rules: GuardianRules, trips: Sequence[Trip]) -> GuardianVerdict:
        if not trips:
            return PASS
        outcomes = tuple(Outcome(t, self.monitors(rules, t.rule)) for t in trips)
        headers = [
            f"would-{o.trip.action}={o.trip.rule}"
            if o.monitor
            else f"{_past(o.trip.action)}={o.trip.rule}"
            for o in outcomes
        ]
        enforced = [o.trip for o in outcomes if not o.monitor]
        worst = max(enforced, key=lambda t: _SEVERITY[t.action], default=None)
        delay = 0.0
        refusal = None
        action = "would-" + max(outcomes, key=lambda o: _SEVERITY[o.trip.action]).trip.action
        if worst is not None:
            action = worst.action
            if worst.action == "throttle":
                throttles = [t for t in enforced if t.action == "throttle"]
                wait = max(t.wait_s for t in throttles)
                if wait <= self.config.throttle_max_wait_s:
                    delay = wait
                    headers.append(f"wait={wait:.1f}")
                else:
                    retry = max(max(t.wait_s, t.retry_s or 0.0) for t in throttles)
                    refusal = self._refusal(worst, retry, "throttled")
                    action = "block"
            elif worst.action == "block":
                refusal = self._refusal(worst, worst.wait_s, "blocked")
        header = ", ".join(headers).encode()
        return GuardianVerdict(
            action=action,
            refusal=refusal,
            outcomes=outcomes,
            delay_s=delay,
            headers=((b"x-gateway-guardian", header),),
        )

    def _refusal(self, trip: Trip, wait: float, what: str) -> Refusal:
        if trip.status != 429:  # the request itself: sent again, it is refused again
            return Refusal(
                trip.status,
                f"Guardian rule '{trip.rule}' {what} this request: {trip.message}; sent "
                "again, it is refused again.",
                code="guardian_block",
                type="invalid_request_error",
            )
        retry = max(1, math.ceil(wait))
        return Refusal(
            trip.status,
            f"Guardian rule '{trip.rule}' {what} this request: {trip.message}; retry in {retry} s.",
            code="guardian_block",
            type="rate_limit_error",
            headers=((b"retry-after", str(retry).encode()),),
        )


def _with_key_rules(rules: GuardianRules, key_rules: dict[str, dict[str, Any]]) -> GuardianRules:
    """``rules`` with a key's overrides. They were checked against the rules of the key's plan
    when set; should the plan have changed since (a key's ``block_at`` now below the plan's
    ``throttle_at``), the key's thresholds give way and its actions and modes (its allow-list
    among them) stand: a request is never a 500 for it."""
    try:
        return merge_rules(rules, key_rules)
    except ValueError as exc:
        logger.warning("a key's Guardian thresholds no longer fit its plan's (%s): ignored", exc)
        kept = {
            name: {field: value for field, value in fields.items() if field in _NEVER_CONFLICT}
            for name, fields in key_rules.items()
        }
        return merge_rules(rules, kept)


#: A rule's fields that no other field's value can make invalid.
_NEVER_CONFLICT = frozenset({"action", "mode"})


def _past(action: str) -> str:
    return {"block": "blocked", "throttle": "throttled", "warn": "warn"}[action]
