"""``AuthMiddleware``: ``Authorization: Bearer <key>`` to a principal on the request context.

Missing, malformed, unknown, revoked and expired keys all get 401 with an OpenAI-shaped body
that never repeats the key. A management path naming a workspace
(``/api/v1/workspaces/{workspace_id}/...``) must name the key's own workspace: 403 otherwise,
with the same answer whether or not the other workspace exists. A suspended workspace's keys
get 403 ``workspace_suspended``; a key without the route's scope (``accounts.scopes``) gets 403
``missing_scope`` naming it. Authenticating only reads storage (and nothing once the key and
its workspace are cached); an unknown key writes nothing anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gateway_kit._asgi import ASGIApp, Receive, Scope, Send, header
from gateway_kit._asgi.errors import send_not_running
from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.scopes import KeyScope, role_of
from gateway_kit.accounts.workspaces import Workspace
from gateway_kit.config import Mode, OnError
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.layer import PolicyLayer
from gateway_kit.pipeline.verdicts import Refusal, Verdict, unavailable
from gateway_kit.storage import Storage

_WORKSPACE_PATH = re.compile(r"/api/v1/workspaces/([^/]+)")
_CHALLENGE = ((b"www-authenticate", b'Bearer realm="gateway-kit"'),)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthVerdict(Verdict):
    """``principal`` when admitted; otherwise ``refusal`` says why not (401 or 403)."""

    principal: Principal | None = None
    workspace: Workspace | None = None


def _refused(status: int, code: str, message: str) -> AuthVerdict:
    refusal = Refusal(
        status,
        message,
        code=code,
        type="authentication_error" if status == 401 else "permission_error",
        headers=_CHALLENGE if status == 401 else (),
    )
    return AuthVerdict(action="block", refusal=refusal)


_MISSING = _refused(
    401,
    "missing_api_key",
    "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
)
_MALFORMED = _refused(401, "invalid_api_key", "The Authorization header must be 'Bearer <key>'.")
_INVALID = _refused(401, "invalid_api_key", "The API key is invalid, revoked or expired.")
_FORBIDDEN = _refused(403, "workspace_forbidden", "This API key cannot access that workspace.")
_SUSPENDED = _refused(
    403,
    "workspace_suspended",
    "This workspace is suspended: its keys are refused until the operator resumes it.",
)


def missing_scope(scope: KeyScope, principal: Principal) -> AuthVerdict:
    """403 naming the scope the key lacks, and its role."""
    return _refused(
        403,
        "missing_scope",
        f"This API key lacks the '{scope.value}' scope (its role: "
        f"{role_of(principal.scopes)}). Use an admin key of the workspace, or one made with "
        "this scope.",
    )


class AuthPolicy:
    """Decides who a request is; no ASGI in here."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def check(
        self, authorization: bytes | None, path: str, scope: KeyScope | None = None
    ) -> AuthVerdict:
        """Who the request is, and whether that key may do ``scope`` (``None``: any key)."""
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
        workspace = await self._gateway.workspaces.cached(principal.workspace_id)
        if workspace is None:
            return _INVALID  # deleted (its keys were revoked with it)
        if workspace.suspended:
            return _SUSPENDED
        if scope is not None and not principal.allows(scope):
            return missing_scope(scope, principal)
        return AuthVerdict(principal=principal, workspace=workspace)


class AuthMiddleware(PolicyLayer):
    """Authenticate every request but those under ``public_paths`` (exact paths), and require
    ``scope`` of the key (``inference`` unless given; ``None``: any key of the workspace)."""

    concern = "auth"

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        public_paths: Iterable[str] = ("/healthz",),
        mode: Mode | Literal["enforce", "off"] | None = None,
        scope: KeyScope | None = KeyScope.INFERENCE,
    ) -> None:
        super().__init__(app)
        self._gateway = gateway
        self._scope = scope
        self._policy = AuthPolicy(gateway)
        self._public = frozenset(public_paths)
        self.mode = Mode(mode or gateway.config.auth.mode)
        if self.mode is Mode.MONITOR:
            raise ValueError("AuthMiddleware has no monitor mode: use 'enforce' or 'off'")

    @property
    def storage(self) -> Storage:
        return self._gateway.storage

    def passes(self, scope: Scope) -> bool:
        return self.mode is Mode.OFF or scope["path"] in self._public

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        if not self._gateway.running:  # no storage to find the key in
            await send_not_running(send)
            return None
        try:
            verdict = await self._policy.check(
                header(scope, b"authorization"), scope["path"], self._scope
            )
        except StorageError as exc:
            # No way to tell who this is: closed, whatever the other layers' policies.
            refusal = unavailable(self.concern, OnError.CLOSED, exc)
            assert refusal is not None
            await refusal.send(send)
            return None
        ctx.verdicts[self.concern] = verdict
        if verdict.refusal is not None:
            await verdict.refusal.send(send)
            return None
        ctx.principal, ctx.workspace = verdict.principal, verdict.workspace
        return receive
