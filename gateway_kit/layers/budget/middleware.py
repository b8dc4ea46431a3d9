"""``BudgetMiddleware``: reads the request and the caps, joins the admission, publishes the
alerts once per threshold and period."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send
from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.periods import CurrentPeriod, Period
from gateway_kit.accounts.spend import effective_cap
from gateway_kit.chat.model import resolve_model
from gateway_kit.chat.request import RequestKind, load_request
from gateway_kit.config import Mode, OnError
from gateway_kit.events.models import BudgetAlertData, Event, usd
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.layers._base import GatewayLayer
from gateway_kit.layers.budget.policy import BudgetPolicy, BudgetVerdict, Threshold
from gateway_kit.layers.budget.step import BudgetStep
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, unavailable

__all__ = ["BudgetMiddleware"]


class BudgetMiddleware(GatewayLayer):
    """Reserve before, settle after; verdicts as headers, a downgrade, or 402."""

    concern = "budget"
    off_passes = False  # off still records spend and savings

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
    ) -> None:
        config = gateway.config.budget
        super().__init__(app, gateway=gateway, section=config, mode=mode, on_error=on_error)
        self.policy = BudgetPolicy(
            config,
            mode=self.mode,
            downgrades={m.name: m.downgrade_to for m in gateway.config.models},
        )
        self.period = CurrentPeriod(config.period)
        self._kind: RequestKind = "embedding" if self.request_kind == "embedding" else "chat"
        # Alerts this process knows were published: spares a storage write per request.
        self.alerted: set[tuple[str, str, str]] = set()

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        principal = ctx.principal
        assert principal is not None
        gateway = self.gateway
        loaded = await load_request(
            scope, receive, max_body_bytes=gateway.config.server.max_body_bytes, kind=self._kind
        )
        if loaded is None:
            return None  # the client left
        if isinstance(loaded, Refusal):
            await self.refuse(ctx, send, loaded)
            return None
        payload, receive = loaded
        route = resolve_model(ctx, gateway, payload, self._kind)
        if isinstance(route, Refusal):
            await self.refuse(ctx, send, route)  # no such model: nothing is held for it
            return None
        model = route.name
        try:
            billing = await gateway.wallet.billing(principal.workspace_id)
            cap = key_cap = None
            if self.mode is not Mode.OFF:
                cap, key_cap = await self._caps(ctx, principal)
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
        ctx.admission.join(BudgetStep(self, principal, period, payload, cap, key_cap, billing))
        return receive

    async def _caps(
        self, ctx: RequestContext, principal: Principal
    ) -> tuple[int | None, int | None]:
        gateway = self.gateway
        settings = await gateway.ledger.settings(principal.workspace_id)
        workspace = ctx.workspace or await gateway.workspaces.cached(principal.workspace_id)
        plan = gateway.workspaces.plan(workspace) if workspace is not None else None
        cap, _ = effective_cap(settings, plan.budget_usd if plan is not None else None)
        return cap, settings.key_caps.get(principal.key_id)

    async def alert(
        self,
        ctx: RequestContext,
        workspace_id: str,
        period: Period,
        thresholds: Iterable[Threshold],
        committed: int,
        cap: int | None,
    ) -> None:
        """Publish ``budget.alert`` for each of ``thresholds`` (reached by the ``committed``
        spend) that nobody has published this period (any process)."""
        if cap is None:
            return
        for threshold in thresholds:
            mark = (workspace_id, period.id, threshold)
            if mark in self.alerted:
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
                cap_usd=usd(cap),
                spent_usd=usd(max(0, min(committed, 2**53))),
                verdict=threshold,
                threshold_pct=int(self.policy.thresholds.fraction(threshold) * 100),
                period_reset_at=datetime.fromtimestamp(period.end.timestamp(), UTC),
            )
            moment = datetime.fromtimestamp(self.gateway.clock(), UTC)
            event = Event.create(data, workspace_id=workspace_id, now=moment)
            ctx.events.append(event)
            await self.gateway.events.publish(event)
