"""A workspace's request log and usage: ``/api/v1/workspaces/{workspace_id}/requests|usage``.

- ``GET .../requests``  the workspace's requests, newest first (``requests:read``). Query:
  ``since`` / ``until`` (ISO 8601 times), ``model`` (asked for or served), ``key_id``,
  ``status`` (a code, ``4xx``, ``5xx`` or ``error``), ``limit`` (1 to 1000, default 50),
  ``cursor`` (a page's ``next_cursor``). One call reads at most 5,000 records: a rare filter
  may answer fewer than ``limit`` with ``has_more`` and a cursor to go on from.
- ``GET .../usage``     totals per UTC day and model (requests, errors, cache hits, tokens,
  cost and savings in micro-USD) from ``since`` to ``until`` (days, ``YYYY-MM-DD``; the last
  30 days by default), and their sum (``requests:read``).

- ``GET .../events``    the workspace's last events (up to 200 kept), newest first, as its
  webhooks receive them, webhooks or not (``requests:read``; ``limit``, default 50).

The operator reads any workspace's at ``/api/v1/admin/workspaces/{id}/requests|usage|events``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.scopes import KeyScope
from gateway_kit.api._auth import requires
from gateway_kit.api._common import (
    ApiError,
    json_response,
    limit_param,
    principal_of,
    time_param,
)
from gateway_kit.config.base import NAME_PATTERN
from gateway_kit.gateway import Gateway
from gateway_kit.observe.events import MAX_EVENTS
from gateway_kit.observe.record import iso_ms
from gateway_kit.observe.requestlog import STATUS, RequestFilter, is_day
from gateway_kit.observe.usage import METRICS

__all__ = ["READS", "recent_events", "request_page", "request_routes", "usage_report"]

_MAX_LIMIT = 1000
#: Matched whole (``fullmatch``: a trailing newline is not let through), ASCII digits only.
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: A model's name as the configuration allows it (``org/llama-3`` included).
_MODEL = re.compile(NAME_PATTERN.removeprefix("^").removesuffix("$"))
#: The times records can hold, as ``iso_ms`` writes them (four-digit years): a ``since`` or an
#: ``until`` outside them is taken at the nearest end (year 1 was a 500, and year 9999 in
#: another zone compared as text found nothing).
_FIRST, _LAST = 0.0, datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC).timestamp()
#: A log position: at most 18 digits, so always within the storage's 64-bit range.
_CURSOR = re.compile(r"[1-9][0-9]{0,17}")
_DEFAULT_DAYS = 30


def _query(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    params = request.query_params
    for name in params:
        if name not in allowed:
            raise ApiError(
                400, f"Unknown query parameter '{name}'.", code="unknown_parameter", param=name
            )
    for name in allowed:
        if len(params.getlist(name)) > 1:
            raise ApiError(
                400, f"'{name}' is given more than once.", code="invalid_value", param=name
            )
    return dict(params)


def _time(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    return iso_ms(min(max(time_param(value, name).timestamp(), _FIRST), _LAST))


def _matching(value: str | None, pattern: re.Pattern[str], name: str, what: str) -> str | None:
    if value is not None and not pattern.fullmatch(value):
        raise ApiError(400, f"'{name}' must be {what}.", code="invalid_value", param=name)
    return value


def _day(value: str | None, name: str) -> str | None:
    """A calendar day, ``YYYY-MM-DD`` (one that exists: 2026-02-30 does not)."""
    if value is not None and not is_day(value):
        raise ApiError(
            400, f"'{name}' must be a day, YYYY-MM-DD.", code="invalid_value", param=name
        )
    return value


async def request_page(gateway: Gateway, workspace_id: str, request: Request) -> dict[str, Any]:
    """``GET .../requests``' answer."""
    query = _query(request, ("since", "until", "model", "key_id", "status", "limit", "cursor"))
    limit = limit_param(query.get("limit", "50"), _MAX_LIMIT)
    where = RequestFilter(
        since=_time(query.get("since"), "since"),
        until=_time(query.get("until"), "until"),
        model=_matching(query.get("model"), _MODEL, "model", "a model name"),
        key_id=_matching(query.get("key_id"), _ID, "key_id", "a key id"),
        status=_matching(query.get("status"), STATUS, "status", "a status code, 4xx, 5xx or error"),
    )
    cursor = _matching(query.get("cursor"), _CURSOR, "cursor", "a next_cursor of a page")
    page = await gateway.requests.page(workspace_id, where=where, cursor=cursor, limit=limit)
    return {
        "object": "list",
        "data": page.records,
        "has_more": page.has_more,
        "next_cursor": page.next_cursor,
    }


async def usage_report(gateway: Gateway, workspace_id: str, request: Request) -> dict[str, Any]:
    """``GET .../usage``' answer."""
    query = _query(request, ("since", "until"))
    today = datetime.fromtimestamp(gateway.clock(), UTC).date()
    until = _day(query.get("until"), "until") or today.isoformat()
    default_since = (today - timedelta(days=_DEFAULT_DAYS - 1)).isoformat()
    since = _day(query.get("since"), "since") or default_since
    rows = await gateway.requests.usage.read(workspace_id, since=since, until=until)
    totals = dict.fromkeys(METRICS, 0)
    for row in rows:
        for metric, value in row.totals.items():
            totals[metric] += value
    return {
        "object": "usage",
        "workspace_id": workspace_id,
        "since": since,
        "until": until,
        "data": [row.to_dict() for row in rows],
        "totals": totals,
    }


async def recent_events(gateway: Gateway, workspace_id: str, request: Request) -> dict[str, Any]:
    """``GET .../events``' answer."""
    query = _query(request, ("limit",))
    limit = limit_param(query.get("limit", "50"), MAX_EVENTS)
    events = await gateway.event_log.recent(workspace_id, limit=limit)
    return {"object": "list", "data": events}


#: What ``GET .../requests``, ``.../usage`` and ``.../events`` answer, by path.
READS: dict[str, Callable[[Gateway, str, Request], Awaitable[dict[str, Any]]]] = {
    "/requests": request_page,
    "/usage": usage_report,
    "/events": recent_events,
}


def request_routes(gateway: Gateway) -> list[Route]:
    def endpoint(
        answer: Callable[[Gateway, str, Request], Awaitable[dict[str, Any]]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def read(request: Request) -> Response:
            try:
                workspace_id = principal_of(request).workspace_id
                return json_response(await answer(gateway, workspace_id, request))
            except ApiError as exc:
                return exc.response()

        return read

    reads = requires(gateway, KeyScope.REQUESTS_READ)
    return [
        Route(
            f"/workspaces/{{workspace_id}}{path}",
            endpoint(answer),
            methods=["GET"],
            middleware=reads,
        )
        for path, answer in READS.items()
    ]
