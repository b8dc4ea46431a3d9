"""The operator API: ``/api/v1/admin``, authenticated by ``admin.token`` (never workspace keys).

- ``workspaces``: list (paginated, by plan or status), create, read with usage, spend, budget
  and wallet, change plan, e-mail or status (suspend, resume), delete; the budget (workspace
  cap and key caps) and new keys of any workspace;
- ``wallet``: balances, top-ups and the billing switch;
- ``deployments``: every model, its fallbacks and its deployments' health.

``gateway-kit workspaces|budget|keys|wallet`` do the same on the storage directly.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Router

from gateway_kit.api.admin._token import OperatorAuthMiddleware
from gateway_kit.api.admin.deployments import deployment_routes
from gateway_kit.api.admin.wallet import wallet_routes
from gateway_kit.api.admin.workspaces import workspace_routes
from gateway_kit.gateway import Gateway

__all__ = ["admin_mount"]


def admin_mount(gateway: Gateway, path: str = "/api/v1/admin") -> BaseRoute:
    """The operator API under ``path``, behind the operator's token."""
    routes = [
        *workspace_routes(gateway),
        *wallet_routes(gateway),
        *deployment_routes(gateway),
    ]
    return Mount(
        path,
        app=Router(routes, redirect_slashes=False),  # no redirect: an unknown path is a 404
        middleware=[Middleware(OperatorAuthMiddleware, gateway=gateway)],
    )
