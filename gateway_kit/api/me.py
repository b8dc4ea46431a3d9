"""``GET /v1/me``: the authenticated workspace's plan, quota and savings (spec section 2.1)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from gateway_kit._asgi.errors import NOT_RUNNING, error_body
from gateway_kit.admin import workspace_status
from gateway_kit.api._common import ApiError, principal_of
from gateway_kit.gateway import Gateway


def me_endpoint(gateway: Gateway) -> Callable[[Request], Awaitable[Response]]:
    async def me(request: Request) -> Response:
        if not gateway.running:
            body = error_body(NOT_RUNNING, type="api_error", code="gateway_not_running")
            return Response(body, 503, media_type="application/json")
        workspace = await gateway.workspaces.get(principal_of(request).workspace_id)
        if workspace is None:
            error = ApiError(
                404, "The key's workspace no longer exists.", code="workspace_not_found"
            )
            return error.response()
        status = await workspace_status(gateway, workspace)
        return Response(status.to_json(), media_type="application/json")

    return me
