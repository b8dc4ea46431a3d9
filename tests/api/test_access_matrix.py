"""Who may call what: every route and every kind of caller gives exactly the documented status,
and a refused call changes nothing in the storage.

The callers: an inference key and an admin key of the workspace, an admin key of another
workspace, a revoked admin key, the operator's token, and no credentials at all. ``ROUTES``
is the documented table (README, "Who may call what"); a test checks that it names every
route the app has, so a new route cannot be added without deciding who may call it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.routing import BaseRoute, Mount, Route

from gateway_kit import create_app
from gateway_kit.accounts.scopes import ROLES
from tests.api.test_webhooks_api import PUBLIC, SECRET, guard
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio

TOKEN = "operator-" + "t" * 32
CALLERS = ("inference", "admin", "other", "revoked", "operator", "none")

INFERENCE, OPERATOR = "inference", "operator"


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    #: ``inference``, a scope of the management API, or ``operator``.
    needs: str
    #: The status of an allowed call (with the body below).
    ok: int
    body: Any = None


ROUTES = [
    Case("POST", "/v1/chat/completions", INFERENCE, 200, "chat"),
    Case("POST", "/v1/embeddings", INFERENCE, 200, {"model": "embed-fake", "input": "hi"}),
    Case("GET", "/v1/models", INFERENCE, 200),
    Case("GET", "/v1/models/gpt-fake", INFERENCE, 200),
    Case("GET", "/v1/me", INFERENCE, 200),
    Case("GET", "/api/v1/workspaces/{ws}/keys", "keys:read", 200),
    Case("POST", "/api/v1/workspaces/{ws}/keys", "keys:write", 201, {"name": "new"}),
    Case("GET", "/api/v1/workspaces/{ws}/keys/{key}", "keys:read", 200),
    Case("POST", "/api/v1/workspaces/{ws}/keys/{key}/rotate", "keys:write", 200, {}),
    Case("DELETE", "/api/v1/workspaces/{ws}/keys/{key}", "keys:write", 200),
    Case("GET", "/api/v1/workspaces/{ws}/webhooks", "webhooks:read", 200),
    Case(
        "POST",
        "/api/v1/workspaces/{ws}/webhooks",
        "webhooks:write",
        201,
        {"name": "n", "url": PUBLIC, "secret": SECRET},
    ),
    Case("GET", "/api/v1/workspaces/{ws}/webhooks/{hook}", "webhooks:read", 200),
    Case("PATCH", "/api/v1/workspaces/{ws}/webhooks/{hook}", "webhooks:write", 200, {"name": "m"}),
    Case("DELETE", "/api/v1/workspaces/{ws}/webhooks/{hook}", "webhooks:write", 200),
    Case("POST", "/api/v1/workspaces/{ws}/webhooks/{hook}/test", "webhooks:write", 200, {}),
    Case("GET", "/api/v1/workspaces/{ws}/webhooks/{hook}/deliveries", "webhooks:read", 200),
    Case(
        "POST",
        "/api/v1/workspaces/{ws}/webhooks/{hook}/replay",
        "webhooks:write",
        200,
        {"since": "2026-01-01T00:00:00Z"},
    ),
    Case("GET", "/api/v1/workspaces/{ws}/budget", "budget:read", 200),
    Case("PATCH", "/api/v1/workspaces/{ws}/budget", "budget:write", 200, {"cap_usd": 5}),
    Case("GET", "/api/v1/workspaces/{ws}/guardian", "guardian:read", 200),
    Case(
        "PATCH",
        "/api/v1/workspaces/{ws}/guardian",
        "guardian:write",
        200,
        {"allow": {"{key}": ["repeat"]}},
    ),
    Case("GET", "/api/v1/workspaces/{ws}/pii", "pii:read", 200),
    Case("PATCH", "/api/v1/workspaces/{ws}/pii", "pii:write", 200, {"allow": ["S3"]}),
    Case("GET", "/api/v1/workspaces/{ws}/cache", "cache:read", 200),
    Case("PATCH", "/api/v1/workspaces/{ws}/cache", "cache:write", 200, {"semantic": False}),
    Case("DELETE", "/api/v1/workspaces/{ws}/cache", "cache:write", 200),
    Case("GET", "/api/v1/workspaces/{ws}/requests", "requests:read", 200),
    Case("GET", "/api/v1/workspaces/{ws}/usage", "requests:read", 200),
    Case("GET", "/api/v1/workspaces/{ws}/events", "requests:read", 200),
    Case("GET", "/api/v1/admin/workspaces", OPERATOR, 200),
    Case("POST", "/api/v1/admin/workspaces", OPERATOR, 201, {"email": "new@example.com"}),
    Case("GET", "/api/v1/admin/workspaces/{ws}", OPERATOR, 200),
    Case("PATCH", "/api/v1/admin/workspaces/{ws}", OPERATOR, 200, {"plan": "scale"}),
    Case("DELETE", "/api/v1/admin/workspaces/{ws}", OPERATOR, 200),
    Case("GET", "/api/v1/admin/workspaces/{ws}/budget", OPERATOR, 200),
    Case("PATCH", "/api/v1/admin/workspaces/{ws}/budget", OPERATOR, 200, {"cap_usd": 1}),
    Case("POST", "/api/v1/admin/workspaces/{ws}/keys", OPERATOR, 201, {"role": "admin"}),
    Case("GET", "/api/v1/admin/workspaces/{ws}/guardian", OPERATOR, 200),
    Case(
        "PATCH",
        "/api/v1/admin/workspaces/{ws}/guardian",
        OPERATOR,
        200,
        {"key_rules": {"{key}": {"repeat": {"block_at": 40}}}},
    ),
    Case("GET", "/api/v1/admin/workspaces/{ws}/pii", OPERATOR, 200),
    Case(
        "PATCH",
        "/api/v1/admin/workspaces/{ws}/pii",
        OPERATOR,
        200,
        {"patterns": {"ACME_ID": "ACME-\\d+"}},
    ),
    Case("GET", "/api/v1/admin/workspaces/{ws}/cache", OPERATOR, 200),
    Case("PATCH", "/api/v1/admin/workspaces/{ws}/cache", OPERATOR, 200, {"semantic": False}),
    Case("DELETE", "/api/v1/admin/workspaces/{ws}/cache", OPERATOR, 200),
    Case("DELETE", "/api/v1/admin/cache", OPERATOR, 200),
    Case("GET", "/api/v1/admin/workspaces/{ws}/requests", OPERATOR, 200),
    Case("GET", "/api/v1/admin/workspaces/{ws}/usage", OPERATOR, 200),
    Case("GET", "/api/v1/admin/workspaces/{ws}/events", OPERATOR, 200),
    Case("GET", "/api/v1/admin/workspaces/{ws}/wallet", OPERATOR, 200),
    Case("PATCH", "/api/v1/admin/workspaces/{ws}/wallet", OPERATOR, 200, {"billing": True}),
    Case("POST", "/api/v1/admin/workspaces/{ws}/wallet/topups", OPERATOR, 201, {"amount_usd": 5}),
    Case("GET", "/api/v1/admin/routes", OPERATOR, 200),
]
#: Routes with their own authentication, outside this matrix (tested where they live).
ELSEWHERE = {
    ("POST", "/v1/payments/stripe"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/dashboard"),
}


def expected(case: Case, caller: str) -> tuple[int, str | None]:
    """The documented status (and error code) for ``caller`` on ``case``."""
    if case.needs == OPERATOR:
        return (case.ok, None) if caller == "operator" else (401, "invalid_admin_token")
    if caller in ("none",):
        return 401, "missing_api_key"
    if caller in ("revoked", "operator"):
        return 401, "invalid_api_key"
    if case.needs == INFERENCE:
        return case.ok, None  # every key may call models, and "other" calls for itself
    if caller == "other":
        return 403, "workspace_forbidden"
    if caller == "inference":
        return 403, "missing_scope"
    return case.ok, None


@dataclass
class World:
    env: Env
    secrets: dict[str, str | None]
    ids: dict[str, str]


@asynccontextmanager
async def world() -> AsyncIterator[World]:
    async with provisioned(
        ssrf_guard=guard(),
        admin={"token": TOKEN},
        webhooks={"timeout_s": 0.2},
        models=[
            {"name": "gpt-fake", "provider": "up"},
            {"name": "embed-fake", "provider": "up", "kind": "embedding"},
        ],
    ) as env:
        gateway = env.gateway
        ws = env.workspace_id
        inference = await gateway.keys.create(ws, name="app")
        revoked = await gateway.keys.create(ws, name="gone", scopes=ROLES["admin"])
        await gateway.keys.revoke(ws, revoked.key.key_id)
        other_ws = await gateway.workspaces.create("other@example.com", plan="scale")
        other = await gateway.keys.create(other_ws.id, scopes=ROLES["admin"])
        target = await gateway.keys.create(ws, name="target")
        hook = await env.recorder.request(
            "POST",
            f"/api/v1/workspaces/{ws}/webhooks",
            json={"name": "h", "url": PUBLIC, "secret": SECRET},
            headers=env.auth(),
        )
        assert hook.status == 201
        yield World(
            env,
            {
                "inference": inference.secret,
                "admin": env.key,
                "other": other.secret,
                "revoked": revoked.secret,
                "operator": TOKEN,
                "none": None,
            },
            {"ws": ws, "key": target.key.key_id, "hook": hook.json()["id"]},
        )


def state_of(env: Env) -> Any:
    """Everything the memory storage holds (the change feed's poll bookkeeping aside)."""
    tx = env.storage._tx
    entries = {k: v for k, v in tx._entries.items() if not k.startswith("gk:changes")}
    return copy.deepcopy((entries, tx._maps, {k: list(v) for k, v in tx._logs.items()}))


async def call(w: World, case: Case, caller: str) -> Any:
    secret = w.secrets[caller]
    headers = {} if secret is None else {"authorization": f"Bearer {secret}"}
    path = case.path.format(**w.ids)
    body = case.body
    if body == "chat":
        body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    elif isinstance(body, dict):  # ids in the body: "{key}"
        body = json.loads(json.dumps(body).replace("{key}", w.ids["key"]))
    return await w.env.recorder.request(case.method, path, json=body, headers=headers)


@pytest.mark.parametrize("case", ROUTES, ids=lambda c: f"{c.method} {c.path}")
async def test_every_caller_gets_the_documented_answer_and_refusals_change_nothing(
    case: Case,
) -> None:
    async with world() as w:
        # Refusals first, each checked against the storage; then the callers allowed.
        callers = sorted(CALLERS, key=lambda c: expected(case, c)[0] == case.ok)
        for caller in callers:
            status, code = expected(case, caller)
            before = state_of(w.env) if code is not None else None
            answer = await call(w, case, caller)
            assert (caller, answer.status) == (caller, status), answer.body
            if code is not None:
                error = answer.json()["error"]
                assert (caller, error["code"]) == (caller, code)
                assert error["type"] in ("authentication_error", "permission_error")
                if code == "missing_scope":
                    assert f"'{case.needs}'" in error["message"]
                assert state_of(w.env) == before, f"{caller} changed the storage"
            if status == case.ok and case.method == "DELETE":
                break  # the thing is gone: the next allowed caller would get a 404


def test_the_matrix_names_every_route_the_app_has() -> None:
    def walk(routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for route in routes:
            if isinstance(route, Mount):
                found |= walk(route.routes, prefix + route.path)
            elif isinstance(route, Route):
                found |= {(m, prefix + route.path) for m in route.methods or () if m != "HEAD"}
        return found

    def template(path: str) -> str:
        for name, value in (
            ("ws", "{workspace_id}"),
            ("key", "{key_id}"),
            ("hook", "{webhook_id}"),
        ):
            path = path.replace("{" + name + "}", value)
        return path.replace("/v1/models/gpt-fake", "/v1/models/{model:path}")

    app = create_app()
    documented = {(c.method, template(c.path)) for c in ROUTES} | ELSEWHERE
    assert walk(app.routes) == documented
