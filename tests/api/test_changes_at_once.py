"""Changes of one record at once: each reads the record, changes it and writes it back, so
without one at a time each would write over the others' (found by firing them at a running
gateway: 1 of 6 key caps kept, 40 webhooks past a cap of 20). On SQLite, whose operations
run in a thread, so that the changes really interleave."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway_kit import SQLiteStorage
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.webhooks.ssrf import SSRFGuard, static_resolver
from tests.fakes import Env, provisioned

pytestmark = pytest.mark.anyio

AT_ONCE = 8


@asynccontextmanager
async def on_sqlite(tmp_path: Path, **config: Any) -> AsyncIterator[Env]:
    storage = partial(SQLiteStorage, tmp_path / "state.db")
    async with provisioned("scale", storage_class=storage, **config) as env:
        yield env


async def at_once(env: Env, method: str, path: str, bodies: list[dict[str, Any]]) -> list[Any]:
    answers: list[Any] = [None] * len(bodies)

    async def one(index: int) -> None:
        answers[index] = await env.recorder.request(
            method, path, json=bodies[index], headers=env.auth()
        )

    async with anyio.create_task_group() as group:
        for index in range(len(bodies)):
            group.start_soon(one, index)
    return answers


async def test_pii_patterns_patched_at_once_are_all_kept(tmp_path: Path) -> None:
    async with on_sqlite(tmp_path) as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/pii"
        bodies = [{"patterns": {f"ID_{n}": f"ID{n}-\\d+"}} for n in range(AT_ONCE)]
        assert {a.status for a in await at_once(env, "PATCH", path, bodies)} == {200}
        kept = (await env.recorder.request("GET", path, headers=env.auth())).json()
        assert set(kept["patterns"]) == {f"ID_{n}" for n in range(AT_ONCE)}


async def test_key_caps_and_guardian_rules_patched_at_once_are_all_kept(tmp_path: Path) -> None:
    async with on_sqlite(tmp_path) as env:
        made = [
            await env.gateway.keys.create(env.workspace_id, name=f"k{n}", scopes=ROLES["inference"])
            for n in range(AT_ONCE)
        ]
        ids = [m.key.key_id for m in made]
        budget = f"/api/v1/workspaces/{env.workspace_id}/budget"
        bodies = [{"key_caps": {key_id: 5}} for key_id in ids]
        assert {a.status for a in await at_once(env, "PATCH", budget, bodies)} == {200}
        caps = (await env.recorder.request("GET", budget, headers=env.auth())).json()
        assert set(caps["key_caps"]) == set(ids)
        guardian = f"/api/v1/workspaces/{env.workspace_id}/guardian"
        rule = {"repeat": {"block_at": 30, "window_s": 60}}
        bodies = [{"key_rules": {key_id: rule}} for key_id in ids]
        assert {a.status for a in await at_once(env, "PATCH", guardian, bodies)} == {200}
        rules = (await env.recorder.request("GET", guardian, headers=env.auth())).json()
        assert set(rules["key_rules"]) == set(ids)


async def test_webhooks_created_at_once_stay_within_the_cap(tmp_path: Path) -> None:
    guard = SSRFGuard(resolver=static_resolver({"hooks.example.com": ["93.184.215.14"]}))
    config = {"ssrf_guard": guard, "webhooks": {"max_webhooks_per_workspace": 3}}
    async with on_sqlite(tmp_path, **config) as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/webhooks"
        body = {"name": "b", "url": "https://hooks.example.com/gk", "secret": "whsec_" + "s" * 40}
        answers = await at_once(env, "POST", path, [body] * AT_ONCE)
        assert sorted(a.status for a in answers) == [201] * 3 + [409] * (AT_ONCE - 3)
        assert len(await env.gateway.webhooks.for_workspace(env.workspace_id)) == 3


async def test_a_workspace_changed_at_once_keeps_each_change(tmp_path: Path) -> None:
    async with on_sqlite(tmp_path) as env:
        workspaces = env.gateway.workspaces
        async with anyio.create_task_group() as group:
            group.start_soon(partial(workspaces.update, env.workspace_id, plan="tiny"))
            group.start_soon(partial(workspaces.update, env.workspace_id, email="new@example.com"))
        changed = await workspaces.get(env.workspace_id)
        assert changed is not None
        assert (changed.plan, changed.email) == ("tiny", "new@example.com")
