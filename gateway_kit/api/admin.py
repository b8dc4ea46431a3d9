"""The operator API: ``/api/v1/admin``, authenticated by ``admin.token`` (not workspace keys).

- ``GET   .../workspaces/{workspace_id}/wallet``          balance, billing, last top-up, history
- ``PATCH .../workspaces/{workspace_id}/wallet``          ``{"billing": true}``: debit requests
- ``POST  .../workspaces/{workspace_id}/wallet/topups``   ``{"amount_usd", "reference"?,
  "idempotency_key"?}``: credit the wallet (once per idempotency key)
- ``GET   .../routes``   every model, its fallbacks and its deployments' health (``closed``,
  ``open`` while cooling down, ``half_open``; recent failures), read from the shared storage

A workspace cannot top itself up: these routes take the operator's token only. Without
``admin.token`` configured they answer 404.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.wallet import MAX_TOPUP_USD
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    micro_usd_field,
)
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway


def admin_routes(gateway: Gateway) -> list[Route]:
    def check(request: Request) -> str:
        """The path's workspace id once the caller proved to be the operator."""
        operator(request)
        workspace_id: str = request.path_params["workspace_id"]
        return workspace_id

    def operator(request: Request) -> None:
        """Raises unless the caller gave the operator's token."""
        token = gateway.config.admin.token
        if token is None:
            raise ApiError(404, "The operator API is not enabled.", code="not_found")
        given = request.headers.get("authorization", "")
        expected = f"Bearer {token.get_secret_value()}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiError(401, "A valid operator token is required.", code="invalid_admin_token")

    async def workspace(request: Request) -> str:
        workspace_id = check(request)
        if await gateway.workspaces.get(workspace_id) is None:
            raise ApiError(
                404, "No such workspace.", code="workspace_not_found", param="workspace_id"
            )
        return workspace_id

    async def view(workspace_id: str) -> dict[str, Any]:
        status = await gateway.wallet.status(workspace_id)
        history = await gateway.wallet.topups(workspace_id, limit=20)
        return {
            "object": "wallet",
            "workspace_id": workspace_id,
            **status.public(),
            "recent_topups": history,
        }

    async def read(request: Request) -> Response:
        try:
            return json_response(await view(await workspace(request)))
        except ApiError as exc:
            return exc.response()

    async def update(request: Request) -> Response:
        try:
            workspace_id = await workspace(request)
            body = await json_body(request)
            check_fields(body, ["billing"])
            billing = body.get("billing")
            if not isinstance(billing, bool):
                raise ApiError(
                    400, "'billing' must be true or false.", code="invalid_type", param="billing"
                )
        except ApiError as exc:
            return exc.response()
        await gateway.wallet.set_billing(workspace_id, billing)
        return json_response(await view(workspace_id))

    async def topup(request: Request) -> Response:
        try:
            workspace_id = await workspace(request)
            body = await json_body(request)
            check_fields(body, ["amount_usd", "reference", "idempotency_key"])
            amount = micro_usd_field(
                body.get("amount_usd"), "amount_usd", high=MAX_TOPUP_USD, positive=True
            )
            reference = _text(body, "reference", "")
            key = _text(body, "idempotency_key", "") or secrets.token_hex(16)
        except ApiError as exc:
            return exc.response()
        balance = await gateway.wallet.credit(
            workspace_id, amount, key=f"manual:{key}", source="operator", reference=reference
        )
        return json_response(
            {**await view(workspace_id), "credited": balance is not None},
            # The new balance may be 0 (an overdraft cleared): still a credit.
            201 if balance is not None else 200,
        )

    async def routes(request: Request) -> Response:
        try:
            operator(request)
            try:
                report = await gateway.router.report()
            except StorageError:
                raise ApiError(
                    503,
                    "The deployments' health cannot be read: the storage is unavailable.",
                    code="storage_unavailable",
                ) from None
        except ApiError as exc:
            return exc.response()
        return json_response({"object": "list", "data": report})

    base = "/workspaces/{workspace_id}/wallet"
    return [
        Route("/routes", routes, methods=["GET"]),
        Route(base, read, methods=["GET"]),
        Route(base, update, methods=["PATCH"]),
        Route(base + "/topups", topup, methods=["POST"]),
    ]


def _text(body: dict[str, Any], name: str, default: str) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or len(value) > 200:
        raise ApiError(
            400,
            f"'{name}' must be a string of at most 200 characters.",
            code="invalid_type",
            param=name,
        )
    return value
