"""The management API under ``/api/v1`` (behind ``AuthMiddleware``), and ``GET /v1/me``."""

from __future__ import annotations

from starlette.routing import Route

from gateway_kit.api.budget import budget_routes
from gateway_kit.api.keys import key_routes
from gateway_kit.api.me import me_endpoint, workspace_status
from gateway_kit.api.webhooks import webhook_routes
from gateway_kit.gateway import Gateway

__all__ = ["management_routes", "me_endpoint", "workspace_status"]


def management_routes(gateway: Gateway) -> list[Route]:
    """Routes relative to ``/api/v1``."""
    return [*key_routes(gateway), *webhook_routes(gateway), *budget_routes(gateway)]
