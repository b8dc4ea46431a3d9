"""The admission: every layer's storage operations for a request, run as one atomic step.

A layer that keeps state for a request (Limits' quota counter and burst throttle, Budget's
reservation, later Guardian's windows and the cache lookup) joins the request's ``Admission``
with a ``Participant``. Nothing runs while the layers pass the request inward. At the commit
point (the endpoint, just before the upstream call, or the innermost layer when embedded alone)
every participant contributes its increments, its throttle and the keys it wants to read, and
they run as one ``Storage.incr_many``: one round trip on Redis, one transaction on SQLite.

- Applied: each participant reads its verdict off the result, in the layers' order. If one
  still refuses (a decision made from what it read), those after it record nothing (the
  request never reached them) and every counter the step took is given back (a throttle's
  token is not: GCRA has nothing to give back).
- Refused: the storage names the key that refused; its participant either answers with a
  ``Refusal`` (nothing was changed) or amends its contribution (Budget's downgrade to a cheaper
  model, a monitor-mode layer dropping its limit), and the step runs again.
- Storage failed: each participant applies its ``on_error`` (closed: 503; open: unchecked).

After the response (``settle``, called once the response is done, off the client's path) the
participants' settlements (a quota refund, the budget's real cost) run as one step too, then
their follow-ups (alerts, low-balance checks: the events they publish are also recorded on
``ctx.events``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import anyio

from gateway_kit._asgi.types import Send
from gateway_kit.exceptions import StorageError
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.storage.base import THROTTLED, Increment, IncrManyResult, Storage, Throttle
from gateway_kit.storage.checks import partition_of

if TYPE_CHECKING:
    from gateway_kit.pipeline.context import RequestContext

__all__ = ["Admission", "Amend", "Contribution", "Participant", "Settlement"]

logger = logging.getLogger("gateway_kit.pipeline")

#: Reruns of one step at most (each participant may amend a few times, e.g. a downgrade).
_MAX_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class Contribution:
    """One participant's part of the admission step."""

    increments: Sequence[Increment] = ()
    throttle: Throttle | None = None
    reads: Sequence[str] = ()
    #: The step must be seen through to its settlement even if the request is cancelled
    #: while its reply is on the way (money held: a reservation); the step is then shielded.
    must_settle: bool = False

    def owns(self, key: str | None) -> bool:
        """Whether ``key`` (a refused key) is one of this contribution's counters."""
        return any(inc.key == key for inc in self.increments)


