"""``create_app``: the standalone gateway as a Starlette application.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` (the layer stacks),
``GET /v1/models`` and ``GET /v1/models/{model}``, ``GET /v1/me``, the management API under
``/api/v1`` (all behind ``AuthMiddleware``, each route requiring its key scope), the operator
API under ``/api/v1/admin`` (the operator's token), ``GET /healthz`` and ``GET /metrics``
(Prometheus, when enabled) and the dashboard at ``/dashboard``.
Every other path, and every error Starlette raises, answers in the OpenAI error shape.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, Router

from gateway_kit._asgi import error_body
from gateway_kit._asgi.errors import INTERNAL_ERROR
from gateway_kit._text import printable
from gateway_kit.api import admin_mount, management_routes, me_endpoint
from gateway_kit.api.metrics import metrics_route
from gateway_kit.api.payments import stripe_endpoint
from gateway_kit.config import GatewayConfig
from gateway_kit.dashboard import dashboard_routes
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.layers.auth import AuthMiddleware
from gateway_kit.layers.telemetry import TelemetryMiddleware
from gateway_kit.stack import build_chat_stack, build_embeddings_stack

logger = logging.getLogger("gateway_kit")

_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
}


def create_app(config: GatewayConfig | None = None, *, gateway: Gateway | None = None) -> Starlette:
    """The standalone gateway.

    With ``config`` (or nothing: the offline demo) the app owns a ``Gateway`` and enters it in
    its lifespan. With ``gateway`` the caller owns it and enters it in its own lifespan, which
    is how a host application mounts the gateway under a path.
    """
    if config is not None and gateway is not None:
        raise TypeError("pass either config or gateway, not both")
    owned = gateway is None
    gw = Gateway(config) if gateway is None else gateway

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if owned:
            async with gw:
                yield
        else:
            yield

    listing = _model_objects(gw.config)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": list(listing.values())})

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        found = listing.get(name)
        if found is None:
            body = error_body(
                f"The model '{name}' does not exist or you do not have access to it.",
                type="invalid_request_error",
                code="model_not_found",
                param="model",
            )
            return Response(body, 404, media_type="application/json")
        return JSONResponse(found)

    async def healthz(request: Request) -> Response:
        status = "ok" if gw.running else "starting"
        return JSONResponse({"status": status}, status_code=200 if gw.running else 503)

    auth = [Middleware(AuthMiddleware, gateway=gw, public_paths=())]
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", build_chat_stack(gw), methods=["POST"]),
            Route("/v1/embeddings", build_embeddings_stack(gw), methods=["POST"]),
            Route("/v1/models", models, methods=["GET"], middleware=auth),
            Route("/v1/models/{model:path}", model, methods=["GET"], middleware=auth),
            Route("/v1/me", me_endpoint(gw), methods=["GET"], middleware=auth),
            # The operator API has its own token, so it comes before the keyed routes.
            admin_mount(gw),
            Mount("/api/v1", app=Router(management_routes(gw), redirect_slashes=False)),
            Route("/v1/payments/stripe", stripe_endpoint(gw), methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            metrics_route(gw),
            *dashboard_routes(),
        ],
        middleware=[Middleware(TelemetryMiddleware)],
        exception_handlers={
            HTTPException: _http_error,
            StorageError: _storage_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    # A path with a slash too many is a 404 like any unknown path: Starlette's redirect would
    # answer it with an empty 307 before authentication, its target taken from the Host header.
    app.router.redirect_slashes = False
    return app


def _model_objects(config: GatewayConfig) -> dict[str, dict[str, object]]:
    """``GET /v1/models``' entries by name: OpenAI's model object (``id``, ``object``,
    ``created``, ``owned_by``), the models and the ``auto`` models of smart routing."""
    objects: dict[str, dict[str, object]] = {}
    for model in config.models:
        owner = model.owned_by or model.served_by[0].provider
        objects[model.name] = {"id": model.name, "object": "model", "created": 0, "owned_by": owner}
    for auto in config.routing.auto:
        objects[auto.name] = {
            "id": auto.name,
            "object": "model",
            "created": 0,
            "owned_by": "gateway-kit",
        }
    return objects


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"No route for {request.method} {request.url.path}."
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}."
    else:
        message = str(exc.detail)
    body = error_body(
        message,
        type=_ERROR_TYPES.get(exc.status_code, "invalid_request_error"),
        code={404: "not_found", 405: "method_not_allowed"}.get(exc.status_code),
    )
    return Response(body, exc.status_code, headers=exc.headers, media_type="application/json")


async def _storage_error(request: Request, exc: Exception) -> Response:
    """The storage failed under a management or operator route (or a change to the same
    record kept being held elsewhere): nothing is wrong with the request, try it again."""
    logger.warning("storage failed on %s %s: %s", request.method, printable(request.url.path), exc)
    body = error_body(
        "The gateway's storage is unavailable; try again.",
        type="api_error",
        code="storage_unavailable",
    )
    return Response(body, 503, headers={"retry-after": "1"}, media_type="application/json")


async def _server_error(request: Request, exc: Exception) -> Response:
    path = printable(request.url.path)  # percent-decoded: it may hold a newline
    logger.exception("unhandled error on %s %s", request.method, path)
    body = error_body(INTERNAL_ERROR, type="api_error", code="internal_error")
    return Response(body, 500, media_type="application/json")
