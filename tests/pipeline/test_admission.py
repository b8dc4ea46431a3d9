"""The admission on its own (no ASGI): one step for every participant, refusals owned by the
participant whose key refused, amendments, give-backs, storage failures, settlements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gateway_kit import MemoryStorage, StorageError
from gateway_kit.pipeline.admission import Admission, Amend, Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, Verdict
from gateway_kit.storage import Increment, IncrManyResult, Throttle

pytestmark = pytest.mark.anyio


class Steps(MemoryStorage):
    """Memory storage counting its ``incr_many`` calls."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps: list[list[str]] = []
        self.broken = False

    async def incr_many(self, increments: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise StorageError("down")
        self.steps.append([inc.key for inc in increments])
        return await super().incr_many(increments, **kwargs)


class Counter:
    """A participant with one limited counter; configurable answers."""

    def __init__(
        self,
        name: str,
        *,
        limit: int | None = None,
        refuse_after: bool = False,
        amend_to: Contribution | None = None,
        on_error: Refusal | None = None,
        throttle: Throttle | None = None,
        reads: tuple[str, ...] = (),
    ) -> None:
        self.concern = name
        self.key = f"ws_1:{name}"
        self.limit = limit
        self.refuse_after = refuse_after
        self.amend_to = amend_to
        self.amended = False
        self.on_error = on_error
        self.throttle = throttle
        self.reads = reads
        self.seen: IncrManyResult | None = None
        self.settled: list[bool] = []
        self.followed: Mapping[str, int] | None = None

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        return Contribution(
            [Increment(self.key, 1, limit=self.limit)], self.throttle, reads=self.reads
        )

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        self.seen = result
        ctx.verdicts[self.concern] = Verdict(action="pass")
        if result.allowed and self.refuse_after:
            return Refusal(429, f"{self.concern} says no", code=self.concern)
        return None

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | Amend:
        self.seen = result
        if self.amend_to is not None and not self.amended:
            self.amended = True
            return Amend(self.amend_to)
        return Refusal(402, f"{self.concern} is full", code=self.concern)

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        ctx.verdicts[self.concern] = Verdict(action="unchecked")
        return self.on_error

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        self.settled.append(admitted)

        async def then(values: Mapping[str, int]) -> None:
            self.followed = values

        return Settlement([Increment(self.key, 10)] if admitted else [], then)


async def value(storage: MemoryStorage, key: str) -> int:
    raw = await storage.get(key)
    return int(raw) if raw else 0


async def test_every_participant_runs_in_one_step_and_settles_in_one_more() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    limits, budget = Counter("limits"), Counter("budget", reads=("ws_1:note",))
    admission.join(limits)
    admission.join(budget)
    assert await admission.commit(ctx, storage) is None
    assert storage.steps == [["ws_1:limits", "ws_1:budget"]]
    assert budget.seen is not None
    assert budget.seen.reads == {"ws_1:note": None}
    assert set(ctx.verdicts) == {"limits", "budget"}
    await admission.settle(ctx, admission.settlements(ctx))
    assert len(storage.steps) == 2
    assert (limits.settled, budget.settled) == ([True], [True])
    assert budget.followed == {"ws_1:limits": 11, "ws_1:budget": 11}
    await admission.settle(ctx, admission.settlements(ctx))  # once
    assert len(storage.steps) == 2


async def test_a_refusal_is_answered_by_the_owner_of_the_key_and_changes_nothing() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    await storage.incr("ws_1:budget", 5)
    limits, budget = Counter("limits"), Counter("budget", limit=5)
    admission.join(limits)
    admission.join(budget)
    refusal = await admission.commit(ctx, storage)
    assert refusal is not None
    assert refusal.code == "budget"
    assert await value(storage, "ws_1:limits") == 0
    assert limits.seen is not None  # the others still saw the state, for their headers
    await admission.settle(ctx, admission.settlements(ctx))
    assert (limits.settled, budget.settled) == ([False], [False])
    assert await value(storage, "ws_1:limits") == 0


async def test_the_throttle_belongs_to_whoever_contributed_it() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    burst = Throttle("ws_1:burst", limit=1, period=60.0)
    admission.join(Counter("limits", throttle=burst))
    admission.join(Counter("budget"))
    assert await admission.commit(ctx, storage) is None
    second = Admission()
    second.join(Counter("limits", throttle=burst))
    second.join(Counter("budget"))
    refusal = await second.commit(RequestContext(), storage)
    assert refusal is not None
    assert refusal.code == "limits"


async def test_an_amended_contribution_runs_the_step_again() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    await storage.incr("ws_1:budget", 5)
    cheaper = Contribution([Increment("ws_1:budget-cheap", 1)])
    budget = Counter("budget", limit=5, amend_to=cheaper)
    admission.join(Counter("limits"))
    admission.join(budget)
    assert await admission.commit(ctx, storage) is None
    assert storage.steps[-1] == ["ws_1:limits", "ws_1:budget-cheap"]
    assert await value(storage, "ws_1:limits") == 1


async def test_a_refusal_decided_after_the_step_gives_every_counter_back() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    limits, guard = Counter("limits"), Counter("guard", refuse_after=True)
    admission.join(limits)
    admission.join(guard)
    refusal = await admission.commit(ctx, storage)
    assert refusal is not None
    assert refusal.code == "guard"
    assert await value(storage, "ws_1:limits") == 0
    assert await value(storage, "ws_1:guard") == 0
    await admission.settle(ctx, admission.settlements(ctx))
    assert limits.settled == [False]


async def test_a_storage_failure_asks_each_participant_and_the_first_refusal_wins() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    storage.broken = True
    closed = Refusal(503, "down", code="budget_unavailable")
    admission.join(Counter("limits"))  # open: unchecked
    admission.join(Counter("budget", on_error=closed))
    assert await admission.commit(ctx, storage) is closed
    assert {v.action for v in ctx.verdicts.values()} == {"unchecked"}


async def test_nothing_to_check_makes_no_step() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()

    class Nothing(Counter):
        def contribute(self, ctx: RequestContext) -> Contribution | None:
            return None

    admission.join(Nothing("quiet"))
    assert await admission.commit(ctx, storage) is None
    assert storage.steps == []


async def test_answering_from_inside_holds_nothing() -> None:
    storage, ctx, admission = Steps(), RequestContext(), Admission()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await storage.incr("ws_1:limits", 1)
    admission.join(Counter("limits", limit=5))
    await admission.answer(ctx, storage, Refusal(400, "bad body", code="invalid_json"), send)
    # Refused before the step: the step never runs, and nothing is counted or held.
    assert sent[0]["status"] == 400
    assert storage.steps == []
    assert await storage.get("ws_1:limits") == b"1"
    assert admission.pending == []
    assert admission.settled == []
