"""Guardian's part of one request's admission step, and of its settlement.

Storage keys (the workspace's partition; ``<key>`` a key id, ``<hash>`` 32 hex digits):

- ``<ws>:guardian:repeat:<key>:<hash>``: the same canonical request, counted for ``window_s``
  from the first (limited at ``block_at - 1`` when enforced: the storage refuses the next one,
  exactly, however many gateways share it);
- ``<ws>:guardian:conv:<key>:<hash>``: one conversation's requests, the same way (one the
  gateway derives from the messages counted from its second request, its opening added: an
  opening has no answer yet that would tell it from other conversations opened alike);
- ``<ws>:guardian:spend:<key>:m<n>`` and ``...:d<n>``: the key's spend (micro-USD) in the
  current and previous windows of ``spend_spike.window_s``, and today and yesterday (UTC),
  added when a request settles and read in the step: the windows on every request, the days
  (the key's usual pace, over a day or more) once a minute per key and process
  (``DaySpend``), a minute's spend being nothing to a day's average.

A request the upstream failed (5xx, 429, no response) gives its ``repeat`` count back: a retry
after an upstream error does not count as a repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

from gateway_kit._asgi.types import Header
from gateway_kit._ttl import TTLMap
from gateway_kit.accounts.keys import Principal
from gateway_kit.config import OnError
from gateway_kit.config.guardian import GuardianRules
from gateway_kit.exceptions import StorageError
from gateway_kit.layers.guardian import rules as checks
from gateway_kit.layers.guardian.events import GuardianRecorder
from gateway_kit.layers.guardian.policy import GuardianPolicy, GuardianVerdict, StepPlan
from gateway_kit.pipeline.admission import Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, unavailable
from gateway_kit.storage import Increment, IncrManyResult

__all__ = ["DaySpend", "GuardianStep", "StepKeys"]

_DAY = 86_400.0
# Spend counters outlive what is read of them.
_DAY_TTL = 2 * _DAY + 3600
#: How often a process reads a key's spend over the last days again.
_DAY_READ_EVERY_S = 60.0


class StepKeys(NamedTuple):
    """The storage keys of one request's counters and reads (``""`` for a rule that is off),
    and where in the windows it is."""

    repeat: str
    conversation: str
    spend_now: str
    spend_before: str
    day_now: str
    day_before: str
    #: Seconds into the current spend window, and into today (UTC); today's number.
    into_window: float
    into_day: float
    day: int

    @classmethod
    def of(
        cls,
        principal: Principal,
        request_hash: str,
        conversation: str,
        now: float,
        rules: GuardianRules,
        plan: StepPlan,
    ) -> StepKeys:
        base = f"{principal.workspace_id}:guardian"
        key = principal.key_id
        repeat = f"{base}:repeat:{key}:{request_hash[7:39]}" if plan.repeat else ""
        steps = f"{base}:conv:{key}:{conversation}" if plan.conversation and conversation else ""
        if not plan.spend:
            return cls(repeat, steps, "", "", "", "", 0.0, 0.0, 0)
        window = rules.spend_spike.window_s
        bucket, day = int(now // window), int(now // _DAY)
        spend = f"{base}:spend:{key}:"
        return cls(
            repeat,
            steps,
            f"{spend}m{bucket}",
            f"{spend}m{bucket - 1}",
            f"{spend}d{day}",
            f"{spend}d{day - 1}",
            now - bucket * window,
            now - day * _DAY,
            day,
        )


class DaySpend(TTLMap[tuple[str, int], int]):
    """Each key's spend today and yesterday (by key id and day), as last read in a step."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(_DAY_READ_EVERY_S, maxsize=100_000, clock=clock)


class _Layer(Protocol):
    """What the step needs of its middleware."""

    policy: GuardianPolicy
    recorder: GuardianRecorder
    on_error: OnError
    day_spend: DaySpend


