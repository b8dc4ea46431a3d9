"""``CacheCounts``: the cache layer's share of the request's admission: with a shared store,
the answer read in the step (no round trip of its own); after the response, the workspace's
counters (``cache.counts``: the outcome, ``stored`` when an answer was kept, the best
similarity's histogram bucket) and, with a shared store, the write of a kept answer."""

from __future__ import annotations

from collections.abc import Mapping

from gateway_kit.cache.counts import CacheCounters
from gateway_kit.cache.service import OUTCOMES, bucket_of, outcome_key
from gateway_kit.exceptions import StorageError
from gateway_kit.layers.cache.policy import CacheVerdict
from gateway_kit.pipeline.admission import Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.storage.base import IncrManyResult

__all__ = ["CacheCounts"]

#: The extras' key of an answer kept: ``True`` when it is in this process's store already,
#: else the write (to the storage) to run after the response, with the settlement.
STORED = "cache.stored"


class CacheCounts:
    """One request's: its counters after the response, and with a shared store the answer's
    key read in the admission step (``read``; the value in ``read_value`` once ``read_done``)."""

    concern = "cache"

    def __init__(self, counters: CacheCounters) -> None:
        self._counters = counters
        self.read: str | None = None
        self.read_done = False
        self.read_value: bytes | None = None

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        return Contribution(reads=(self.read,)) if self.read is not None else None

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        if self.read is not None and self.read in result.reads:
            self.read_value, self.read_done = result.reads[self.read], True
        return None

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal:
        raise AssertionError("the cache contributes no key to refuse")  # pragma: no cover

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        return None

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        verdict = ctx.verdicts.get(self.concern)
        if not isinstance(verdict, CacheVerdict) or verdict.action not in OUTCOMES:
            return None
        write = ctx.extras.get(STORED)
        principal = ctx.principal
        if principal is not None:  # counted per workspace, written once a second
            add, workspace_id = self._counters.add, principal.workspace_id
            add(outcome_key(workspace_id, verdict.action))
            if write is not None:
                add(outcome_key(workspace_id, "stored"))
            best = verdict.similarity if verdict.similarity is not None else verdict.best
            if best is not None:
                add(outcome_key(workspace_id, f"similarity:{bucket_of(best)}"))
        if write is None or write is True:
            return None

        async def then(_: Mapping[str, int]) -> None:
            await write()

        return Settlement(then=then)
