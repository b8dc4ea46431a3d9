"""What the operator sees of a workspace and does to it, shared by the API and the CLI.

- ``workspace_status``: the fields of ``GET /v1/me`` (spec section 2.1);
- ``budget_status``: the period's cap, spend, verdict, key caps and wallet;
- ``workspace_view``: all of it for one workspace, with its keys and webhooks counted (the
  operator's ``GET /api/v1/admin/workspaces/{id}`` and ``gateway-kit workspaces show``);
- ``delete_workspace``: a workspace and everything of it in the storage.

Deleting revokes every key (the change feed stops them on every instance within
``auth.cache_ttl_s``), deletes every webhook and drops its held deliveries (nobody is left to
replay them to; a delivery already queued is dropped by the worker when it finds its webhook
gone), then drops the workspace's whole storage partition: its record, budget, wallet,
counters and logs. A workspace whose wallet holds money is deleted only when forced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gateway_kit.accounts.periods import period_at
from gateway_kit.accounts.quota import quota_key
from gateway_kit.accounts.spend import BudgetBand, BudgetThresholds, effective_cap, savings_key
from gateway_kit.accounts.workspaces import Workspace
from gateway_kit.events.models import usd
from gateway_kit.gateway import Gateway
from gateway_kit.webhooks.emitter import drop_held

__all__ = [
    "WalletNotEmptyError",
    "WorkspaceStatus",
    "budget_status",
    "delete_workspace",
    "workspace_status",
    "workspace_view",
]


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

    @property
    def savings_usd(self) -> Decimal:
        """Two decimals, as the spec's example shows."""
        return (Decimal(self.savings_micro_usd) / 1_000_000).quantize(
            Decimal("0.01"), rounding=ROUND_HALF_UP
        )

    def to_json(self) -> bytes:
        """Exactly the spec's fields, in its order; ``savings_usd`` a number with two decimals
        (``json.dumps`` would print ``0.0`` or ``12.3``)."""
        fields = [
            ("workspace_id", json.dumps(self.workspace_id)),
            ("email", json.dumps(self.email)),
            ("plan", json.dumps(self.plan)),
            ("included_requests", str(self.included_requests)),
            ("used_requests", str(self.used_requests)),
            ("burst_limit_rpm", str(self.burst_limit_rpm)),
            ("savings_usd", str(self.savings_usd)),
            ("reset_at", json.dumps(self.reset_at)),
        ]
        return ("{" + ", ".join(f'"{name}": {value}' for name, value in fields) + "}").encode()


async def workspace_status(gateway: Gateway, workspace: Workspace) -> WorkspaceStatus:
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


async def workspace_view(gateway: Gateway, workspace: Workspace) -> dict[str, Any]:
    """One workspace as the operator sees it: record, usage, budget, wallet, keys, webhooks."""
    status = await workspace_status(gateway, workspace)
    budget = await budget_status(gateway, workspace.id)
    keys = await gateway.keys.list(workspace.id)
    hooks = await gateway.webhooks.for_workspace(workspace.id)
    return {
        "object": "workspace",
        **workspace.public(),
        "usage": {
            "included_requests": status.included_requests,
            "used_requests": status.used_requests,
            "burst_limit_rpm": status.burst_limit_rpm,
            "reset_at": status.reset_at,
        },
        "savings_usd": float(status.savings_usd),
        "budget": {k: v for k, v in budget.items() if k not in ("object", "workspace_id")},
        "keys": {"active": sum(k.active for k in keys), "revoked": sum(not k.active for k in keys)},
        "webhooks": len(hooks),
    }


class WalletNotEmptyError(Exception):
    """The workspace's wallet holds money: deleting it needs ``force``."""


async def delete_workspace(
    gateway: Gateway, workspace: Workspace, *, force: bool = False
) -> dict[str, Any]:
    """Delete ``workspace`` and all its state (see the module docstring); what was removed."""
    balance = (await gateway.wallet.status(workspace.id)).balance_micro_usd
    if balance > 0 and not force:
        raise WalletNotEmptyError(
            f"the wallet of {workspace.id} holds ${usd(balance):.2f}; delete with force to "
            "discard it"
        )
    # Keys first: from here on nothing new is served or queued for the workspace.
    revoked = 0
    for key in await gateway.keys.list(workspace.id):
        if key.active:
            await gateway.keys.revoke(workspace.id, key.key_id)
            revoked += 1
    hooks = await gateway.webhooks.for_workspace(workspace.id)
    dropped = 0
    for hook in hooks:
        dropped += await drop_held(gateway.storage, gateway.webhooks, workspace.id, hook.id)
        await gateway.webhooks.delete(workspace.id, hook.id)
    await gateway.workspaces.forget(workspace.id)
    await gateway.storage.drop_partition(workspace.id)
    return {
        "object": "workspace",
        "workspace_id": workspace.id,
        "deleted": True,
        "keys_revoked": revoked,
        "webhooks_deleted": len(hooks),
        "held_deliveries_dropped": dropped,
        "wallet_discarded_usd": usd(max(balance, 0)),
    }
