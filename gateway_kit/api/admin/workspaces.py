"""The operator's workspace routes, under ``/api/v1/admin/workspaces``:

- ``GET    /workspaces``                 ``?limit=50&after=ws_...&plan=scale&status=suspended``:
  a page of workspaces by id, ``next_after`` the cursor of the next page (``null``: the last)
- ``POST   /workspaces``                 ``{"email", "plan"?, "workspace_id"?, "with_key"?}``:
  201, with its first key (an admin key, shown once) when ``with_key`` is true
- ``GET    /workspaces/{id}``            the workspace with its usage, savings, budget, wallet,
  and its keys and webhooks counted
- ``PATCH  /workspaces/{id}``            ``{"plan"?, "email"?, "status"?: "active" | "suspended"}``
- ``DELETE /workspaces/{id}``            ``?force=true`` when its wallet holds money: the
  workspace, its keys, webhooks and held deliveries, and all its state (``admin``)
- ``GET    /workspaces/{id}/budget``     as the workspace's own ``GET .../budget``
- ``PATCH  /workspaces/{id}/budget``     ``{"cap_usd", "key_caps"}``, any key's cap included
- ``GET    /workspaces/{id}/guardian``   as the workspace's own ``GET .../guardian``
- ``PATCH  /workspaces/{id}/guardian``   any key's Guardian thresholds and allow-list
- ``GET    /workspaces/{id}/pii``        as the workspace's own ``GET .../pii``
- ``PATCH  /workspaces/{id}/pii``        the workspace's PII patterns and allow-list
- ``GET    /workspaces/{id}/cache``      as the workspace's own ``GET .../cache``
- ``PATCH  /workspaces/{id}/cache``      ``{"semantic": true | false}``
- ``DELETE /workspaces/{id}/cache``      purge the workspace's cached answers (``?model=``)
- ``DELETE /cache``                      purge every workspace's cached answers (``?model=``)
- ``GET    /workspaces/{id}/requests``   the workspace's request log (as ``GET .../requests``)
- ``GET    /workspaces/{id}/usage``      its usage per day and model (as ``GET .../usage``)
- ``GET    /workspaces/{id}/events``     its recent events (as ``GET .../events``)
- ``POST   /workspaces/{id}/keys``       ``{"name"?, "role" | "scopes"}``: a key of any role
  (e.g. a new admin key for an owner who lost theirs), shown once

A suspended workspace's keys are refused (403 ``workspace_suspended``) on every instance within
``auth.cache_ttl_s``; its state is kept and ``PATCH {"status": "active"}`` resumes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.scopes import ROLES
from gateway_kit.accounts.workspaces import WORKSPACE_ID, Status, Workspace
from gateway_kit.admin import WalletNotEmptyError, budget_status, delete_workspace, workspace_view
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    limit_param,
    string_field,
)
from gateway_kit.api.budget import change_budget
from gateway_kit.api.cache import cache_status, change_cache, purge_cache
from gateway_kit.api.guardian import change_guardian, guardian_status
from gateway_kit.api.keys import requested_scopes
from gateway_kit.api.pii import change_pii, pii_status
from gateway_kit.api.requests import READS
from gateway_kit.exceptions import InvalidRequestError
from gateway_kit.gateway import Gateway

__all__ = ["find_workspace", "workspace_routes"]

MAX_PAGE = 500
_STATUSES = ("active", "suspended")


async def find_workspace(gateway: Gateway, request: Request) -> Workspace:
    """The path's workspace, or a 404."""
    workspace = await gateway.workspaces.get(request.path_params["workspace_id"])
    if workspace is None:
        raise ApiError(404, "No such workspace.", code="workspace_not_found", param="workspace_id")
    return workspace


