"""``GET /metrics``: the gateway's Prometheus metrics (``observe.metrics``).

Off unless ``metrics.enabled`` (then 404). With ``metrics.access = "operator"`` (the default)
it answers only to the operator's token, as the operator API does (``Authorization: Bearer
<admin.token>``; a Prometheus scrape config sets it with ``authorization.credentials``);
with ``"public"`` to anyone who reaches the port, for a gateway bound to a private interface.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit._asgi import error_body
from gateway_kit.api.admin._token import OperatorAuthMiddleware
from gateway_kit.gateway import Gateway

__all__ = ["metrics_route"]


def metrics_route(gateway: Gateway) -> Route:
    async def metrics(request: Request) -> Response:
        figures = gateway.metrics
        if figures is None:
            body = error_body(
                "Metrics are not enabled (set metrics.enabled = true).",
                type="not_found_error",
                code="not_found",
            )
            return Response(body, 404, media_type="application/json")
        await figures.refresh()
        exposition, content_type = figures.exposition()
        return Response(exposition, headers={"content-type": content_type})

    public = gateway.config.metrics.access == "public" or gateway.metrics is None
    guard = [] if public else [Middleware(OperatorAuthMiddleware, gateway=gateway)]
    return Route("/metrics", metrics, methods=["GET"], middleware=guard)
