"""API keys of a workspace: ``/api/v1/workspaces/{workspace_id}/keys``.

- ``GET    .../keys``                  list (never secrets)
- ``POST   .../keys``                  create ``{"name"}``: 201, the secret shown once as ``key``
- ``GET    .../keys/{key_id}``         read
- ``POST   .../keys/{key_id}/rotate``  ``{"grace_period_s"}``: a new secret, same key id
- ``DELETE .../keys/{key_id}``         revoke

``AuthMiddleware`` in front has already checked that the path's workspace is the caller's.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.keys import ApiKey
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
        workspace_id = principal_of(request).workspace_id
        try:
            body = await json_body(request, optional=True)
            check_fields(body, ["name"])
            name = string_field(body, "name", default="default")
        except ApiError as exc:
            return exc.response()
        made = await gateway.keys.create(workspace_id, name=name)
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
            revoked = await gateway.keys.revoke(key.workspace_id, key.key_id)
        except ApiError as exc:
            return exc.response()
        except NotFoundError:
            return _not_found().response()
        return json_response(revoked.public())

    async def _find(request: Request) -> ApiKey:
        workspace_id = principal_of(request).workspace_id
        key = await gateway.keys.get(workspace_id, request.path_params["key_id"])
        if key is None:
            raise _not_found()
        return key

    base = "/workspaces/{workspace_id}/keys"
    return [
        Route(base, list_keys, methods=["GET"]),
        Route(base, create_key, methods=["POST"]),
        Route(base + "/{key_id}", read_key, methods=["GET"]),
        Route(base + "/{key_id}", revoke_key, methods=["DELETE"]),
        Route(base + "/{key_id}/rotate", rotate_key, methods=["POST"]),
    ]


def _not_found() -> ApiError:
    return ApiError(404, "No such key in this workspace.", code="key_not_found", param="key_id")
