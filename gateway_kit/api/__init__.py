"""The management API under ``/api/v1`` (each route behind ``AuthMiddleware`` requiring its
scope), ``GET /v1/me``, and the operator API under ``/api/v1/admin`` (``api.admin``)."""

from __future__ import annotations

from starlette.routing import Route

from gateway_kit.api.admin import admin_mount
from gateway_kit.api.budget import budget_routes
from gateway_kit.api.cache import cache_routes
from gateway_kit.api.guardian import guardian_routes
from gateway_kit.api.keys import key_routes
from gateway_kit.api.me import me_endpoint
from gateway_kit.api.pii import pii_routes
from gateway_kit.api.requests import request_routes
from gateway_kit.api.webhooks import webhook_routes
from gateway_kit.gateway import Gateway

__all__ = ["admin_mount", "management_routes", "me_endpoint"]


def management_routes(gateway: Gateway) -> list[Route]:
    """Routes relative to ``/api/v1``, each with its Auth layer and scope."""
    return [
        *key_routes(gateway),
        *webhook_routes(gateway),
        *budget_routes(gateway),
        *guardian_routes(gateway),
        *pii_routes(gateway),
        *cache_routes(gateway),
        *request_routes(gateway),
    ]
