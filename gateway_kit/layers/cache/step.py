"""``CacheCounts``: the cache layer's share of the request's admission: nothing to check
before, and the workspace's outcome counter (``hit``, ``miss``, ``bypass``; ``stored`` when
an answer was kept) written with the other layers' settlements, in the same step."""

from __future__ import annotations

from gateway_kit.cache.service import outcome_key
from gateway_kit.exceptions import StorageError
from gateway_kit.layers.cache.policy import CacheVerdict
from gateway_kit.pipeline.admission import Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.storage.base import Increment, IncrManyResult

__all__ = ["CacheCounts"]

#: What the extras hold when an answer was kept (set by the layer's store callback).
STORED = "cache.stored"


class CacheCounts:
    concern = "cache"

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        return None

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        return None

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal:
        raise AssertionError("the cache contributes no key to refuse")  # pragma: no cover

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        return None

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        verdict = ctx.verdicts.get(self.concern)
        principal = ctx.principal
        if not isinstance(verdict, CacheVerdict) or principal is None:
            return None
        outcome = {"hit": "hit", "miss": "miss", "bypass": "bypass"}.get(verdict.action)
        if outcome is None:
            return None
        increments = [Increment(outcome_key(principal.workspace_id, outcome), 1)]
        if ctx.extras.get(STORED):
            increments.append(Increment(outcome_key(principal.workspace_id, "stored"), 1))
        return Settlement(increments)
