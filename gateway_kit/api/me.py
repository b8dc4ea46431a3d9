"""``GET /v1/me``: the authenticated workspace's plan, quota and savings (spec section 2.1)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from starlette.requests import Request
from starlette.responses import Response

from gateway_kit.accounts.periods import period_at
from gateway_kit.accounts.quota import quota_key
from gateway_kit.accounts.spend import savings_key
from gateway_kit.api._common import ApiError, principal_of
from gateway_kit.gateway import Gateway


@dataclass(frozen=True, slots=True)
class WorkspaceStatus:
    """The fields of spec 2.1; money kept as integer micro-USD until it is rendered."""

    workspace_id: str
    email: str
    plan: str
    included_requests: int
    used_requests: int
    burst_limit_rpm: int
    savings_micro_usd: int
    reset_at: str

    def to_json(self) -> bytes:
        """Exactly the spec's fields, in its order; ``savings_usd`` a number with two decimals
        (``json.dumps`` would print ``0.0`` or ``12.3``)."""
        savings = (Decimal(self.savings_micro_usd) / 1_000_000).quantize(
            Decimal("0.01"), rounding=ROUND_HALF_UP
        )
        fields = [
            ("workspace_id", json.dumps(self.workspace_id)),
            ("email", json.dumps(self.email)),
            ("plan", json.dumps(self.plan)),
            ("included_requests", str(self.included_requests)),
            ("used_requests", str(self.used_requests)),
            ("burst_limit_rpm", str(self.burst_limit_rpm)),
            ("savings_usd", str(savings)),
            ("reset_at", json.dumps(self.reset_at)),
        ]
        return ("{" + ", ".join(f'"{name}": {value}' for name, value in fields) + "}").encode()


async def workspace_status(gateway: Gateway, workspace_id: str) -> WorkspaceStatus:
    workspace = await gateway.workspaces.get(workspace_id)
    if workspace is None:
        raise ApiError(404, "The key's workspace no longer exists.", code="workspace_not_found")
    plan = gateway.workspaces.plan(workspace)
    period = period_at(gateway.clock(), gateway.config.limits.period)
    used = await gateway.storage.get(quota_key(workspace.id, period))
    savings = await gateway.storage.get(savings_key(workspace.id))
    return WorkspaceStatus(
        workspace_id=workspace.id,
        email=workspace.email,
        plan=workspace.plan,
        included_requests=plan.included_requests,
        used_requests=int(used) if used else 0,
        burst_limit_rpm=plan.burst_limit_rpm,
        savings_micro_usd=int(savings) if savings else 0,
        reset_at=period.reset_at,
    )


def me_endpoint(gateway: Gateway) -> Callable[[Request], Awaitable[Response]]:
    async def me(request: Request) -> Response:
        try:
            status = await workspace_status(gateway, principal_of(request).workspace_id)
        except ApiError as exc:
            return exc.response()
        return Response(status.to_json(), media_type="application/json")

    return me