@dataclass(frozen=True, slots=True)
class Amend:
    """A refused participant's new contribution: run the step again with it."""

    contribution: Contribution | None


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a participant does once the response is done: increments (of one partition, each
    key once; run in one step with the other participants'), then ``then`` with the values
    after."""

    increments: Sequence[Increment] = ()
    then: Callable[[Mapping[str, int]], Awaitable[None]] | None = None


class Participant(Protocol):
    """A layer's share of one request's admission; one object per request."""

    #: The layer's concern (``limits``, ``budget``...): its verdict's key on the context.
    concern: str

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        """The operations to run; ``None`` when there is nothing to check. Called at the
        commit point, when every layer has joined: anything to await (a cached plan, say) is
        read when the layer joins, not here."""
        ...

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        """Record the verdict. When ``result.allowed`` the step was applied, and a ``Refusal``
        stops the request (every counter the step took is given back). Otherwise another
        participant refused it: nothing changed, and the answer is ignored."""
        ...

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | Amend:
        """One of this participant's keys (or its throttle) refused the step."""
        ...

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        """The step could not run: ``on_error`` decides (see ``verdicts.unavailable``)."""
        ...

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        """After the response: what to write. ``admitted`` is whether the step's operations
        stand (applied and not given back); without them there is nothing to settle, but
        follow-ups such as alerts may still be due."""
        ...


@dataclass(slots=True)
class Admission:
    """The participants of one request, the step's outcome, and the settlement."""

    pending: list[Participant] = field(default_factory=list)
    #: Participants whose step ran (or was refused), with whether it was applied.
    settled: list[tuple[Participant, bool]] = field(default_factory=list)
    storage: Storage | None = None
    #: How long to hold the request once it is admitted (a throttle within its bound): any
    #: participant may ask, from ``decide`` or before the commit; the longest wins.
    delay_s: float = 0.0

    def join(self, participant: Participant) -> None:
        self.pending.append(participant)

    async def commit(self, ctx: RequestContext, storage: Storage) -> Refusal | None:
        """Run the pending participants' step; the refusal to answer with, if any."""
        if ctx.tracing is not None and self.pending:
            with ctx.tracing.span("gateway_kit.admission"):
                return await self._commit(ctx, storage)
        return await self._commit(ctx, storage)

    async def _commit(self, ctx: RequestContext, storage: Storage) -> Refusal | None:
        participants, self.pending = self.pending, []
        if not participants:
            return None
        self.storage = storage
        contributions = [p.contribute(ctx) for p in participants]
        for _ in range(_MAX_ATTEMPTS):
            try:
                if any(c is not None and c.must_settle for c in contributions):
                    # A step that ran in storage must come back here to be settled, even if
                    # the request is cancelled while its reply is on the way.
                    with anyio.CancelScope(shield=True):
                        result = await self._run(storage, contributions)
                else:
                    result = await self._run(storage, contributions)
            except StorageError as exc:
                self.settled.extend((p, False) for p in participants)
                # Only those with something in the step are left unchecked by its failure.
                return _first(
                    [
                        p.failed(ctx, exc)
                        for p, c in zip(participants, contributions, strict=True)
                        if c is not None
                    ]
                )
            if result is not None and not result.allowed:
                owner = _owner(participants, contributions, result)
                answer = participants[owner].refused(ctx, result)
                if isinstance(answer, Amend):
                    contributions[owner] = answer.contribution
                    continue
                # Final: the others record their verdicts from the state as it stands.
                for index, participant in enumerate(participants):
                    if index != owner:
                        participant.decide(ctx, result)
                self.settled.extend((p, False) for p in participants)
                return answer
            if result is None:  # nobody had anything to check
                self.settled.extend((p, False) for p in participants)
                await self._hold()
                return None
            # In the layers' order, up to the first that refuses: those after it never saw
            # the request (their share of the step is given back with the rest), so they
            # record no verdict (Budget's "pass" once stood on a request Guardian refused).
            refusal = None
            for participant in participants:
                refusal = participant.decide(ctx, result)
                if refusal is not None:
                    break
            if refusal is not None:
                with anyio.CancelScope(shield=True):
                    await self._give_back(storage, contributions)
            self.settled.extend((p, refusal is None) for p in participants)
            if refusal is None:
                await self._hold()
            return refusal
        raise RuntimeError("the admission step kept being amended")

    async def _hold(self) -> None:
        if self.delay_s > 0:
            await anyio.sleep(self.delay_s)

    async def answer(
        self, ctx: RequestContext, storage: Storage, refusal: Refusal, send: Send
    ) -> None:
        """Answer with ``refusal`` from inside the stack, before the step: a request refused
        before its admission (an invalid body, an unknown model, a policy's block) holds
        nothing and changes no counter, so a burst of bad requests can never starve good ones
        of quota. The pending participants are dropped unrun."""
        self.pending.clear()
        await refusal.send(send)

    async def _run(
        self, storage: Storage, contributions: Sequence[Contribution | None]
    ) -> IncrManyResult | None:
        increments: list[Increment] = []
        reads: list[str] = []
        throttle: Throttle | None = None
        for contribution in contributions:
            if contribution is None:
                continue
            increments.extend(contribution.increments)
            reads.extend(contribution.reads)
            if contribution.throttle is not None:
                if throttle is not None:
                    raise ValueError("two layers contributed a throttle to one admission step")
                throttle = contribution.throttle
        if not increments and throttle is None and not reads:
            return None
        if reads:
            return await storage.incr_many(increments, throttle=throttle, reads=reads)
        return await storage.incr_many(increments, throttle=throttle)

    async def _give_back(
        self, storage: Storage, contributions: Sequence[Contribution | None]
    ) -> None:
        refunds = [
            # With the TTL and eviction the counter was made with: a key gone meanwhile (its
            # window over) comes back for as long, not for ever.
            Increment(inc.key, -inc.amount, ttl=inc.ttl, evictable=inc.evictable)
            for contribution in contributions
            if contribution is not None
            for inc in contribution.increments
            if inc.amount
        ]
        if refunds:
            try:
                await storage.incr_many(refunds)
            except StorageError as exc:
                logger.error("could not give back a refused request's counters: %s", exc)

    def settlements(self, ctx: RequestContext) -> list[Settlement]:
        """What the participants leave to do once the response is done (asked once)."""
        done, self.settled = self.settled, []
        return [s for p, admitted in done if (s := p.settle(ctx, admitted)) is not None]

    async def settle(self, ctx: RequestContext, settlements: Sequence[Settlement]) -> None:
        """Run ``settlements``: their increments as one step, then their follow-ups. Never
        raises; shield it from cancellation."""
        writing = [s.increments for s in settlements if s.increments]
        values: dict[str, int] = {}
        if writing and self.storage is not None:
            # One participant's increments are one step as they are; several are grouped.
            groups = (
                writing
                if len(writing) == 1
                else _by_partition([inc for increments in writing for inc in increments])
            )
            try:
                for group in groups:
                    values.update((await self.storage.incr_many(group)).values)
            except StorageError as exc:
                logger.error("settlement failed for %s: %s", ctx.request_id, exc)
                return
        for settlement in settlements:
            if settlement.then is not None:
                try:
                    await settlement.then(values)
                except Exception:
                    logger.exception("a settlement follow-up failed for %s", ctx.request_id)


def _first(answers: Sequence[Refusal | None]) -> Refusal | None:
    return next((answer for answer in answers if answer is not None), None)


def _owner(
    participants: Sequence[Participant],
    contributions: Sequence[Contribution | None],
    result: IncrManyResult,
) -> int:
    """The participant whose key (or throttle) refused the step."""
    for index, contribution in enumerate(contributions):
        if contribution is None:
            continue
        if result.refused == THROTTLED:
            if contribution.throttle is not None:
                return index
        elif contribution.owns(result.refused):
            return index
    raise RuntimeError(f"no participant owns the refused key {result.refused!r}")


def _by_partition(increments: Sequence[Increment]) -> list[list[Increment]]:
    """Settlement increments grouped by partition, each key once (amounts summed)."""
    groups: dict[str, dict[str, Increment]] = {}
    for inc in increments:
        group = groups.setdefault(partition_of(inc.key), {})
        seen = group.get(inc.key)
        group[inc.key] = (
            inc
            if seen is None
            else Increment(inc.key, seen.amount + inc.amount, seen.ttl, evictable=seen.evictable)
        )
    return [list(group.values()) for group in groups.values()]
