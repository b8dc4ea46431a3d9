"""A workspace's budget: ``/api/v1/workspaces/{workspace_id}/budget``.

- ``GET   .../budget``   the period's cap, spend (settled, reserved, committed), verdict, reset
- ``PATCH .../budget``   ``{"cap_usd": 50.0 | null, "key_caps": {"kid_...": 5.0 | null}}``:
  the workspace's own cap (``null``: the plan's default) and per-key caps (``null`` removes one)

Amounts are USD as JSON numbers, kept as integer micro-USD (rounded half up to the micro-dollar).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.periods import period_at
from gateway_kit.accounts.spend import (
    BudgetBand,
    BudgetSettings,
    BudgetThresholds,
    effective_cap,
)
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    micro_usd_field,
    principal_of,
)
from gateway_kit.events.models import usd
from gateway_kit.gateway import Gateway

#: The largest cap accepted: a billion dollars.
MAX_USD = 1_000_000_000


async def budget_status(gateway: Gateway, workspace_id: str) -> dict[str, Any]:
    """The budget as the API and ``gateway-kit status`` show it."""
    config = gateway.config.budget
    period = period_at(gateway.clock(), config.period)
    settings = await gateway.ledger.settings(workspace_id)
    workspace = await gateway.workspaces.get(workspace_id)
    plan = gateway.workspaces.plan(workspace) if workspace is not None else None
    cap, source = effective_cap(settings, plan.budget_usd if plan is not None else None)
    totals = await gateway.ledger.totals(workspace_id, period)
    policy = BudgetThresholds.from_config(config)
    verdict: BudgetBand = "ok"
    if cap is not None:
        verdict = (
            "block"
            if totals.committed >= policy.limit(cap)
            else policy.verdict(totals.committed, cap)
        )
    return {
        "object": "budget",
        "workspace_id": workspace_id,
        "mode": config.mode,
        "period": period.id,
        "cap_usd": None if cap is None else usd(cap),
        "cap_source": source,
        "spent_usd": usd(totals.settled),
        "reserved_usd": usd(totals.reserved),
        "committed_usd": usd(totals.committed),
        "verdict": verdict,
        "thresholds": {
            "warn": config.warn_at,
            "downgrade": config.downgrade_at,
            "block": config.block_at,
        },
        "key_caps": {key: usd(amount) for key, amount in sorted(settings.key_caps.items())},
        "period_reset_at": period.reset_at,
        "wallet": (await gateway.wallet.status(workspace_id)).public(),
    }


def budget_routes(gateway: Gateway) -> list[Route]:
    async def read(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        return json_response(await budget_status(gateway, workspace_id))

    async def update(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        try:
            body = await json_body(request)
            check_fields(body, ["cap_usd", "key_caps"])
            current = await gateway.ledger.settings(workspace_id)
            cap = current.cap_micro_usd
            if "cap_usd" in body:
                cap = (
                    None
                    if body["cap_usd"] is None
                    else micro_usd_field(body["cap_usd"], "cap_usd", high=MAX_USD)
                )
            key_caps = dict(current.key_caps)
            if "key_caps" in body:
                changes = body["key_caps"]
                if not isinstance(changes, dict):
                    raise ApiError(
                        400,
                        "'key_caps' must be an object of key ids to USD amounts (or null).",
                        code="invalid_type",
                        param="key_caps",
                    )
                known = {key.key_id for key in await gateway.keys.list(workspace_id)}
                for key_id, amount in changes.items():
                    if key_id not in known:
                        raise ApiError(
                            400,
                            f"No key {key_id!r} in this workspace.",
                            code="key_not_found",
                            param="key_caps",
                        )
                    if amount is None:
                        key_caps.pop(key_id, None)
                    else:
                        key_caps[key_id] = micro_usd_field(
                            amount, f"key_caps.{key_id}", high=MAX_USD
                        )
        except ApiError as exc:
            return exc.response()
        await gateway.ledger.save_settings(workspace_id, BudgetSettings(cap, key_caps))
        return json_response(await budget_status(gateway, workspace_id))

    path = "/workspaces/{workspace_id}/budget"
    return [Route(path, read, methods=["GET"]), Route(path, update, methods=["PATCH"])]
