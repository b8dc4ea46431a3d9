"""``GET /api/v1/admin/routes``: every model, its fallbacks and its deployments' health
(``closed``, ``open`` while cooling down, ``half_open``; recent failures), read from the shared
storage now (``gateway-kit status --routes`` shows it)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.api._common import ApiError, json_response
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway


def deployment_routes(gateway: Gateway) -> list[Route]:
    async def routes(request: Request) -> Response:
        try:
            report = await gateway.router.report()
        except StorageError:
            return ApiError(
                503,
                "The deployments' health cannot be read: the storage is unavailable.",
                code="storage_unavailable",
            ).response()
        return json_response({"object": "list", "data": report})

    return [Route("/routes", routes, methods=["GET"])]
