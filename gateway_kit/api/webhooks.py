"""Webhooks of a workspace: ``/api/v1/workspaces/{workspace_id}/webhooks``.

- ``POST   .../webhooks``                 create ``{name, url, secret, events?}``: 201
- ``GET    .../webhooks``                 list
- ``GET    .../webhooks/{id}``            read
- ``PATCH  .../webhooks/{id}``            change ``name``, ``url``, ``secret``, ``events``, or
  ``{"status": "active"}``; a change of url, secret or events re-activates a stale webhook
- ``DELETE .../webhooks/{id}``            delete (its held deliveries with it)
- ``POST   .../webhooks/{id}/test``       send a sample event now: status, latency, error class
- ``GET    .../webhooks/{id}/deliveries`` the attempt log, newest first
- ``POST   .../webhooks/{id}/replay``     ``{since}``: queue held and failed deliveries again

Reading (list, read, the delivery log) needs ``webhooks:read``; the rest ``webhooks:write``.

``events`` omitted (or null) means every type, a list only those, an empty list paused.
Every URL passes the SSRF guard; the secret is never shown back in full.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.scopes import KeyScope
from gateway_kit.api._auth import requires
from gateway_kit.api._common import (
    ApiError,
    check_fields,
    json_body,
    json_response,
    limit_param,
    principal_of,
    string_field,
    time_param,
)
from gateway_kit.events.models import EVENT_TYPES, normalize_event_filter, sample_event
from gateway_kit.exceptions import InvalidRequestError, NotFoundError, UnsafeURLError
from gateway_kit.gateway import Gateway
from gateway_kit.webhooks import delivery
from gateway_kit.webhooks.emitter import drop_held, replay
from gateway_kit.webhooks.store import Webhook, public_view

MIN_SECRET = 24
MAX_SECRET = 512
MAX_URL = 2048


def webhook_routes(gateway: Gateway) -> list[Route]:
    async def view(hook: Webhook) -> dict[str, Any]:
        return public_view(hook, await gateway.webhooks.state(hook.workspace_id, hook.id))

    async def find(request: Request) -> Webhook:
        workspace_id = principal_of(request).workspace_id
        hook = await gateway.webhooks.get(workspace_id, request.path_params["webhook_id"])
        if hook is None:
            raise ApiError(
                404, "No such webhook in this workspace.", code="webhook_not_found", param="id"
            )
        return hook

    async def safe_url(body: dict[str, Any]) -> str:
        url = string_field(body, "url", max_length=MAX_URL)
        try:
            return (await gateway.ssrf_guard.check(url)).url
        except UnsafeURLError as exc:
            raise ApiError(
                400, f"'url' is not allowed: {exc}", code="invalid_url", param="url"
            ) from None

    async def create(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        try:
            body = await json_body(request)
            check_fields(body, ["name", "url", "secret", "events"])
            name = string_field(body, "name")
            url = await safe_url(body)
            secret = _secret(body)
            events = _events(body)
            hook = await gateway.webhooks.create(
                workspace_id, name=name, url=url, secret=secret, events=events
            )
        except ApiError as exc:
            return exc.response()
        except InvalidRequestError as exc:
            return ApiError(409, str(exc), code="too_many_webhooks").response()
        return json_response(await view(hook), 201)

    async def list_all(request: Request) -> Response:
        hooks = await gateway.webhooks.for_workspace(principal_of(request).workspace_id)
        return json_response({"object": "list", "data": [await view(h) for h in hooks]})

    async def read(request: Request) -> Response:
        try:
            return json_response(await view(await find(request)))
        except ApiError as exc:
            return exc.response()

    async def update(request: Request) -> Response:
        try:
            hook = await find(request)
            body = await json_body(request)
            check_fields(body, ["name", "url", "secret", "events", "status"])
            changes: dict[str, Any] = {}
            if "name" in body:
                changes["name"] = string_field(body, "name")
            if "url" in body:
                changes["url"] = await safe_url(body)
            if "secret" in body:
                changes["secret"] = _secret(body)
            if "events" in body:
                changes["events"] = _events(body)
            status = body.get("status")
            if "status" in body and status != "active":
                raise ApiError(
                    400,
                    "'status' can only be set to 'active' (to pause, set 'events' to []).",
                    code="invalid_value",
                    param="status",
                )
            reactivate = status == "active" or bool({"url", "secret", "events"} & set(changes))

            def change(current: Webhook) -> Webhook:
                stale_at = None if reactivate else current.stale_at
                return replace(current, **changes, stale_at=stale_at)

            updated = await gateway.webhooks.update(hook.workspace_id, hook.id, change)
        except ApiError as exc:
            return exc.response()
        except NotFoundError:
            return _not_found().response()
        assert updated is not None
        return json_response(await view(updated))

    async def delete(request: Request) -> Response:
        try:
            hook = await find(request)
        except ApiError as exc:
            return exc.response()
        await drop_held(gateway.storage, gateway.webhooks, hook.workspace_id, hook.id)
        await gateway.webhooks.delete(hook.workspace_id, hook.id)
        return json_response({"id": hook.id, "object": "webhook", "deleted": True})

    async def test(request: Request) -> Response:
        try:
            hook = await find(request)
            body = await json_body(request, optional=True)
            check_fields(body, ["event"])
            event_type = body.get("event") or next(
                (t for t in EVENT_TYPES if hook.events is None or t in hook.events), EVENT_TYPES[0]
            )
            if event_type not in EVENT_TYPES:
                raise ApiError(
                    400,
                    f"Unknown event type {event_type!r}.",
                    code="unknown_event_type",
                    param="event",
                )
        except ApiError as exc:
            return exc.response()
        event = sample_event(event_type, workspace_id=hook.workspace_id)
        result = await delivery.attempt(
            gateway.webhook_client,
            url=hook.url,
            body=event.to_bytes(),
            secret=hook.secret,
            event_id=event.event_id,
            attempt_number=1,
            deadline_s=gateway.config.webhooks.timeout_s,
            test=True,
        )
        # Status, latency and error class only: the receiver's body could hold anything.
        return json_response(
            {
                "event_id": event.event_id,
                "event": event_type,
                "status_code": result.status,
                "latency_ms": result.duration_ms,
                "error_class": result.error_class,
            }
        )

    async def deliveries(request: Request) -> Response:
        try:
            hook = await find(request)
            limit = limit_param(request.query_params.get("limit", "100"), 1000)
        except ApiError as exc:
            return exc.response()
        attempts = await gateway.webhooks.attempts(hook.workspace_id, hook.id, limit=limit)
        return json_response({"object": "list", "data": [a.public() for a in attempts]})

    async def replay_since(request: Request) -> Response:
        try:
            hook = await find(request)
            body = await json_body(request)
            check_fields(body, ["since"])
            since = time_param(body.get("since"), "since")
            if hook.status != "active":
                raise ApiError(
                    409,
                    f"The webhook is {hook.status}: make it active first (PATCH, or set events), "
                    "or the replayed deliveries would be held again.",
                    code="webhook_not_active",
                )
        except ApiError as exc:
            return exc.response()
        event_ids = await replay(
            gateway.storage, gateway.webhooks, hook.workspace_id, hook.id, since=since
        )
        return json_response({"requeued": len(event_ids), "event_ids": event_ids})

    reads = requires(gateway, KeyScope.WEBHOOKS_READ)
    writes = requires(gateway, KeyScope.WEBHOOKS_WRITE)
    base = "/workspaces/{workspace_id}/webhooks"
    one = base + "/{webhook_id}"
    return [
        Route(base, create, methods=["POST"], middleware=writes),
        Route(base, list_all, methods=["GET"], middleware=reads),
        Route(one, read, methods=["GET"], middleware=reads),
        Route(one, update, methods=["PATCH"], middleware=writes),
        Route(one, delete, methods=["DELETE"], middleware=writes),
        Route(one + "/test", test, methods=["POST"], middleware=writes),
        Route(one + "/deliveries", deliveries, methods=["GET"], middleware=reads),
        Route(one + "/replay", replay_since, methods=["POST"], middleware=writes),
    ]


def _not_found() -> ApiError:
    return ApiError(404, "No such webhook in this workspace.", code="webhook_not_found")


def _secret(body: dict[str, Any]) -> str:
    secret = body.get("secret")
    if not isinstance(secret, str):
        raise ApiError(400, "'secret' must be a string.", code="invalid_type", param="secret")
    printable = secret.isascii() and secret.isprintable()  # no escape echoed in secret_hint
    if not MIN_SECRET <= len(secret) <= MAX_SECRET or secret != secret.strip() or not printable:
        raise ApiError(
            400,
            f"'secret' must be {MIN_SECRET} to {MAX_SECRET} printable ASCII characters, without "
            "surrounding spaces (e.g. 'whsec_' and 32 random bytes in base64).",
            code="invalid_value",
            param="secret",
        )
    return secret


def _events(body: dict[str, Any]) -> tuple[str, ...] | None:
    events = body.get("events")
    if events is None:
        return None
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise ApiError(
            400, "'events' must be a list of event types.", code="invalid_type", param="events"
        )
    try:
        return normalize_event_filter(events)
    except ValueError as exc:
        raise ApiError(400, str(exc), code="unknown_event_type", param="events") from None
