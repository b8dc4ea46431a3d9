"""Budget Control: spend caps per period with warn, downgrade and block verdicts.

Before the upstream call the layer reserves the request's estimated cost (prompt tokens counted
here, output as the model usually answers, not the ``max_tokens`` ceiling) in one atomic storage
operation, refused as a whole when the workspace's committed spend (settled + in flight) would
pass ``block_at`` of its cap, or a key's cap. The verdict is the band the committed spend falls
in, this request included:

- below ``warn_at``: pass; from ``warn_at``: pass with ``x-gateway-budget: warn``;
- from ``downgrade_at``: the request goes to the model's ``downgrade_to`` (``x-gateway-budget:
  downgrade``, ``x-gateway-downgraded-from``); a model without one passes with ``warn``;
- past ``block_at``: ``402 budget_exceeded``, unless the downgrade target still fits.

With wallet billing on, the estimate is held from the workspace's wallet in the same atomic
step (``402 insufficient_balance`` when the balance cannot cover it), whatever the mode.

After the response (its end, an upstream error, a client that left, cancellation) the
reservation is settled with the real cost exactly once, and the request's savings are added.
``budget.alert`` is published once per threshold per period (a storage ``set if absent``
decides, across processes). ``monitor`` reserves nothing, never blocks or rewrites, and says
what it would have done; ``off`` only records spend and savings. Requests without a principal
(auth off) pass through.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Literal

import anyio

from gateway_kit._asgi import ASGIApp, Message, Receive, Scope, Send, send_error
from gateway_kit.accounts.periods import CurrentPeriod, Period
from gateway_kit.accounts.spend import BudgetBand, BudgetThresholds, Reservation, effective_cap
from gateway_kit.chat.request import RequestError, load_chat_request
from gateway_kit.cost.costs import RequestCost
from gateway_kit.events.models import BudgetAlertData, Event, usd
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import get_context
from gateway_kit.storage import Increment

__all__ = ["BudgetMiddleware", "BudgetPolicy", "Verdict"]

logger = logging.getLogger("gateway_kit.budget")

Verdict = BudgetBand
_ALERTS: tuple[Literal["warn", "downgrade", "block"], ...] = ("warn", "downgrade", "block")


BudgetPolicy = BudgetThresholds


class BudgetMiddleware:
    """Reserve before, settle after; verdicts as headers, a downgrade, or 402."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Literal["enforce", "monitor", "off"] | None = None,
        on_error: Literal["open", "closed"] | None = None,
    ) -> None:
        self.app = app
        self._gateway = gateway
        config = gateway.config.budget
        self._mode = mode or config.mode
        self._on_error = on_error or config.on_error
        self._policy = BudgetPolicy.from_config(config)
        self._period = CurrentPeriod(config.period)
        self._downgrades = {m.name: m.downgrade_to for m in gateway.config.models}
        # Alerts this process knows were published: spares a storage write per request.
        self._alerted: set[tuple[str, str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope) if scope["type"] == "http" else None
        principal = ctx.principal if ctx is not None else None
        if ctx is None or principal is None:
            await self.app(scope, receive, send)
            return
        gateway = self._gateway
        loaded = await load_chat_request(
            scope, receive, max_body_bytes=gateway.config.server.max_body_bytes
        )
        if loaded is None:
            return
        if isinstance(loaded, RequestError):
            await loaded.send(send)
            return
        payload, receive = loaded
        model = ctx.model or payload["model"]
        if gateway.route(model) is None:
            await self.app(scope, receive, send)  # the endpoint answers 404
            return
        workspace_id, key_id = principal.workspace_id, principal.key_id
        period = self._period.at(gateway.clock())
        headers: list[tuple[bytes, bytes]] = []
        reservation: Reservation | None = None
        billing = False
        try:
            billing = await gateway.wallet.billing(workspace_id)
            cap, key_cap = (None, None)
            if self._mode != "off":
                cap, key_cap = await self._caps(workspace_id, key_id)
            if cap is not None or key_cap is not None or billing:
                # Shielded: a reservation that ran in storage must come back here to be
                # settled, even if the request is cancelled while its reply is on the way.
                with anyio.CancelScope(shield=True):
                    outcome = await self._reserve(
                        workspace_id, key_id, period, model, payload, cap, key_cap, billing
                    )
                if isinstance(outcome, str):
                    await self._refuse(send, outcome)
                    return
                reservation, headers, target = outcome
                if target is not None:
                    ctx.model = target
        except StorageError as exc:
            logger.error("budget unavailable (%s): %s", self._on_error, exc)
            if self._on_error == "closed":
                await send_error(
                    send,
                    503,
                    "The budget cannot be checked right now; try again shortly.",
                    type="api_error",
                    code="budget_unavailable",
                )
                return
            headers = [(b"x-gateway-budget", b"unchecked")]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and headers:
                message["headers"] = [*message.get("headers", ()), *headers]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            # Shielded: a request cancelled by a disconnect still settles its reservation.
            with anyio.CancelScope(shield=True):
                await self._settle(ctx.cost, workspace_id, key_id, period, reservation, billing)

    async def _caps(self, workspace_id: str, key_id: str) -> tuple[int | None, int | None]:
        gateway = self._gateway
        settings = await gateway.ledger.settings(workspace_id)
        workspace = await gateway.workspaces.cached(workspace_id)
        plan = gateway.workspaces.plan(workspace) if workspace is not None else None
        cap, _ = effective_cap(settings, plan.budget_usd if plan is not None else None)
        return cap, settings.key_caps.get(key_id)

    async def _reserve(
        self,
        workspace_id: str,
        key_id: str,
        period: Period,
        model: str,
        payload: dict[str, object],
        cap: int | None,
        key_cap: int | None,
        billing: bool,
    ) -> tuple[Reservation | None, list[tuple[bytes, bytes]], str | None] | str:
        """(reservation, headers, downgrade target) when the request may go; else why not:
        ``budget``, ``key_budget`` or ``wallet``."""
        costs, ledger = self._gateway.costs, self._gateway.ledger
        estimate = costs.reservation(model, payload)
        if estimate is None:
            # A model nobody priced cannot be held against a cap: served, and said so.
            return None, [(b"x-gateway-budget", b"unpriced")], None
        headers: list[tuple[bytes, bytes]] = []
        enforce = self._mode == "enforce"
        if self._mode == "monitor":
            headers = await self._would(workspace_id, period, estimate, cap)
            if not billing:
                return None, headers, None
        debt = self._gateway.wallet.debt_key(workspace_id)

        async def hold(amount: int) -> tuple[Reservation | None, str | None, int]:
            # The wallet's balance is minus its debt: a limit of 0 keeps it from going below 0.
            extra = [Increment(debt, amount, limit=0)] if billing else []
            return await ledger.reserve(
                workspace_id,
                key_id,
                period,
                amount,
                cap=self._policy.limit(cap) if cap is not None and enforce else None,
                key_cap=key_cap if enforce else None,
                extra=extra,
            )

        target = self._downgrades.get(model) if enforce else None
        reservation, refused, committed = await hold(estimate)
        downgrade = False
        if reservation is None and target is not None:
            cheaper = costs.reservation(target, payload)
            if cheaper is not None:
                reservation, refused, committed = await hold(cheaper)
                downgrade = reservation is not None
        if reservation is None:
            if refused == debt:
                return "wallet"
            if refused is not None and ":key:" in refused:
                return "key_budget"
            if cap is not None:
                await self._alert(workspace_id, period, "block", committed, cap)
            return "budget"
        if not enforce:
            return reservation, headers, None
        verdict = await self._verdict(workspace_id, period, committed, cap)
        if verdict == "downgrade" and target is None:
            verdict = "warn"
        if (downgrade or verdict == "downgrade") and target is not None:
            headers = [
                (b"x-gateway-budget", b"downgrade"),
                (b"x-gateway-downgraded-from", model.encode()),
            ]
            return reservation, headers, target
        if verdict != "ok":
            headers = [(b"x-gateway-budget", verdict.encode())]
        return reservation, headers, None

    async def _would(
        self,
        workspace_id: str,
        period: Period,
        estimate: int,
        cap: int | None,
    ) -> list[tuple[bytes, bytes]]:
        """Monitor mode: what enforcing would have done, as a header; nothing is held."""
        committed = await self._gateway.ledger.committed(workspace_id, period) + estimate
        verdict = await self._verdict(workspace_id, period, committed, cap)
        return [] if verdict == "ok" else [(b"x-gateway-budget", f"would-{verdict}".encode())]

    async def _verdict(
        self, workspace_id: str, period: Period, committed: int, cap: int | None
    ) -> Verdict:
        """The band ``committed`` falls in; ``budget.alert`` for each threshold it reached."""
        if cap is None:
            return "ok"
        for alert in _ALERTS:
            if committed >= self._policy.threshold(alert, cap) + (alert == "block"):
                await self._alert(workspace_id, period, alert, committed, cap)
        return self._policy.verdict(committed, cap)

    async def _refuse(self, send: Send, reason: str) -> None:
        if reason == "wallet":
            message = "The wallet balance cannot cover this request. Top up the wallet to continue."
            code, verdict = "insufficient_balance", b"wallet"
        else:
            what = "this API key's" if reason == "key_budget" else "the workspace's"
            message = (
                f"This request would exceed {what} budget for the period. Raise the cap or "
                "wait for the period to reset."
            )
            code, verdict = "budget_exceeded", b"block"
        await send_error(
            send,
            402,
            message,
            type="insufficient_quota",
            code=code,
            headers=[(b"x-gateway-budget", verdict)],
        )

    async def _alert(
        self,
        workspace_id: str,
        period: Period,
        verdict: Literal["warn", "downgrade", "block"],
        committed: int,
        cap: int,
    ) -> None:
        """Publish ``budget.alert`` for ``verdict`` if nobody has this period (any process)."""
        mark = (workspace_id, period.id, verdict)
        if mark in self._alerted:
            return
        storage = self._gateway.storage
        first = await storage.set(
            f"{workspace_id}:budget:alert:{period.id}:{verdict}",
            b"1",
            ttl=period.seconds + 86_400,
            if_absent=True,
        )
        self._alerted.add(mark)
        if len(self._alerted) > 100_000:
            self._alerted.clear()
        if not first:
            return
        fraction = {
            "warn": self._policy.warn_at,
            "downgrade": self._policy.downgrade_at,
            "block": self._policy.block_at,
        }[verdict]
        data = BudgetAlertData(
            cap_usd=usd(cap),
            spent_usd=usd(max(0, min(committed, 2**53))),
            verdict=verdict,
            threshold_pct=int(fraction * 100),
            period_reset_at=datetime.fromtimestamp(period.end.timestamp(), UTC),
        )
        moment = datetime.fromtimestamp(self._gateway.clock(), UTC)
        await self._gateway.events.publish(
            Event.create(data, workspace_id=workspace_id, now=moment)
        )

    async def _settle(
        self,
        cost: RequestCost | None,
        workspace_id: str,
        key_id: str,
        period: Period,
        reservation: Reservation | None,
        billing: bool,
    ) -> None:
        actual = savings = 0
        if cost is not None:
            actual = cost.cost_micro_usd or 0
            savings = cost.savings_micro_usd
        if reservation is None and not actual and not savings:
            return
        wallet = self._gateway.wallet
        debt = wallet.debt_key(workspace_id)
        try:
            values = await self._gateway.ledger.settle(
                workspace_id,
                key_id,
                period,
                reservation,
                actual,
                savings,
                extra=[(debt, actual)] if billing else (),
            )
            if billing and actual:
                await wallet.check_low_balance(workspace_id, -values[debt])
        except StorageError as exc:
            # The reservation stays counted until the period's counters expire: the cap errs
            # on the safe side. Logged loudly, since spend is now over-stated.
            logger.error("budget settlement failed for %s: %s", workspace_id, exc)
