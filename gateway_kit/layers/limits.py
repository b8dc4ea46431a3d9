"""``LimitsMiddleware``: the burst limit and the included requests per period.

Both are one part of the request's admission step (one round trip on Redis with the other
layers'): a GCRA throttle of ``burst_limit_rpm`` per minute (bursts of the same size) and the
period's request counter, limited to ``included_requests``. Either refusal changes nothing, so
rejected requests consume neither quota nor burst. A request refused further in (an invalid
body, a budget block, an upstream failure: any status of 400 or more, or no response at all)
gives its quota back when it settles.

Every response carries ``RateLimit-Policy``/``RateLimit`` (the IETF draft's structured form,
policies ``burst`` and ``quota``) and ``X-RateLimit-Limit/Remaining/Reset`` (the burst limit,
as most clients expect); a 429 carries ``Retry-After``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gateway_kit._asgi.types import ASGIApp, Header, Receive, Scope, Send
from gateway_kit._ttl import TTLMap
from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.periods import CurrentPeriod, Period
from gateway_kit.accounts.quota import burst_key, quota_key
from gateway_kit.config import LimitsConfig, Mode, OnError, PlanConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.layers._base import GatewayLayer
from gateway_kit.pipeline.admission import Amend, Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, Verdict, unavailable
from gateway_kit.storage import THROTTLED, Increment, IncrManyResult, Throttle

__all__ = ["LimitsMiddleware", "LimitsPolicy", "LimitsVerdict"]

#: Counters outlive their period by this much, so the last period stays readable.
_KEEP_AFTER_PERIOD = 7 * 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsVerdict(Verdict):
    """What the limits say about one request, and the figures for the headers."""

    #: 200 when admitted, else the status enforcing answers with (429, 402 or 403).
    status: int = 200
    code: str = ""
    burst_limit: int = 0
    burst_remaining: int = 0
    burst_reset: float = 0.0
    retry_after: float = 0.0
    quota_limit: int = 0
    quota_used: int = 0
    period: Period | None = None
    overage: bool = False

    def details(self) -> dict[str, Any]:
        return {"code": self.code} if self.code else {}

    def headers(self, now: float) -> list[Header]:
        if self.period is None:
            return []
        window = self.period.seconds
        quota_left = max(0, self.quota_limit - self.quota_used)
        quota_reset = math.ceil(self.period.seconds_left(now))
        burst_reset = math.ceil(self.burst_reset)
        policy = f'"burst";q={self.burst_limit};w=60, "quota";q={self.quota_limit};w={window}'
        state = (
            f'"burst";r={self.burst_remaining};t={burst_reset}, '
            f'"quota";r={quota_left};t={quota_reset}'
        )
        headers = [
            (b"ratelimit-policy", policy.encode()),
            (b"ratelimit", state.encode()),
            (b"x-ratelimit-limit", str(self.burst_limit).encode()),
            (b"x-ratelimit-remaining", str(self.burst_remaining).encode()),
            (b"x-ratelimit-reset", str(burst_reset).encode()),
        ]
        if self.status == 429:
            headers.append((b"retry-after", str(max(1, math.ceil(self.retry_after))).encode()))
        if self.overage:
            headers.append((b"x-gateway-quota", b"overage"))
        return headers


_ERROR_TYPES = {429: "rate_limit_error", 402: "insufficient_quota", 403: "permission_error"}


class LimitsPolicy:
    """Turns a workspace's plan into the admission's operations and the step's result into a
    ``LimitsVerdict``; no ASGI and no storage in here."""

    def __init__(self, config: LimitsConfig) -> None:
        # Memos, not per-request state: the current period, and each workspace's admission
        # operands for it (both change only when the period or the plan does).
        self._period = CurrentPeriod(config.period)
        self._operands: TTLMap[tuple[str, str, str], tuple[Increment, Throttle]] = TTLMap(
            3600.0, maxsize=100_000
        )

    def period(self, now: float) -> Period:
        return self._period.at(now)

    def operations(
        self, workspace_id: str, plan_name: str, plan: PlanConfig, period: Period
    ) -> tuple[Increment, Throttle]:
        """The period's request counter and the burst throttle."""
        memo_key = (workspace_id, period.id, plan_name)
        operands = self._operands.get(memo_key)
        if operands is None:
            # The counter outlives its period by a week (its TTL is set once, at creation).
            counter = Increment(
                quota_key(workspace_id, period),
                1,
                ttl=period.seconds + _KEEP_AFTER_PERIOD,
                limit=None if plan.overage == "allow" else plan.included_requests,
            )
            burst = Throttle(burst_key(workspace_id), limit=plan.burst_limit_rpm, period=60.0)
            operands = (counter, burst)
            self._operands.set(memo_key, operands)
        return operands

    def verdict(
        self, result: IncrManyResult, counter: Increment, plan: PlanConfig, period: Period
    ) -> LimitsVerdict:
        """The verdict of a step this policy's counter and throttle were part of."""
        throttle = result.throttle
        assert throttle is not None
        used = result.values[counter.key]
        status, code, message = 200, "", ""
        if result.refused == THROTTLED:
            status, code = 429, "rate_limit_exceeded"
            message = (
                f"Burst limit of {plan.burst_limit_rpm} requests per minute reached; "
                f"retry in {max(1, math.ceil(throttle.retry_after))} s."
            )
        elif result.refused == counter.key:
            status, code = 402, "quota_exceeded"
            message = (
                f"All {plan.included_requests} included requests of this period are used; "
                f"the quota resets at {period.reset_at}."
            )
        refusal = None
        if status != 200:
            refusal = Refusal(status, message, code=code, type=_ERROR_TYPES[status])
        return LimitsVerdict(
            action="pass" if refusal is None else "block",
            refusal=refusal,
            status=status,
            code=code,
            burst_limit=plan.burst_limit_rpm,
            burst_remaining=throttle.remaining,
            burst_reset=throttle.reset_after,
            retry_after=throttle.retry_after,
            quota_limit=plan.included_requests,
            quota_used=used,
            period=period,
            overage=result.allowed and used > plan.included_requests,
        )