def workspace_routes(gateway: Gateway) -> list[Route]:
    one = "/workspaces/{workspace_id}"

    async def list_all(request: Request) -> Response:
        query = request.query_params
        try:
            check_fields(dict(query), ["limit", "after", "plan", "status"])
            limit = limit_param(query.get("limit", "50"), MAX_PAGE)
            after = query.get("after")
            if after is not None and not WORKSPACE_ID.fullmatch(after):
                raise ApiError(
                    400, "'after' must be a workspace id.", code="invalid_value", param="after"
                )
            plan = query.get("plan")
            if plan is not None and plan not in gateway.config.plans:
                raise ApiError(400, f"No plan named {plan!r}.", code="invalid_value", param="plan")
            status = _status(query.get("status"), "status")
        except ApiError as exc:
            return exc.response()
        page = await gateway.workspaces.page(limit=limit, after=after, plan=plan, status=status)
        data = [
            {"workspace_id": w.id, "email": w.email, "plan": w.plan, "status": w.status}
            for w in page.workspaces
        ]
        return json_response(
            {
                "object": "list",
                "data": data,
                "has_more": page.next_after is not None,
                "next_after": page.next_after,
            }
        )

    async def create(request: Request) -> Response:
        try:
            body = await json_body(request)
            check_fields(body, ["email", "plan", "workspace_id", "with_key"])
            email = string_field(body, "email", max_length=254)
            plan = string_field(body, "plan") if "plan" in body else None
            workspace_id = string_field(body, "workspace_id") if "workspace_id" in body else None
            with_key = body.get("with_key", False)
            if not isinstance(with_key, bool):
                raise ApiError(
                    400, "'with_key' must be true or false.", code="invalid_type", param="with_key"
                )
            workspace = await gateway.workspaces.create(email, plan=plan, workspace_id=workspace_id)
        except ApiError as exc:
            return exc.response()
        except InvalidRequestError as exc:
            return _invalid(exc).response()
        made = await gateway.keys.create(workspace.id, scopes=ROLES["admin"]) if with_key else None
        result = await workspace_view(gateway, workspace)  # the key counted in it
        if made is not None:
            result["key"] = {**made.key.public(), "key": made.secret}
        return json_response(result, 201)

    async def read(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
        except ApiError as exc:
            return exc.response()
        return json_response(await workspace_view(gateway, workspace))

    async def update(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
            body = await json_body(request)
            check_fields(body, ["plan", "email", "status"])
            if not body:
                raise ApiError(
                    400, "Nothing to change: give plan, email or status.", code="invalid_value"
                )
            plan = string_field(body, "plan") if "plan" in body else None
            email = string_field(body, "email", max_length=254) if "email" in body else None
            status = _status(body["status"], "status") if "status" in body else None
            if "status" in body and status is None:  # as plan and email: null is no status
                raise ApiError(
                    400,
                    "'status' must be 'active' or 'suspended'.",
                    code="invalid_value",
                    param="status",
                )
            updated = await gateway.workspaces.update(
                workspace.id, plan=plan, email=email, status=status
            )
        except ApiError as exc:
            return exc.response()
        except InvalidRequestError as exc:
            return _invalid(exc).response()
        return json_response(await workspace_view(gateway, updated))

    async def delete(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
            force = request.query_params.get("force", "false")
            if force not in ("true", "false"):
                raise ApiError(
                    400, "'force' must be true or false.", code="invalid_value", param="force"
                )
            removed = await delete_workspace(gateway, workspace, force=force == "true")
        except ApiError as exc:
            return exc.response()
        except WalletNotEmptyError as exc:
            return ApiError(409, f"{exc}.", code="wallet_not_empty", param="force").response()
        return json_response(removed)

    def layer_settings(path: str, status: SettingsView, change: SettingsChange) -> list[Route]:
        """``GET`` and ``PATCH`` of a workspace's settings of one layer, as the workspace's
        own API reads (``status``) and changes (``change``) them, for any workspace."""

        async def read_settings(request: Request) -> Response:
            try:
                workspace = await find_workspace(gateway, request)
            except ApiError as exc:
                return exc.response()
            return json_response(await status(gateway, workspace.id))

        async def update_settings(request: Request) -> Response:
            try:
                workspace = await find_workspace(gateway, request)
                await change(gateway, workspace.id, await json_body(request))
            except ApiError as exc:
                return exc.response()
            return json_response(await status(gateway, workspace.id))

        return [
            Route(one + path, read_settings, methods=["GET"]),
            Route(one + path, update_settings, methods=["PATCH"]),
        ]

    async def purge_workspace_cache(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
            return await purge_cache(gateway, workspace.id, request)
        except ApiError as exc:
            return exc.response()

    async def purge_every_cache(request: Request) -> Response:
        try:
            return await purge_cache(gateway, None, request)
        except ApiError as exc:
            return exc.response()

    def reader(answer: Any) -> Any:
        """A workspace's request log, usage or events (``api.requests.READS``)."""

        async def read(request: Request) -> Response:
            try:
                workspace = await find_workspace(gateway, request)
                return json_response(await answer(gateway, workspace.id, request))
            except ApiError as exc:
                return exc.response()

        return read

    async def create_key(request: Request) -> Response:
        try:
            workspace = await find_workspace(gateway, request)
            body = await json_body(request, optional=True)
            check_fields(body, ["name", "role", "scopes"])
            name = string_field(body, "name", default="default")
            scopes = requested_scopes(body)
        except ApiError as exc:
            return exc.response()
        made = await gateway.keys.create(workspace.id, name=name, scopes=scopes)
        return json_response({**made.key.public(), "key": made.secret}, 201)

    return [
        Route("/workspaces", list_all, methods=["GET"]),
        Route("/workspaces", create, methods=["POST"]),
        Route(one, read, methods=["GET"]),
        Route(one, update, methods=["PATCH"]),
        Route(one, delete, methods=["DELETE"]),
        # The operator changes any workspace's settings, as its owner would (caller: none).
        *layer_settings("/budget", budget_status, partial(change_budget, caller=None)),
        *layer_settings("/guardian", guardian_status, partial(change_guardian, caller=None)),
        *layer_settings("/pii", pii_status, change_pii),
        *layer_settings("/cache", cache_status, change_cache),
        Route(one + "/cache", purge_workspace_cache, methods=["DELETE"]),
        Route("/cache", purge_every_cache, methods=["DELETE"]),
        *(Route(one + path, reader(answer), methods=["GET"]) for path, answer in READS.items()),
        Route(one + "/keys", create_key, methods=["POST"]),
    ]


#: A layer's settings of a workspace as the API shows them, and a PATCH body applied to them.
SettingsView = Callable[[Gateway, str], Awaitable[dict[str, Any]]]
SettingsChange = Callable[[Gateway, str, dict[str, Any]], Awaitable[None]]


def _status(value: Any, param: str) -> Status | None:
    if value is None:
        return None
    if value not in _STATUSES:
        raise ApiError(
            400, f"'{param}' must be 'active' or 'suspended'.", code="invalid_value", param=param
        )
    return cast(Status, value)


def _invalid(exc: InvalidRequestError) -> ApiError:
    message = str(exc)
    exists = "already exists" in message
    return ApiError(
        409 if exists else 400,
        message[0].upper() + message[1:] + ".",
        code="workspace_exists" if exists else "invalid_value",
        param=exc.param,
    )
