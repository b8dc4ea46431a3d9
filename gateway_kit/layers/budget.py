"""Budget Control: spend caps per period with warn, downgrade and block verdicts.

Before the upstream call the layer reserves the request's estimated cost (prompt tokens counted
here, output as the model usually answers, not the ``max_tokens`` ceiling) as its part of the
request's one admission step, refused as a whole when the workspace's committed spend (settled
+ in flight) would pass ``block_at`` of its cap, or a key's cap. The verdict is the band the
committed spend falls in, this request included:

- below ``warn_at``: pass; from ``warn_at``: pass with ``x-gateway-budget: warn``;
- from ``downgrade_at``: the request goes to the model's ``downgrade_to`` (``x-gateway-budget:
  downgrade``, ``x-gateway-downgraded-from``); a model without one passes with ``warn``;
- past ``block_at``: ``402 budget_exceeded``, unless the downgrade target still fits.

With wallet billing on, the same step holds the estimate against the wallet's balance
(``402 insufficient_balance`` when it cannot cover it). After the response (success, upstream
error, stream error, a client that left, cancellation) the reservation is settled with the real
cost exactly once, and the request's savings are added. ``budget.alert`` is published once per
threshold per period (a storage ``set if absent`` decides, across processes), after the
response. ``monitor`` reserves nothing, never blocks or rewrites, and says what it would have
done; ``off`` only records spend and savings. Requests without a principal (auth off) pass.

``BudgetPolicy`` makes every decision and is tested without ASGI; ``BudgetMiddleware`` reads
the request and the caps and joins the admission; ``_BudgetStep`` is its part of one request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send
from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.periods import CurrentPeriod, Period
from gateway_kit.accounts.spend import BudgetBand, BudgetThresholds, Reservation, effective_cap
from gateway_kit.chat.request import load_chat_request
from gateway_kit.config import BudgetConfig, Mode, OnError
from gateway_kit.events.models import BudgetAlertData, Event, usd
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.admission import Amend, Contribution, Settlement
from gateway_kit.pipeline.context import CONTEXT_KEY, RequestContext
from gateway_kit.pipeline.layer import PolicyLayer
from gateway_kit.pipeline.verdicts import Refusal, Verdict, unavailable
from gateway_kit.storage import Increment, IncrManyResult, Storage

__all__ = ["BudgetMiddleware", "BudgetPolicy", "BudgetVerdict"]

logger = logging.getLogger("gateway_kit.budget")

Threshold = Literal["warn", "downgrade", "block"]
_THRESHOLDS: tuple[Threshold, ...] = ("warn", "downgrade", "block")
Header = tuple[bytes, bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetVerdict(Verdict):
    """Budget Control's decision: the band, what the response says, and what to alert."""

    band: BudgetBand = "ok"
    #: ``x-gateway-budget``: warn, downgrade, block, wallet, would-<band>, unpriced, unchecked.
    header: str | None = None
    #: The model the request goes to instead (a downgrade).
    downgrade_to: str | None = None
    downgraded_from: str | None = None
    #: Thresholds the committed spend reached: ``budget.alert`` for each (once per period).
    alerts: tuple[Threshold, ...] = ()
    committed: int = 0
    cap: int | None = None

    def headers(self) -> list[Header]:
        headers = [] if self.header is None else [(b"x-gateway-budget", self.header.encode())]
        if self.downgraded_from is not None:
            headers.append((b"x-gateway-downgraded-from", self.downgraded_from.encode()))
        return headers


