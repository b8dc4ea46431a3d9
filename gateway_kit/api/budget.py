"""A workspace's budget: ``/api/v1/workspaces/{workspace_id}/budget``.

- ``GET   .../budget``   the period's cap, spend (settled, reserved, committed), verdict, reset
- ``PATCH .../budget``   ``{"cap_usd": 50.0 | null, "key_caps": {"kid_...": 5.0 | null}}``:
  the workspace's own cap (``null``: the plan's default) and per-key caps (``null`` removes one)

Reading needs ``budget:read``, changing ``budget:write``; a key's own cap is changed only by an
admin key (or the operator: ``/api/v1/admin/workspaces/{id}/budget`` shares ``change_budget``).

Amounts are USD as JSON numbers, kept as integer micro-USD (rounded half up to the micro-dollar).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.scopes import ADMIN_SCOPES, KeyScope
from gateway_kit.accounts.spend import BudgetSettings
from gateway_kit.admin import budget_status
from gateway_kit.api._auth import check_grant, requires
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    micro_usd_field,
    one_change_at_a_time,
    principal_of,
)
from gateway_kit.gateway import Gateway

#: The largest cap accepted: a billion dollars.
MAX_USD = 1_000_000_000


def budget_routes(gateway: Gateway) -> list[Route]:
    async def read(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        return json_response(await budget_status(gateway, workspace_id))

    async def update(request: Request) -> Response:
        caller = principal_of(request)
        try:
            await change_budget(gateway, caller.workspace_id, await json_body(request), caller)
        except ApiError as exc:
            return exc.response()
        return json_response(await budget_status(gateway, caller.workspace_id))

    path = "/workspaces/{workspace_id}/budget"
    return [
        Route(path, read, methods=["GET"], middleware=requires(gateway, KeyScope.BUDGET_READ)),
        Route(path, update, methods=["PATCH"], middleware=requires(gateway, KeyScope.BUDGET_WRITE)),
    ]


@one_change_at_a_time("budget")
async def change_budget(
    gateway: Gateway, workspace_id: str, body: dict[str, Any], caller: Principal | None
) -> None:
    """Apply a ``PATCH .../budget`` body: ``cap_usd`` and ``key_caps``, checked as a whole
    before anything is saved. ``caller`` is the key making the change, ``None`` for the
    operator; a key changes its own cap only if it is an admin key."""
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
                "'key_caps' must be an object of key ids to USD amounts (a key's null removes "
                "its cap).",
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
            if caller is not None and key_id == caller.key_id:
                check_grant(caller, ADMIN_SCOPES, "change its own cap (only an admin key can)")
            if amount is None:
                key_caps.pop(key_id, None)
            else:
                key_caps[key_id] = micro_usd_field(amount, f"key_caps.{key_id}", high=MAX_USD)
    await gateway.ledger.save_settings(workspace_id, BudgetSettings(cap, key_caps))