class LimitsMiddleware(GatewayLayer):
    """Burst limit and quota for authenticated requests (no principal: passed through)."""

    concern = "limits"

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
    ) -> None:
        config = gateway.config.limits
        super().__init__(app, gateway=gateway, section=config, mode=mode, on_error=on_error)
        self.clock = gateway.clock
        self.policy = LimitsPolicy(config)

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        principal = ctx.principal
        assert principal is not None
        gateway = self.gateway
        try:
            workspace = ctx.workspace or await gateway.workspaces.cached(principal.workspace_id)
        except StorageError as exc:
            refusal = unavailable(self.concern, self.on_error, exc)
            if refusal is not None:
                await self.refuse(ctx, send, refusal)
                return None
            ctx.verdicts[self.concern] = LimitsVerdict(action="unchecked")
            return receive
        if workspace is None:
            return await self._no_workspace(ctx, send, receive)
        plan = gateway.workspaces.plan(workspace)
        period = self.policy.period(gateway.clock())
        counter, burst = self.policy.operations(workspace.id, workspace.plan, plan, period)
        ctx.admission.join(_LimitsStep(self, principal, plan, period, counter, burst))
        return receive

    async def _no_workspace(
        self, ctx: RequestContext, send: Send, receive: Receive
    ) -> Receive | None:
        if self.mode is Mode.MONITOR:
            ctx.verdicts[self.concern] = LimitsVerdict(action="would-block")
            ctx.headers.append((b"x-gateway-limits", b"would-block=workspace_not_found"))
            return receive
        refusal = Refusal(
            403,
            "The key's workspace no longer exists.",
            code="workspace_not_found",
            type="permission_error",
        )
        ctx.verdicts[self.concern] = LimitsVerdict(
            action="block", refusal=refusal, status=403, code="workspace_not_found"
        )
        await self.refuse(ctx, send, refusal)
        return None


class _LimitsStep:
    """The limits' part of one request's admission."""

    concern = "limits"

    def __init__(
        self,
        layer: LimitsMiddleware,
        principal: Principal,
        plan: PlanConfig,
        period: Period,
        counter: Increment,
        burst: Throttle,
    ) -> None:
        self._layer = layer
        self._plan = plan
        self._period = period
        self._counter = counter
        self._burst = burst
        self._in_step = True

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        return Contribution([self._counter], self._burst)

    def _record(self, ctx: RequestContext, verdict: LimitsVerdict) -> None:
        ctx.verdicts[self.concern] = verdict
        clock = self._layer.clock
        if verdict.refusal is not None or not self._in_step:
            ctx.headers.extend(verdict.headers(clock()))
            return

        def headers(ctx: RequestContext) -> list[Header]:
            # Made as the response starts: one that is not served (refused further in, failed
            # upstream) has its request given back once it is done, so the quota left it shows
            # counts it back already.
            if ctx.status >= 400:
                return replace(verdict, quota_used=verdict.quota_used - 1).headers(clock())
            return verdict.headers(clock())

        ctx.header_sources.append(headers)

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        if not self._in_step:
            return None  # monitor mode took itself out of the step
        verdict = self._layer.policy.verdict(result, self._counter, self._plan, self._period)
        if not result.allowed:
            # Another layer's counter refused the step: nothing was counted, so there is
            # nothing to give back, and the figures are the counters as they stand (the quota
            # left once showed one request too many).
            self._in_step = False
        self._record(ctx, verdict)
        return None

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | Amend:
        verdict = self._layer.policy.verdict(result, self._counter, self._plan, self._period)
        assert verdict.refusal is not None
        if self._layer.mode is Mode.MONITOR:
            # Say what enforcing would have done, and let the others' step run without us.
            self._record(ctx, replace(verdict, action="would-block", refusal=None))
            ctx.headers.append((b"x-gateway-limits", f"would-block={verdict.code}".encode()))
            self._in_step = False
            return Amend(None)
        self._record(ctx, verdict)
        return verdict.refusal

    def failed(self, ctx: RequestContext, error: StorageError) -> Refusal | None:
        refusal = unavailable(self.concern, self._layer.on_error, error)
        ctx.verdicts[self.concern] = LimitsVerdict(
            action="unchecked" if refusal is None else "block", refusal=refusal
        )
        return refusal

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        if admitted and self._in_step and (ctx.status == 0 or ctx.status >= 400):
            # Not served (refused further in, failed upstream, or the client left first).
            counter = self._counter
            return Settlement([Increment(counter.key, -1, ttl=counter.ttl)])
        return None
