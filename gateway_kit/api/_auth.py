"""Who may call a management route: ``requires`` gives a route its authentication and scope.

Every workspace route declares the one scope it needs (``accounts.scopes``); the Auth layer in
front of it authenticates the key, checks that the path's workspace is the key's own and that
the key holds the scope, and answers 401 or 403 otherwise, before the endpoint runs. Checks
that depend on the body (a key handing out scopes, a key's own cap) are the endpoints' own:
``check_grant``.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.middleware import Middleware

from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.scopes import KeyScope, ordered, role_of
from gateway_kit.api._common import ApiError
from gateway_kit.gateway import Gateway
from gateway_kit.layers.auth import AuthMiddleware

__all__ = ["check_grant", "requires"]


def requires(gateway: Gateway, scope: KeyScope) -> list[Middleware]:
    """A route's middleware: Auth, requiring ``scope`` of the calling key."""
    return [Middleware(AuthMiddleware, gateway=gateway, public_paths=(), scope=scope)]


def check_grant(caller: Principal, scopes: Iterable[KeyScope], what: str) -> None:
    """403 unless ``caller`` holds every one of ``scopes``: a key never hands out (or takes
    over, by rotating) more than it has. ``what`` says what was attempted."""
    missing = ordered(set(scopes) - caller.scopes)
    if missing:
        raise ApiError(
            403,
            f"This API key cannot {what}: it lacks {', '.join(repr(m) for m in missing)} "
            f"(its role: {role_of(caller.scopes)}).",
            code="missing_scope",
        )