class BudgetPolicy:
    """Budget Control's decisions, as plain functions of spend, caps and the mode."""

    def __init__(
        self, config: BudgetConfig, *, mode: Mode, downgrades: Mapping[str, str | None]
    ) -> None:
        self.thresholds = BudgetThresholds.from_config(config)
        self.mode = mode
        self._downgrades = dict(downgrades)

    def limit(self, cap: int | None) -> int | None:
        """The most a workspace may commit, when the cap is enforced."""
        if cap is None or self.mode is not Mode.ENFORCE:
            return None
        return self.thresholds.limit(cap)

    def target(self, model: str) -> str | None:
        """Where ``model`` is downgraded to (enforce mode only)."""
        return self._downgrades.get(model) if self.mode is Mode.ENFORCE else None

    def reached(self, committed: int, cap: int | None) -> tuple[Threshold, ...]:
        """The thresholds ``committed`` has reached (block: passed)."""
        if cap is None:
            return ()
        warn, downgrade, block = self.thresholds.cuts(cap)
        if committed < warn:
            return ()
        # Block applies past its threshold, the others from theirs.
        cuts = (warn, downgrade, block + 1)
        return tuple(t for t, cut in zip(_THRESHOLDS, cuts, strict=True) if committed >= cut)

    def admitted(
        self, model: str, committed: int, cap: int | None, *, downgraded: bool = False
    ) -> BudgetVerdict:
        """The reservation went through; ``committed`` includes it."""
        if self.mode is not Mode.ENFORCE:  # off: spend is recorded, nothing is decided
            return BudgetVerdict(committed=committed, cap=cap)
        alerts = self.reached(committed, cap)
        band = self.thresholds.verdict(committed, cap) if cap is not None else "ok"
        target = self.target(model)
        if band == "downgrade" and target is None:
            band = "warn"
        if target is not None and (downgraded or band == "downgrade"):
            return BudgetVerdict(
                action="downgrade",
                band="downgrade",
                header="downgrade",
                downgrade_to=target,
                downgraded_from=model,
                alerts=alerts,
                committed=committed,
                cap=cap,
            )
        return BudgetVerdict(
            action="pass" if band == "ok" else band,
            band=band,
            header=None if band == "ok" else band,
            alerts=alerts,
            committed=committed,
            cap=cap,
        )

    def refused(
        self, reason: Literal["budget", "key_budget", "wallet"], committed: int, cap: int | None
    ) -> BudgetVerdict:
        """The reservation did not fit: a 402."""
        if reason == "wallet":
            message = "The wallet balance cannot cover this request. Top up the wallet to continue."
            code, header = "insufficient_balance", "wallet"
        else:
            what = "this API key's" if reason == "key_budget" else "the workspace's"
            message = (
                f"This request would exceed {what} budget for the period. Raise the cap or "
                "wait for the period to reset."
            )
            code, header = "budget_exceeded", "block"
        alerts: tuple[Threshold, ...] = ("block",) if reason == "budget" and cap is not None else ()
        return BudgetVerdict(
            action="block",
            refusal=Refusal(402, message, code=code, type="insufficient_quota"),
            band="block",
            header=header,
            alerts=alerts,
            committed=committed,
            cap=cap,
        )

    def monitored(self, committed: int, cap: int | None) -> BudgetVerdict:
        """Monitor mode: what enforcing would have done with ``committed`` (this request in)."""
        band = self.thresholds.verdict(committed, cap) if cap is not None else "ok"
        return BudgetVerdict(
            action="pass" if band == "ok" else f"would-{band}",
            band=band,
            header=None if band == "ok" else f"would-{band}",
            alerts=self.reached(committed, cap),
            committed=committed,
            cap=cap,
        )


