"""The operator's wallet routes, under ``/api/v1/admin/workspaces/{workspace_id}/wallet``:

- ``GET   .../wallet``          balance, billing, last top-up, recent top-ups
- ``PATCH .../wallet``          ``{"billing": true}``: debit requests from the wallet
- ``POST  .../wallet/topups``   ``{"amount_usd", "reference"?, "idempotency_key"?}``: credit the
  wallet (once per idempotency key)

A workspace cannot top itself up: these routes take the operator's token only.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.wallet import MAX_TOPUP_USD
from gateway_kit.accounts.workspaces import iso_at
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    micro_usd_field,
    string_field,
)
from gateway_kit.api.admin.workspaces import find_workspace
from gateway_kit.gateway import Gateway


def wallet_routes(gateway: Gateway) -> list[Route]:
    async def view(workspace_id: str) -> dict[str, Any]:
        status = await gateway.wallet.status(workspace_id)
        # Times in ISO 8601 UTC, as everywhere in the API (kept as Unix seconds).
        history = [
            {**entry, "at": iso_at(at)} if isinstance(at := entry.get("at"), float | int) else entry
            for entry in await gateway.wallet.topups(workspace_id, limit=20)
        ]
        return {
            "object": "wallet",
            "workspace_id": workspace_id,
            **status.public(),
            "recent_topups": history,
        }

    async def read(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
        except ApiError as exc:
            return exc.response()
        return json_response(await view(workspace.id))

    async def update(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
            body = await json_body(request)
            check_fields(body, ["billing"])
            billing = body.get("billing")
            if not isinstance(billing, bool):
                raise ApiError(
                    400, "'billing' must be true or false.", code="invalid_type", param="billing"
                )
        except ApiError as exc:
            return exc.response()
        await gateway.wallet.set_billing(workspace.id, billing)
        return json_response(await view(workspace.id))

    async def topup(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
            body = await json_body(request)
            check_fields(body, ["amount_usd", "reference", "idempotency_key"])
            amount = micro_usd_field(
                body.get("amount_usd"), "amount_usd", high=MAX_TOPUP_USD, positive=True
            )
            reference = string_field(body, "reference", default="", allow_empty=True)
            key = string_field(body, "idempotency_key", default="", allow_empty=True)
            key = key or secrets.token_hex(16)
        except ApiError as exc:
            return exc.response()
        balance = await gateway.wallet.credit(
            workspace.id, amount, key=f"manual:{key}", source="operator", reference=reference
        )
        return json_response(
            {**await view(workspace.id), "credited": balance is not None},
            # The new balance may be 0 (an overdraft cleared): still a credit.
            201 if balance is not None else 200,
        )

    base = "/workspaces/{workspace_id}/wallet"
    return [
        Route(base, read, methods=["GET"]),
        Route(base, update, methods=["PATCH"]),
        Route(base + "/topups", topup, methods=["POST"]),
    ]
