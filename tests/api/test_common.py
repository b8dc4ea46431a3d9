"""What every management route shares (``api._common``): bodies read by ``parse_json``, names
without control characters. Each case here was once a 500, or a value stored that broke a
reader later (the CLI, the webhook worker)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.api.test_webhooks_api import PUBLIC, SECRET, guard
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio

TOKEN = "operator-" + "t" * 32
JSON = {"content-type": "application/json"}


async def send(env: Env, method: str, path: str, body: bytes) -> Any:
    """``body`` to ``path`` with the credentials of its API: the operator's or the key's."""
    auth = {"authorization": f"Bearer {TOKEN}"} if path.startswith("/api/v1/admin") else env.auth()
    return await env.recorder.request(method, path, body=body, headers={**auth, **JSON})


def routes(env: Env, key_id: str, hook_id: str) -> list[tuple[str, str]]:
    ws = f"/api/v1/workspaces/{env.workspace_id}"
    admin = f"/api/v1/admin/workspaces/{env.workspace_id}"
    return [
        ("POST", f"{ws}/keys"),
        ("POST", f"{ws}/keys/{key_id}/rotate"),
        ("POST", f"{ws}/webhooks"),
        ("PATCH", f"{ws}/webhooks/{hook_id}"),
        ("POST", f"{ws}/webhooks/{hook_id}/test"),
        ("POST", f"{ws}/webhooks/{hook_id}/replay"),
        ("PATCH", f"{ws}/budget"),
        ("POST", "/api/v1/admin/workspaces"),
        ("PATCH", admin),
        ("PATCH", f"{admin}/budget"),
        ("POST", f"{admin}/keys"),
        ("PATCH", f"{admin}/wallet"),
        ("POST", f"{admin}/wallet/topups"),
    ]


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.WARNING)
    yield
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.usefixtures("no_errors_logged")
@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 5000 + b"]" * 5000, "levels deep"),  # once a RecursionError: 500
        (b'{"a":' * 5000 + b"1" + b"}" * 5000, "levels deep"),
        (b'{"name": NaN}', "NaN"),
        (b'{"cap_usd": Infinity}', "Infinity"),
        (b'{"amount_usd": 1e400}', "range of a double"),
        (b'{"name": "\xff"}', "not UTF-8"),
    ],
    ids=["deep-arrays", "deep-objects", "nan", "infinity", "1e400", "latin-1"],
)
async def test_unreadable_bodies_are_a_400_invalid_json_on_every_route(
    body: bytes, says: str
) -> None:
    async with provisioned(ssrf_guard=guard(), admin={"token": TOKEN}) as env:
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        hook = await env.gateway.webhooks.create(
            env.workspace_id, name="hook", url=PUBLIC, secret=SECRET, events=None
        )
        for method, path in routes(env, key_id, hook.id):
            answer = await send(env, method, path, body)
            assert answer.status == 400, (path, answer.body)
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_json")
            assert says in error["message"], path


@pytest.mark.usefixtures("no_errors_logged")
@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        # Each of these answered 500, or was stored and broke a reader afterwards.
        ("webhooks", {"name": "a", "url": PUBLIC + "/\\ud800", "secret": SECRET}, "url"),
        ("webhooks", {"name": "x\\ud800", "url": PUBLIC, "secret": SECRET}, "name"),
        ("webhooks", {"name": "a", "url": PUBLIC, "secret": SECRET + "\\udc00"}, "secret"),
        ("webhooks", {"name": "a", "url": PUBLIC, "secret": SECRET, "events": ["\\ud800"]}, None),
        ("keys", {"name": "ci \\uDBFF"}, "name"),
        ("topups", {"amount_usd": 5, "idempotency_key": "\\ud800"}, "idempotency_key"),
        ("topups", {"amount_usd": 5, "reference": "inv \\udfff"}, "reference"),
        ("budget", {"key_caps": {"kid_\\ud800": 1}}, "key_caps"),
    ],
)
async def test_lone_surrogates_are_refused_where_json_enters_and_nothing_is_stored(
    route: str, body: dict[str, Any], param: str | None
) -> None:
    async with provisioned(ssrf_guard=guard(), admin={"token": TOKEN}) as env:
        paths = {
            "webhooks": f"/api/v1/workspaces/{env.workspace_id}/webhooks",
            "keys": f"/api/v1/workspaces/{env.workspace_id}/keys",
            "topups": f"/api/v1/admin/workspaces/{env.workspace_id}/wallet/topups",
            "budget": f"/api/v1/workspaces/{env.workspace_id}/budget",
        }
        # Written by hand: json.dumps would escape the backslash of each \\u.
        raw = _dumps(body).encode()
        answer = await send(env, "PATCH" if route == "budget" else "POST", paths[route], raw)
        assert answer.status == 400, answer.body
        error = answer.json()["error"]
        assert error["code"] == "invalid_json"
        assert "lone surrogate" in error["message"]
        if param is not None:
            assert error["param"] == param
        assert await env.gateway.webhooks.for_workspace(env.workspace_id) == []
        assert len(await env.gateway.keys.list(env.workspace_id)) == 1
        assert (await env.gateway.wallet.status(env.workspace_id)).balance_micro_usd == 0


def _dumps(value: Any) -> str:
    """JSON of ``value`` whose strings hold ``\\uXXXX`` escapes as written."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dumps(k)}: {_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dumps(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


@pytest.mark.parametrize(
    "name",
    [
        "evil\x1b[2J\x1b[H",  # ESC: clears the terminal of whoever lists the keys
        "bell\x07",
        "nul\x00",
        "two\nlines",
        "tab\there",
        "del\x7f",
        "csi\x9b31m",  # C1: CSI in one character
        "\x85next line",
    ],
)
async def test_names_with_control_characters_are_refused(name: str) -> None:
    async with provisioned(ssrf_guard=guard(), admin={"token": TOKEN}) as env:
        made = [
            await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/keys",
                json={"name": name},
                headers=env.auth(),
            ),
            await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/webhooks",
                json={"name": name, "url": PUBLIC, "secret": SECRET},
                headers=env.auth(),
            ),
            await env.recorder.request(
                "POST",
                f"/api/v1/admin/workspaces/{env.workspace_id}/keys",
                json={"name": name},
                headers={"authorization": f"Bearer {TOKEN}"},
            ),
        ]
        for answer in made:
            assert answer.status == 400, answer.body
            error = answer.json()["error"]
            assert (error["code"], error["param"]) == ("invalid_value", "name")
            assert "control characters" in error["message"]
        assert len(await env.gateway.keys.list(env.workspace_id)) == 1
        assert await env.gateway.webhooks.for_workspace(env.workspace_id) == []


async def test_names_in_any_script_are_still_welcome() -> None:
    async with provisioned(ssrf_guard=guard()) as env:
        for name in ("équipe données", "数据团队", "команда 🚀", "  padded  "):
            answer = await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/keys",
                json={"name": name},
                headers=env.auth(),
            )
            assert answer.status == 201
            assert answer.json()["name"] == name.strip()


async def test_infinity_never_becomes_a_cap() -> None:
    async with provisioned(admin={"token": TOKEN}) as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/budget"
        before = (await env.recorder.request("GET", path, headers=env.auth())).json()
        for literal in (b"Infinity", b"-Infinity", b"NaN", b"1e400"):
            answer = await send(env, "PATCH", path, b'{"cap_usd": ' + literal + b"}")
            assert answer.status == 400
        assert (await env.recorder.request("GET", path, headers=env.auth())).json() == before