class GuardianStep:
    """One request's stateful rules; ``trips`` are the stateless rules' findings so far."""

    concern = "guardian"

    def __init__(
        self,
        layer: _Layer,
        principal: Principal,
        rules: GuardianRules,
        plan: StepPlan,
        keys: StepKeys,
        trips: list[checks.Trip],
        request_hash: str,
        uncounted: int = 0,
    ) -> None:
        self._layer = layer
        self._principal = principal
        self._rules = rules
        self._plan = plan
        self._keys = keys
        self._trips = trips
        self._hash = request_hash
        #: The conversation's requests before the first one counted (its opening).
        self._uncounted = uncounted
        self._verdict: GuardianVerdict | None = None
        self._repeat: Increment | None = None
        self._conversation: Increment | None = None
        #: The key's spend today and yesterday, if this process read it within a minute.
        self._days: int | None = None

    # -- the admission step -------------------------------------------------------------------

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        keys, plan = self._keys, self._plan
        increments = []
        if plan.repeat is not None:
            ttl, limit = plan.repeat
            self._repeat = Increment(keys.repeat, 1, ttl=ttl, limit=limit, evictable=True)
            increments.append(self._repeat)
        if plan.conversation is not None and keys.conversation:
            ttl, limit = plan.conversation
            if limit is not None:
                limit -= self._uncounted
            self._conversation = Increment(
                keys.conversation, 1, ttl=ttl, limit=limit, evictable=True
            )
            increments.append(self._conversation)
        if plan.spend:
            reads = [keys.spend_now, keys.spend_before]
            self._days = self._layer.day_spend.get((self._principal.key_id, keys.day))
            if self._days is None:
                reads += (keys.day_now, keys.day_before)
            return Contribution(increments, reads=reads)
        return Contribution(increments) if increments else None

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        if not result.allowed:
            return None  # another layer refused: nothing of ours stands, nothing to say
        trips = self._stateful(result)
        if self._trips:
            trips[:0] = self._trips
        verdict = self._layer.policy.verdict(self._rules, trips)
        self.record(ctx, verdict)
        return verdict.refusal

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal:
        refused = result.refused
        trips = [*self._trips, *self._stateful(result, refused=refused)]
        verdict = self._layer.policy.verdict(self._rules, trips)
        self.record(ctx, verdict)
        assert verdict.refusal is not None  # only an enforced block has a limit
        return verdict.refusal

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        refusal = unavailable(self.concern, self._layer.on_error, error)
        if refusal is None:
            # Served on the stateless rules alone.
            verdict = self._layer.policy.verdict(self._rules, self._trips)
            self.record(ctx, verdict)
            return verdict.refusal
        ctx.verdicts[self.concern] = GuardianVerdict(action="block", refusal=refusal)
        return refusal

    def _stateful(self, result: IncrManyResult, *, refused: str | None = None) -> list[checks.Trip]:
        rules, keys = self._rules, self._keys
        found: list[checks.Trip] = []
        if self._repeat is not None:
            count = result.values.get(keys.repeat, 0)
            trip = checks.repeat(rules.repeat, count, refused=refused == keys.repeat)
            if trip is not None:
                found.append(trip)
        if self._conversation is not None:
            count = result.values.get(keys.conversation, 0) + self._uncounted
            steps = rules.conversation_steps
            trip = checks.conversation_steps(steps, count, refused=refused == keys.conversation)
            if trip is not None:
                found.append(trip)
        if self._plan.spend and refused is None:
            reads = result.reads
            now, before = _int(reads.get(keys.spend_now)), _int(reads.get(keys.spend_before))
            day = self._days
            if day is None:
                day = _int(reads.get(keys.day_now)) + _int(reads.get(keys.day_before))
                self._layer.day_spend.set((self._principal.key_id, keys.day), day)
            if now + before >= self._plan.spend_floor:  # else the recent spend is below it
                window = rules.spend_spike.window_s
                # The previous window, weighted by how much of it the sliding window covers.
                recent = now + int(before * (1 - keys.into_window / window))
                spike = rules.spend_spike
                trip = checks.spend_spike(
                    spike,
                    recent,
                    window,
                    day,
                    _DAY + keys.into_day,
                    current=now,
                    into_s=keys.into_window,
                )
                if trip is not None:
                    found.append(trip)
        return found

    # -- after the response ----------------------------------------------------------------------

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        increments = []
        if admitted and self._repeat is not None and (ctx.status in (0, 429) or ctx.status >= 500):
            # An upstream error: a retry. (A window that ended meanwhile starts again at -1,
            # and ends as it would have.)
            repeat = self._repeat
            increments.append(Increment(repeat.key, -1, ttl=repeat.ttl, evictable=True))
        cost = ctx.cost.cost_micro_usd if ctx.cost is not None else None
        if admitted and cost and self._rules.spend_spike.acting != "off":
            keys, window = self._keys, self._rules.spend_spike.window_s
            increments.append(Increment(keys.spend_now, cost, ttl=2 * window))
            increments.append(Increment(keys.day_now, cost, ttl=_DAY_TTL))
        verdict = self._verdict
        published = verdict is not None and any(o.published for o in verdict.outcomes)
        if not increments and not published:
            return None

        async def then(_: object) -> None:
            if verdict is not None:
                await self.publish(verdict)

        return Settlement(increments, then if published else None)

    # -- recording ---------------------------------------------------------------------------

    def record(self, ctx: RequestContext, verdict: GuardianVerdict) -> None:
        """The verdict on the context, its header on the answer (the last verdict's: the
        step's replaces the stateless rules'), its hold on the admission."""
        if self._verdict is None:
            ctx.header_sources.append(self.headers)
        self._verdict = verdict
        ctx.verdicts[self.concern] = verdict
        ctx.admission.delay_s = max(ctx.admission.delay_s, verdict.delay_s)

    def headers(self, ctx: RequestContext) -> Iterable[Header]:
        return () if self._verdict is None else self._verdict.headers

    async def publish(self, verdict: GuardianVerdict) -> None:
        """Each block or throttle of ``verdict`` counted in its episode (events published
        once per episode); a storage failure here is logged, never raised."""
        principal = self._principal
        for outcome in verdict.outcomes:
            if outcome.published:
                try:
                    await self._layer.recorder.record(
                        principal.workspace_id, principal.key_id, outcome, self._hash
                    )
                except StorageError:
                    continue


def _int(raw: bytes | None) -> int:
    return int(raw) if raw else 0
