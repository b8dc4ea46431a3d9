"""Budget Control's part of one request: the reservation it contributes to the admission,
its verdict from the step's result, and the settlement once the response is done."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.periods import Period
from gateway_kit.accounts.spend import Reservation
from gateway_kit.config import Mode
from gateway_kit.exceptions import StorageError
from gateway_kit.layers.budget.policy import BudgetVerdict
from gateway_kit.pipeline.admission import Amend, Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, unavailable
from gateway_kit.storage import Increment, IncrManyResult
from gateway_kit.storage.checks import INT64_MAX

if TYPE_CHECKING:
    from gateway_kit.layers.budget.middleware import BudgetMiddleware

__all__ = ["BudgetStep"]


class BudgetStep:
    """Budget Control's part of one request's admission and settlement."""

    concern = "budget"

    def __init__(
        self,
        layer: BudgetMiddleware,
        principal: Principal,
        period: Period,
        payload: dict[str, Any],
        cap: int | None,
        key_cap: int | None,
        billing: bool,
    ) -> None:
        self._layer = layer
        self._principal = principal
        self._period = period
        self._payload = payload
        self._cap = cap
        self._key_cap = key_cap
        self._billing = billing
        self._model = ""
        self._estimate = 0
        self._downgraded = False
        self._reservation: Reservation | None = None
        self._verdict: BudgetVerdict | None = None
        self._in_step = False
        self._refused = False

    def _ops(self, amount: int) -> Contribution:
        layer, principal = self._layer, self._principal
        ledger = layer.gateway.ledger
        extra = []
        if self._billing:
            # The wallet's balance is minus its debt: a limit of 0 keeps it from going below 0.
            # What is held in flight is counted too, so that the balance spent can be told.
            extra.append(Increment(self._debt, amount, limit=0))
            extra.append(Increment(self._held, amount))
        enforce = layer.mode is Mode.ENFORCE
        reads = [ledger.key(principal.workspace_id, self._period, "committed")]
        if layer.mode is Mode.MONITOR and self._key_cap is not None:
            reads.append(self._key_spend)  # monitor tells a key's cap too
        if layer.mode is Mode.MONITOR and not self._billing:
            return Contribution(reads=reads)  # monitor holds nothing
        increments = ledger.reservation(
            principal.workspace_id,
            principal.key_id,
            self._period,
            amount,
            cap=layer.policy.limit(self._cap),
            key_cap=self._key_cap if enforce else None,
            extra=extra,
        )
        reads = reads if layer.mode is Mode.MONITOR else []
        return Contribution(increments, reads=reads, must_settle=True)

    @property
    def _key_spend(self) -> str:
        """The key's spend counter."""
        principal = self._principal
        return self._layer.gateway.ledger.key(
            principal.workspace_id, self._period, f"key:{principal.key_id}"
        )

    @property
    def _debt(self) -> str:
        return self._layer.gateway.wallet.debt_key(self._principal.workspace_id)

    @property
    def _held(self) -> str:
        return self._layer.gateway.wallet.held_key(self._principal.workspace_id)

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        self._model = ctx.model or self._payload["model"]
        if self._cap is None and self._key_cap is None and not self._billing:
            return None  # nothing to hold against: spend is recorded after the response
        estimate = self._reservation_of(self._model)
        if estimate is None:
            # A model nobody priced cannot be held against a cap: served, and said so.
            self._record(ctx, BudgetVerdict(action="unpriced", header="unpriced"))
            return None
        self._estimate = estimate
        self._in_step = True
        return self._ops(estimate)

    def _reservation_of(self, model: str) -> int | None:
        estimate = self._layer.gateway.costs.reservation(model, self._payload)
        # A second line of defence behind the request's validation (n, max_tokens...): whatever
        # the request and the prices, the amount stays one a 64-bit counter holds, so the step
        # refuses it (every reservation has a limit: the cap, a key's cap or the wallet's 0)
        # instead of failing on an increment no storage can make.
        if estimate is None:
            return None
        if self._billing:
            # At least a micro-dollar against the wallet: a request whose estimate rounds to
            # $0 (a short embedding) was served by an empty wallet, any number of times.
            estimate = max(1, estimate)
        return min(estimate, INT64_MAX)

    def _record(self, ctx: RequestContext, verdict: BudgetVerdict) -> None:
        self._verdict = verdict
        ctx.verdicts[self.concern] = verdict
        ctx.headers.extend(verdict.headers())

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        if not result.allowed or not self._in_step:
            return None
        layer, principal = self._layer, self._principal
        committed_key = layer.gateway.ledger.key(principal.workspace_id, self._period, "committed")
        if layer.mode is Mode.MONITOR:
            before = int(result.reads.get(committed_key) or 0)
            key_over = (
                self._key_cap is not None
                and int(result.reads.get(self._key_spend) or 0) + self._estimate > self._key_cap
            )
            verdict = layer.policy.monitored(before + self._estimate, self._cap, key_over=key_over)
        else:
            verdict = layer.policy.admitted(
                self._model, result.values[committed_key], self._cap, downgraded=self._downgraded
            )
        if layer.mode is not Mode.MONITOR or self._billing:
            self._reservation = Reservation(
                principal.workspace_id,
                principal.key_id,
                self._period,
                self._estimate,
                holds={self._debt: self._estimate, self._held: self._estimate}
                if self._billing
                else {},
            )
        if verdict.downgrade_to is not None:
            ctx.model = verdict.downgrade_to
        self._record(ctx, verdict)
        return None

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | Amend:
        layer, principal = self._layer, self._principal
        committed = result.values.get(
            layer.gateway.ledger.key(principal.workspace_id, self._period, "committed"), 0
        )
        reason: Literal["budget", "key_budget", "wallet"] = "budget"
        if result.refused == self._debt:
            reason = "wallet"
        elif result.refused is not None and ":key:" in result.refused:
            reason = "key_budget"
        target = layer.policy.target(self._model)
        if reason == "budget" and target is not None and not self._downgraded:
            cheaper = self._reservation_of(target)
            if cheaper is not None:
                # Past the cap at this model's price: the downgrade target may still fit.
                self._downgraded = True
                self._estimate = cheaper
                return Amend(self._ops(cheaper))
        verdict = layer.policy.refused(reason, committed, self._cap)
        self._refused = True
        self._record(ctx, verdict)
        assert verdict.refusal is not None
        return verdict.refusal

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        refusal = unavailable(self.concern, self._layer.on_error, error)
        if refusal is None:
            self._record(ctx, BudgetVerdict(action="unchecked", header="unchecked"))
        return refusal

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        cost = ctx.cost
        actual = (cost.cost_micro_usd or 0) if cost is not None else 0
        savings = cost.savings_micro_usd if cost is not None else 0
        reservation = self._reservation if admitted else None
        principal, period = self._principal, self._period
        increments: list[Increment] = []
        if reservation is not None or actual or savings:
            increments = self._layer.gateway.ledger.settlement(
                principal.workspace_id,
                principal.key_id,
                period,
                reservation,
                actual,
                savings,
                extra=[(self._debt, actual), (self._held, 0)] if self._billing else (),
            )
        # Alerts follow the spend settled, never a reservation: a burst of requests reserving
        # their estimates once took the committed figure past 80 % and 90 % while 7 % was
        # spent, and each threshold alerts once a period, so the real crossings said nothing.
        # ``spent_usd`` is what the period has settled, as the event's field says.
        cap = self._cap
        settled_key = self._layer.gateway.ledger.key(principal.workspace_id, period, "settled")

        async def then(values: Mapping[str, int]) -> None:
            layer = self._layer
            if self._billing and actual and self._debt in values:
                # The balance spent: what other requests hold in flight is not gone yet (low
                # balances once alerted on reservations, then not on the real drop).
                spent_balance = values.get(self._held, 0) - values[self._debt]
                ctx.events += await layer.gateway.wallet.check_low_balance(
                    principal.workspace_id, spent_balance
                )
            settled = values.get(settled_key)
            if settled is not None and (reached := layer.policy.spent(settled, cap)):
                await layer.alert(ctx, principal.workspace_id, period, reached, settled, cap)

        if not increments:
            return None
        return Settlement(increments, then)
