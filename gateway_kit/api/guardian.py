"""Guardian for a workspace: ``/api/v1/workspaces/{workspace_id}/guardian``.

- ``GET   .../guardian``   the mode, the rules in force for the workspace's plan, its keys' own
  thresholds and allow-lists, and the recent blocks (one per episode, newest first, with how
  many requests the episode refused so far)                               ``guardian:read``
- ``PATCH .../guardian``   ``{"key_rules": {"kid_...": {"repeat": {"block_at": 50}} | null},
  "allow": {"kid_...": ["repeat"] | ["*"] | null}}``                     ``guardian:write``

A key's own thresholds and allow-list are changed only by an admin key (or the operator:
``/api/v1/admin/workspaces/{id}/guardian`` shares this code), so a key Guardian stops cannot
lift itself out.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.guardian import GuardianSettings
from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.scopes import ADMIN_SCOPES, KeyScope
from gateway_kit.api._auth import check_grant, requires
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    one_change_at_a_time,
    principal_of,
)
from gateway_kit.config.guardian import RULE_NAMES, GuardianRules, merge_rules
from gateway_kit.gateway import Gateway
from gateway_kit.layers.guardian.events import LOG_SIZE, episode_key, log_key

__all__ = ["change_guardian", "guardian_routes", "guardian_status"]


async def guardian_status(gateway: Gateway, workspace_id: str) -> dict[str, Any]:
    """What the API and ``gateway-kit guardian show`` show."""
    config = gateway.config.guardian
    workspace = await gateway.workspaces.get(workspace_id)
    plan = gateway.workspaces.plan(workspace) if workspace is not None else None
    rules = (
        config.rules
        if plan is None or not plan.guardian
        else merge_rules(config.rules, plan.guardian)
    )
    settings = await gateway.guardian_settings.get(workspace_id)
    recent = []
    for raw in await gateway.storage.log_range(log_key(workspace_id), limit=LOG_SIZE):
        entry = json.loads(raw)
        count = await gateway.storage.get(episode_key(workspace_id, entry["rule"], entry["key_id"]))
        recent.append({**entry, "episode_refusals": int(count) if count else None})
    return {
        "object": "guardian",
        "workspace_id": workspace_id,
        "mode": config.mode.value,
        "on_error": config.on_error.value,
        "throttle_max_wait_s": config.throttle_max_wait_s,
        "episode_s": config.episode_s,
        "plan": workspace.plan if workspace is not None else None,
        "rules": rules.model_dump(mode="json"),
        "key_rules": settings.key_rules,
        "allow": {key: list(rules) for key, rules in settings.allow.items()},
        "recent_blocks": recent,
    }


@one_change_at_a_time("guardian")
async def change_guardian(
    gateway: Gateway, workspace_id: str, body: dict[str, Any], caller: Principal | None
) -> None:
    """Apply a ``PATCH .../guardian`` body, checked as a whole before anything is saved;
    ``caller`` is the key making the change (``None``: the operator)."""
    check_fields(body, ["key_rules", "allow"])
    current = await gateway.guardian_settings.get(workspace_id)
    key_rules = dict(current.key_rules)
    allow = dict(current.allow)
    known = {key.key_id for key in await gateway.keys.list(workspace_id)}
    plan_rules = await _plan_rules(gateway, workspace_id)
    for field in ("key_rules", "allow"):
        changes = body.get(field, {})
        if not isinstance(changes, dict):
            raise ApiError(
                400,
                f"'{field}' must be an object of key ids to settings (a key's null removes "
                "its entry).",
                code="invalid_type",
                param=field,
            )
        for key_id, value in changes.items():
            if key_id not in known:
                raise ApiError(
                    400, f"No key {key_id!r} in this workspace.", code="key_not_found", param=field
                )
            if caller is not None and key_id == caller.key_id:
                check_grant(caller, ADMIN_SCOPES, "change its own Guardian settings")
            if value is None:
                (key_rules if field == "key_rules" else allow).pop(key_id, None)
            elif field == "key_rules":
                key_rules[key_id] = _overrides(plan_rules, value, key_id)
            else:
                allow[key_id] = _allowed(value, key_id)
    await gateway.guardian_settings.save(workspace_id, GuardianSettings(key_rules, allow))


async def _plan_rules(gateway: Gateway, workspace_id: str) -> GuardianRules:
    """The rules a key of the workspace starts from: the configuration's, with its plan's."""
    rules = gateway.config.guardian.rules
    workspace = await gateway.workspaces.get(workspace_id)
    plan = gateway.workspaces.plan(workspace) if workspace is not None else None
    return merge_rules(rules, plan.guardian) if plan is not None and plan.guardian else rules


def _overrides(rules: GuardianRules, value: Any, key_id: str) -> dict[str, dict[str, Any]]:
    param = f"key_rules.{key_id}"
    if not isinstance(value, dict):
        raise ApiError(
            400,
            f"'{param}' must be an object of rule names to fields.",
            code="invalid_type",
            param=param,
        )
    try:
        merge_rules(rules, value)
    except ValueError as exc:
        raise ApiError(400, f"'{param}': {exc}.", code="invalid_value", param=param) from None
    return value


def _allowed(value: Any, key_id: str) -> tuple[str, ...]:
    param = f"allow.{key_id}"
    names = (*RULE_NAMES, "*")
    if not isinstance(value, list) or not all(isinstance(v, str) and v in names for v in value):
        raise ApiError(
            400,
            f"'{param}' must be a list of rule names ({', '.join(RULE_NAMES)}) or [\"*\"].",
            code="invalid_value",
            param=param,
        )
    return tuple(dict.fromkeys(value))


def guardian_routes(gateway: Gateway) -> list[Route]:
    async def read(request: Request) -> Response:
        return json_response(await guardian_status(gateway, principal_of(request).workspace_id))

    async def update(request: Request) -> Response:
        caller = principal_of(request)
        try:
            await change_guardian(gateway, caller.workspace_id, await json_body(request), caller)
        except ApiError as exc:
            return exc.response()
        return json_response(await guardian_status(gateway, caller.workspace_id))

    path = "/workspaces/{workspace_id}/guardian"
    return [
        Route(path, read, methods=["GET"], middleware=requires(gateway, KeyScope.GUARDIAN_READ)),
        Route(
            path, update, methods=["PATCH"], middleware=requires(gateway, KeyScope.GUARDIAN_WRITE)
        ),
    ]