class BudgetMiddleware(PolicyLayer):
    """Reserve before, settle after; verdicts as headers, a downgrade, or 402."""

    concern = "budget"

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
    ) -> None:
        super().__init__(app)
        self.gateway = gateway
        config = gateway.config.budget
        self.mode = Mode(mode or config.mode)
        self.on_error = OnError(on_error or config.on_error)
        self.policy = BudgetPolicy(
            config,
            mode=self.mode,
            downgrades={m.name: m.downgrade_to for m in gateway.config.models},
        )
        self.period = CurrentPeriod(config.period)
        # Alerts this process knows were published: spares a storage write per request.
        self.alerted: set[tuple[str, str, str]] = set()

    @property
    def storage(self) -> Storage:
        return self.gateway.storage

    def passes(self, scope: Scope) -> bool:
        ctx = scope.get(CONTEXT_KEY)
        return ctx is None or ctx.principal is None  # no caller to bill (auth off)

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        principal = ctx.principal
        assert principal is not None
        gateway = self.gateway
        loaded = await load_chat_request(
            scope, receive, max_body_bytes=gateway.config.server.max_body_bytes
        )
        if loaded is None:
            return None  # the client left
        if isinstance(loaded, Refusal):
            await self.refuse(ctx, send, loaded)
            return None
        payload, receive = loaded
        model = ctx.model or payload["model"]
        if gateway.route(model) is None:
            return receive  # the endpoint answers 404
        try:
            billing = await gateway.wallet.billing(principal.workspace_id)
            cap = key_cap = None
            if self.mode is not Mode.OFF:
                cap, key_cap = await self._caps(principal)
        except StorageError as exc:
            refusal = unavailable(self.concern, self.on_error, exc)
            if refusal is not None:
                await self.refuse(ctx, send, refusal)
                return None
            ctx.verdicts[self.concern] = verdict = BudgetVerdict(
                action="unchecked", header="unchecked"
            )
            ctx.headers.extend(verdict.headers())
            return receive
        if self.mode is Mode.OFF and not billing and not gateway.costs.priced(model):
            return receive  # nothing to hold, and no spend to record afterwards
        period = self.period.at(gateway.clock())
        ctx.admission.join(_BudgetStep(self, principal, period, payload, cap, key_cap, billing))
        return receive

    async def _caps(self, principal: Principal) -> tuple[int | None, int | None]:
        gateway = self.gateway
        settings = await gateway.ledger.settings(principal.workspace_id)
        workspace = await gateway.workspaces.cached(principal.workspace_id)
        plan = gateway.workspaces.plan(workspace) if workspace is not None else None
        cap, _ = effective_cap(settings, plan.budget_usd if plan is not None else None)
        return cap, settings.key_caps.get(principal.key_id)

    async def alert(
        self, ctx: RequestContext, workspace_id: str, period: Period, verdict: BudgetVerdict
    ) -> None:
        """Publish ``budget.alert`` for each threshold reached that nobody has published this
        period (any process)."""
        for threshold in verdict.alerts:
            mark = (workspace_id, period.id, threshold)
            if mark in self.alerted or verdict.cap is None:
                continue
            first = await self.storage.set(
                f"{workspace_id}:budget:alert:{period.id}:{threshold}",
                b"1",
                ttl=period.seconds + 86_400,
                if_absent=True,
            )
            if len(self.alerted) > 100_000:
                self.alerted.clear()
            self.alerted.add(mark)
            if not first:
                continue
            data = BudgetAlertData(
                cap_usd=usd(verdict.cap),
                spent_usd=usd(max(0, min(verdict.committed, 2**53))),
                verdict=threshold,
                threshold_pct=int(self.policy.thresholds.fraction(threshold) * 100),
                period_reset_at=datetime.fromtimestamp(period.end.timestamp(), UTC),
            )
            moment = datetime.fromtimestamp(self.gateway.clock(), UTC)
            event = Event.create(data, workspace_id=workspace_id, now=moment)
            ctx.events.append(event)
            await self.gateway.events.publish(event)


class _BudgetStep:
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

    def _ops(self, amount: int) -> Contribution:
        layer, principal = self._layer, self._principal
        ledger = layer.gateway.ledger
        extra = []
        if self._billing:
            # The wallet's balance is minus its debt: a limit of 0 keeps it from going below 0.
            extra.append(Increment(self._debt, amount, limit=0))
        enforce = layer.mode is Mode.ENFORCE
        reads = [ledger.key(principal.workspace_id, self._period, "committed")]
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
    def _debt(self) -> str:
        return self._layer.gateway.wallet.debt_key(self._principal.workspace_id)

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        layer = self._layer
        self._model = ctx.model or self._payload["model"]
        if self._cap is None and self._key_cap is None and not self._billing:
            return None  # nothing to hold against: spend is recorded after the response
        estimate = layer.gateway.costs.reservation(self._model, self._payload)
        if estimate is None:
            # A model nobody priced cannot be held against a cap: served, and said so.
            self._record(ctx, BudgetVerdict(action="unpriced", header="unpriced"))
            return None
        self._estimate = estimate
        self._in_step = True
        return self._ops(estimate)

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
            verdict = layer.policy.monitored(before + self._estimate, self._cap)
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
                holds={self._debt: self._estimate} if self._billing else {},
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
            cheaper = layer.gateway.costs.reservation(target, self._payload)
            if cheaper is not None:
                # Past the cap at this model's price: the downgrade target may still fit.
                self._downgraded = True
                self._estimate = cheaper
                return Amend(self._ops(cheaper))
        verdict = layer.policy.refused(reason, committed, self._cap)
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
                extra=[(self._debt, actual)] if self._billing else (),
            )
        verdict = self._verdict

        async def then(values: Mapping[str, int]) -> None:
            layer = self._layer
            if self._billing and actual and self._debt in values:
                await layer.gateway.wallet.check_low_balance(
                    principal.workspace_id, -values[self._debt]
                )
            if verdict is not None and verdict.alerts:
                await layer.alert(ctx, principal.workspace_id, period, verdict)

        if not increments and (verdict is None or not verdict.alerts):
            return None
        return Settlement(increments, then)
