"""API keys of a workspace: ``/api/v1/workspaces/{workspace_id}/keys``.

- ``GET    .../keys``                  list (never secrets)                      ``keys:read``
- ``POST   .../keys``                  create ``{"name", "role" | "scopes"}``:  ``keys:write``
  201, the secret shown once as ``key``; by default an ``inference`` key
- ``GET    .../keys/{key_id}``         read                                      ``keys:read``
- ``POST   .../keys/{key_id}/rotate``  ``{"grace_period_s"}``: a new secret      ``keys:write``
- ``DELETE .../keys/{key_id}``         revoke                                    ``keys:write``

A key never hands out more than it holds: it may create, rotate and revoke only keys whose
scopes are all its own (rotating an admin key would give its new secret away). The Auth layer
in front of each route has already checked the key, its workspace and the route's scope.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.keys import ApiKey, Principal
from gateway_kit.accounts.scopes import ROLES, KeyScope, ScopeError, parse_scopes, role_scopes
from gateway_kit.api._auth import check_grant, requires
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    number_field,
    principal_of,
    string_field,
)
from gateway_kit.exceptions import NotFoundError
from gateway_kit.gateway import Gateway

#: Longest grace period for a rotated secret: a week.
MAX_GRACE_S = 7 * 86400.0


def key_routes(gateway: Gateway) -> list[Route]:
    async def list_keys(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        keys = await gateway.keys.list(workspace_id)
        return json_response({"object": "list", "data": [key.public() for key in keys]})

    async def create_key(request: Request) -> Response:
        caller = principal_of(request)
        try:
            await may_make_keys(request, caller, "make keys")
            body = await json_body(request, optional=True)
            check_fields(body, ["name", "role", "scopes"])
            name = string_field(body, "name", default="default")
            scopes = requested_scopes(body)
            check_grant(caller, scopes, "create a key with more scopes than its own")
        except ApiError as exc:
            return exc.response()
        made = await gateway.keys.create(caller.workspace_id, name=name, scopes=scopes)
        return json_response({**made.key.public(), "key": made.secret}, 201)

    async def read_key(request: Request) -> Response:
        try:
            key = await _find(request)
        except ApiError as exc:
            return exc.response()
        return json_response(key.public())

    async def rotate_key(request: Request) -> Response:
        try:
            key = await _find(request)
            caller = principal_of(request)
            await may_make_keys(request, caller, "rotate keys")
            check_grant(caller, key.scope_set, "rotate a key with more scopes")
            body = await json_body(request, optional=True)
            check_fields(body, ["grace_period_s"])
            grace = number_field(body, "grace_period_s", default=0, low=0, high=MAX_GRACE_S)
            made = await gateway.keys.rotate(key.workspace_id, key.key_id, grace=grace)
        except ApiError as exc:
            return exc.response()
        except NotFoundError:
            return _not_found().response()
        return json_response({**made.key.public(), "key": made.secret})

    async def revoke_key(request: Request) -> Response:
        try:
            key = await _find(request)
            caller = principal_of(request)
            if await retiring(request, caller):
                raise _retiring("revoke keys")
            check_grant(caller, key.scope_set, "revoke a key with more scopes")
            revoked = await gateway.keys.revoke(key.workspace_id, key.key_id)
        except ApiError as exc:
            return exc.response()
        except NotFoundError:
            return _not_found().response()
        return json_response(revoked.public())

    async def retiring(request: Request, caller: Principal) -> bool:
        """Whether the caller's secret is being retired: as authenticated, or as the storage
        says now (a rotation on another instance reaches this one's cache within
        ``auth.cache_ttl_s``: the old secret made keys there meanwhile)."""
        if caller.retiring:
            return True
        secret = request.headers.get("authorization", "").partition(" ")[2].strip()
        return await gateway.keys.is_retiring(secret)

    async def may_make_keys(request: Request, caller: Principal, what: str) -> None:
        """A secret being retired may not mint or rotate keys (its holder, after a leak, got
        a secret that never expires and cut off the owner's new one); nor may a key with a
        budget cap (the keys it made or took over spent outside its cap, one lifted it)."""
        if await retiring(request, caller):
            raise _retiring(what)
        settings = await gateway.ledger.settings(caller.workspace_id)
        if caller.key_id in settings.key_caps:
            raise ApiError(
                403,
                f"A key with a budget cap may not {what}: they would spend outside its cap. "
                "Ask a key without a cap.",
                code="key_capped",
            )

    async def _find(request: Request) -> ApiKey:
        workspace_id = principal_of(request).workspace_id
        key = await gateway.keys.get(workspace_id, request.path_params["key_id"])
        if key is None:
            raise _not_found()
        return key

    read, write = requires(gateway, KeyScope.KEYS_READ), requires(gateway, KeyScope.KEYS_WRITE)
    base = "/workspaces/{workspace_id}/keys"
    return [
        Route(base, list_keys, methods=["GET"], middleware=read),
        Route(base, create_key, methods=["POST"], middleware=write),
        Route(base + "/{key_id}", read_key, methods=["GET"], middleware=read),
        Route(base + "/{key_id}", revoke_key, methods=["DELETE"], middleware=write),
        Route(base + "/{key_id}/rotate", rotate_key, methods=["POST"], middleware=write),
    ]


def requested_scopes(body: dict[str, Any]) -> frozenset[KeyScope]:
    """The scopes a new key asks for: ``role`` (``admin`` or ``inference``) or ``scopes`` (a
    list of scope names), not both; ``inference`` when neither is given."""
    role, scopes = body.get("role"), body.get("scopes")
    if role is not None and scopes is not None:
        raise ApiError(
            400, "Give 'role' or 'scopes', not both.", code="invalid_value", param="scopes"
        )
    try:
        if scopes is not None:
            if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
                raise ApiError(
                    400,
                    "'scopes' must be a list of scope names.",
                    code="invalid_type",
                    param="scopes",
                )
            if not scopes:
                raise ApiError(
                    400, "'scopes' cannot be empty.", code="invalid_value", param="scopes"
                )
            return parse_scopes(scopes)
        if role is not None:
            if not isinstance(role, str):
                raise ApiError(400, "'role' must be a string.", code="invalid_type", param="role")
            return role_scopes(role)
    except ScopeError as exc:
        param = "scopes" if scopes is not None else "role"
        raise ApiError(400, f"'{param}': {exc}.", code="invalid_value", param=param) from None
    return ROLES["inference"]


def _not_found() -> ApiError:
    return ApiError(404, "No such key in this workspace.", code="key_not_found", param="key_id")


def _retiring(what: str) -> ApiError:
    return ApiError(
        403,
        f"This secret is in its rotation's grace period: it may not {what}. Use the key's new "
        "secret.",
        code="key_retiring",
    )
