"""``LimitsMiddleware``: the burst limit and the included requests per period.

Both are checked in one atomic storage call (one round trip on Redis): a GCRA throttle of
``burst_limit_rpm`` per minute (bursts of the same size) and the period's request counter,
limited to ``included_requests``. Either refusal changes nothing, so rejected requests consume
neither quota nor burst. A request refused further in (an invalid body, a budget block, an
upstream failure: any status of 400 or more, or no response at all) gives its quota back.

Every response carries ``RateLimit-Policy``/``RateLimit`` (the IETF draft's structured form,
policies ``burst`` and ``quota``) and ``X-RateLimit-Limit/Remaining/Reset`` (the burst limit,
as most clients expect); a 429 carries ``Retry-After``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

import anyio

from gateway_kit._asgi import ASGIApp, Message, Receive, Scope, Send, send_error
from gateway_kit._ttl import TTLMap
from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.periods import CurrentPeriod, Period
from gateway_kit.accounts.quota import burst_key, quota_key
from gateway_kit.config import PlanConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import get_context
from gateway_kit.storage import THROTTLED, Increment, Throttle

logger = logging.getLogger("gateway_kit.limits")

#: Counters outlive their period by this much, so the last period stays readable.
_KEEP_AFTER_PERIOD = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class LimitsVerdict:
    """What the limits say about one request, and the figures for the headers."""

    allowed: bool
    status: int
    code: str = ""
    message: str = ""
    burst_limit: int = 0
    burst_remaining: int = 0
    burst_reset: float = 0.0
    retry_after: float = 0.0
    quota_limit: int = 0
    quota_used: int = 0
    period: Period | None = None
    #: The quota counter was incremented (and is refunded if the request then fails).
    counted: str | None = None
    overage: bool = False

    def headers(self, now: float) -> list[tuple[bytes, bytes]]:
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
        if not self.allowed and self.status == 429:
            headers.append((b"retry-after", str(max(1, math.ceil(self.retry_after))).encode()))
        if self.overage:
            headers.append((b"x-gateway-quota", b"overage"))
        return headers


class LimitsPolicy:
    """Admits a principal's request against its plan; no ASGI in here."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        # Memos, not per-request state: the current period, and each workspace's admission
        # operands for it (both change only when the period or the plan does).
        self._period = CurrentPeriod(gateway.config.limits.period)
        self._operands: TTLMap[tuple[str, str, str], tuple[Increment, Throttle]] = TTLMap(
            3600.0, maxsize=10_000
        )

    def _admission(
        self, workspace_id: str, plan_name: str, plan: PlanConfig, period: Period
    ) -> tuple[Increment, Throttle]:
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

    async def admit(self, principal: Principal) -> LimitsVerdict:
        gateway = self._gateway
        workspace = await gateway.workspaces.cached(principal.workspace_id)
        if workspace is None:
            return LimitsVerdict(
                False, 403, "workspace_not_found", "The key's workspace no longer exists."
            )
        plan = gateway.workspaces.plan(workspace)
        period = self._period.at(gateway.clock())
        counter, burst = self._admission(workspace.id, workspace.plan, plan, period)
        result = await gateway.storage.incr_many([counter], throttle=burst)
        throttle = result.throttle
        assert throttle is not None
        used = result.values[counter.key]
        if result.refused == THROTTLED:
            status, code = 429, "rate_limit_exceeded"
            message = (
                f"Burst limit of {plan.burst_limit_rpm} requests per minute reached; "
                f"retry in {max(1, math.ceil(throttle.retry_after))} s."
            )
        elif result.refused is not None:
            status, code = 402, "quota_exceeded"
            message = (
                f"All {plan.included_requests} included requests of this period are used; "
                f"the quota resets at {period.reset_at}."
            )
        else:
            status, code, message = 200, "", ""
        return LimitsVerdict(
            status == 200,
            status,
            code,
            message,
            burst_limit=plan.burst_limit_rpm,
            burst_remaining=throttle.remaining,
            burst_reset=throttle.reset_after,
            retry_after=throttle.retry_after,
            quota_limit=plan.included_requests,
            quota_used=used,
            period=period,
            counted=counter.key if status == 200 else None,
            overage=status == 200 and used > plan.included_requests,
        )

    async def refund(self, key: str) -> None:
        await self._gateway.storage.incr(key, -1)


class LimitsMiddleware:
    """Burst limit and quota for authenticated requests (no principal: passed through)."""

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
        self._policy = LimitsPolicy(gateway)
        self._mode = mode or gateway.config.limits.mode
        self._on_error = on_error or gateway.config.limits.on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = get_context(scope).principal if scope["type"] == "http" else None
        if principal is None or self._mode == "off":
            await self.app(scope, receive, send)
            return
        try:
            verdict = await self._policy.admit(principal)
        except StorageError as exc:
            logger.error("limits unavailable (%s): %s", self._on_error, exc)
            if self._on_error == "closed":
                await send_error(
                    send,
                    503,
                    "Request limits cannot be checked right now; try again shortly.",
                    type="api_error",
                    code="limits_unavailable",
                )
                return
            await self.app(scope, receive, send)
            return
        headers = verdict.headers(self._gateway.clock())
        if not verdict.allowed and self._mode == "enforce":
            error_type = "rate_limit_error" if verdict.status == 429 else "insufficient_quota"
            if verdict.status == 403:
                error_type = "permission_error"
            await send_error(
                send,
                verdict.status,
                verdict.message,
                type=error_type,
                code=verdict.code,
                headers=headers,
            )
            return
        if not verdict.allowed:  # monitor: say what enforcing would have done
            headers.append((b"x-gateway-limits", f"would-block={verdict.code}".encode()))
        status = 0

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *headers]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            if verdict.counted is not None and (status == 0 or status >= 400):
                # Shielded: a request cancelled by a disconnect still gives its quota back.
                with anyio.CancelScope(shield=True):
                    try:
                        await self._policy.refund(verdict.counted)
                    except StorageError as exc:
                        logger.error("quota refund failed: %s", exc)
