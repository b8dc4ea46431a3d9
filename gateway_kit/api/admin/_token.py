"""``OperatorAuthMiddleware``: the operator API answers only to ``admin.token``.

``Authorization: Bearer <admin.token>``, compared in constant time; anything else is 401
(workspace keys included: they are not the operator's). Without ``admin.token`` configured the
whole operator API answers 404, as if it were not there.
"""

from __future__ import annotations

import hmac

from gateway_kit._asgi import ASGIApp, Receive, Scope, Send, header, send_error
from gateway_kit.gateway import Gateway

__all__ = ["OperatorAuthMiddleware"]

_CHALLENGE = ((b"www-authenticate", b'Bearer realm="gateway-kit operator"'),)


class OperatorAuthMiddleware:
    def __init__(self, app: ASGIApp, *, gateway: Gateway) -> None:
        self.app = app
        self._gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = self._gateway.config.admin.token
        if token is None:
            await send_error(
                send,
                404,
                "The operator API is not enabled (set admin.token).",
                type="not_found_error",
                code="not_found",
            )
            return
        given = header(scope, b"authorization") or b""
        expected = b"Bearer " + token.get_secret_value().encode()
        if not hmac.compare_digest(given, expected):
            await send_error(
                send,
                401,
                "A valid operator token is required (Authorization: Bearer <admin.token>).",
                type="authentication_error",
                code="invalid_admin_token",
                headers=_CHALLENGE,
            )
            return
        await self.app(scope, receive, send)
