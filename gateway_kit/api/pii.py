"""PII masking for a workspace: ``/api/v1/workspaces/{workspace_id}/pii``.

- ``GET   .../pii``   the configuration's settings (mode, kinds, scope...) and the
  workspace's own patterns and allow-list                                      ``pii:read``
- ``PATCH .../pii``   ``{"patterns": {"ACME_ID": "ACME-\\\\d+" | null}, "allow": ["S3", ...]
  | null}``: patterns added, changed or removed by name; the allow-list replaced     ``pii:write``

The operator reads and changes any workspace's at ``/api/v1/admin/workspaces/{id}/pii``
(this code).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.pii import PIISettings
from gateway_kit.accounts.scopes import KeyScope
from gateway_kit.api._auth import requires
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    one_change_at_a_time,
    principal_of,
)
from gateway_kit.config.pii import check_pattern
from gateway_kit.gateway import Gateway

__all__ = ["change_pii", "pii_routes", "pii_status"]

#: A workspace's allow-list: at most this many values, each at most this long.
MAX_ALLOWED, MAX_ALLOWED_LENGTH = 1000, 256
#: A workspace's own patterns, at most.
MAX_PATTERNS = 50


async def pii_status(gateway: Gateway, workspace_id: str) -> dict[str, Any]:
    config = gateway.config.pii
    settings = await gateway.pii_settings.get(workspace_id)
    return {
        "object": "pii",
        "workspace_id": workspace_id,
        "mode": config.mode.value,
        "on_error": config.on_error.value,
        "scope": config.scope,
        "kinds": list(config.kinds),
        "phone_region": config.phone_region,
        "mask_system": config.mask_system,
        "mask_tool_descriptions": config.mask_tool_descriptions,
        "configured_patterns": dict(config.patterns),
        "patterns": dict(settings.patterns),
        "allow": list(settings.allow),
    }


@one_change_at_a_time("pii")
async def change_pii(gateway: Gateway, workspace_id: str, body: dict[str, Any]) -> None:
    """Apply a ``PATCH .../pii`` body, checked as a whole before anything is saved."""
    check_fields(body, ["patterns", "allow"])
    current = await gateway.pii_settings.get(workspace_id)
    patterns = dict(current.patterns)
    changes = body.get("patterns", {})
    if not isinstance(changes, dict):
        raise ApiError(
            400,
            "'patterns' must be an object of names to regular expressions (a name's null "
            "removes it).",
            code="invalid_type",
            param="patterns",
        )
    for name, pattern in changes.items():
        if pattern is None:
            patterns.pop(name, None)
            continue
        if name in gateway.config.pii.patterns:
            raise ApiError(
                400,
                f"Pattern {name!r} is the configuration's; choose another name.",
                code="invalid_value",
                param=f"patterns.{name}",
            )
        try:
            check_pattern(name, pattern)
        except ValueError as exc:
            raise ApiError(400, f"{exc}.", code="invalid_value", param=f"patterns.{name}") from None
        patterns[name] = pattern
    if len(patterns) > MAX_PATTERNS:
        raise ApiError(
            400, f"At most {MAX_PATTERNS} patterns.", code="invalid_value", param="patterns"
        )
    allow = current.allow
    if "allow" in body:
        allow = _allow_list(body["allow"])
    await gateway.pii_settings.save(workspace_id, PIISettings(patterns, allow))


def _allow_list(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or len(value) > MAX_ALLOWED
        or not all(isinstance(v, str) and 0 < len(v) <= MAX_ALLOWED_LENGTH for v in value)
    ):
        raise ApiError(
            400,
            f"'allow' must be a list of at most {MAX_ALLOWED} values, each a non-empty string "
            f"of at most {MAX_ALLOWED_LENGTH} characters (or null).",
            code="invalid_value",
            param="allow",
        )
    return tuple(dict.fromkeys(value))


def pii_routes(gateway: Gateway) -> list[Route]:
    async def read(request: Request) -> Response:
        return json_response(await pii_status(gateway, principal_of(request).workspace_id))

    async def update(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        try:
            await change_pii(gateway, workspace_id, await json_body(request))
        except ApiError as exc:
            return exc.response()
        return json_response(await pii_status(gateway, workspace_id))

    path = "/workspaces/{workspace_id}/pii"
    return [
        Route(path, read, methods=["GET"], middleware=requires(gateway, KeyScope.PII_READ)),
        Route(path, update, methods=["PATCH"], middleware=requires(gateway, KeyScope.PII_WRITE)),
    ]
