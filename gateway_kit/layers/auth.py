"""``AuthMiddleware``: ``Authorization: Bearer <key>`` to a principal on the request context.

Missing, malformed, unknown, revoked and expired keys all get 401 with an OpenAI-shaped body
that never repeats the key. A management path naming a workspace
(``/api/v1/workspaces/{workspace_id}/...``) must name the key's own workspace: 403 otherwise,
with the same answer whether or not the other workspace exists. Authenticating only reads
storage; an unknown key writes nothing anywhere.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gateway_kit._asgi import ASGIApp, Receive, Scope, Send, header, send_error
from gateway_kit.accounts.keys import Principal
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import get_context

logger = logging.getLogger("gateway_kit.auth")

_WORKSPACE_PATH = re.compile(r"/api/v1/workspaces/([^/]+)")
_CHALLENGE = ((b"www-authenticate", b'Bearer realm="gateway-kit"'),)


@dataclass(frozen=True, slots=True)
class AuthVerdict:
    """``principal`` when admitted; otherwise the status and error to answer with."""

    principal: Principal | None
    status: int = 200
    code: str = ""
    message: str = ""


_MISSING = AuthVerdict(
    None,
    401,
    "missing_api_key",
    "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
)
_MALFORMED = AuthVerdict(
    None,
    401,
    "invalid_api_key",
    "The Authorization header must be 'Bearer <key>'.",
)
_INVALID = AuthVerdict(None, 401, "invalid_api_key", "The API key is invalid, revoked or expired.")
_FORBIDDEN = AuthVerdict(
    None, 403, "workspace_forbidden", "This API key cannot access that workspace."
)


class AuthPolicy:
    """Decides who a request is; no ASGI in here."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def check(self, authorization: bytes | None, path: str) -> AuthVerdict:
        if authorization is None:
            return _MISSING
        scheme, _, credentials = authorization.partition(b" ")
        secret = credentials.strip()
        if scheme.lower() != b"bearer" or not secret or b" " in secret:
            return _MALFORMED
        try:
            text = secret.decode("ascii")
        except UnicodeDecodeError:
            return _MALFORMED
        principal = await self._gateway.keys.authenticate(text)
        if principal is None:
            return _INVALID
        match = _WORKSPACE_PATH.search(path)
        if match is not None and match.group(1) != principal.workspace_id:
            return _FORBIDDEN
        return AuthVerdict(principal)


class AuthMiddleware:
    """Authenticate every request but those under ``public_paths`` (exact paths)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        public_paths: Iterable[str] = ("/healthz",),
        mode: Literal["enforce", "off"] | None = None,
    ) -> None:
        self.app = app
        self._policy = AuthPolicy(gateway)
        self._public = frozenset(public_paths)
        self._mode = mode or gateway.config.auth.mode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._mode == "off" or scope["path"] in self._public:
            await self.app(scope, receive, send)
            return
        try:
            verdict = await self._policy.check(header(scope, b"authorization"), scope["path"])
        except StorageError as exc:
            # No way to tell who this is: closed, whatever the other layers' policies.
            logger.error("authentication unavailable: %s", exc)
            await send_error(
                send,
                503,
                "Authentication is temporarily unavailable.",
                type="api_error",
                code="auth_unavailable",
            )
            return
        if verdict.principal is None:
            await send_error(
                send,
                verdict.status,
                verdict.message,
                type="authentication_error" if verdict.status == 401 else "permission_error",
                code=verdict.code,
                headers=_CHALLENGE if verdict.status == 401 else (),
            )
            return
        get_context(scope).principal = verdict.principal
        await self.app(scope, receive, send)
