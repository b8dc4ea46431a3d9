"""Workspaces: pages of the index, filters, changes, and an index written by an older version."""

from __future__ import annotations

import pytest

from gateway_kit import GatewayConfig, MemoryStorage
from gateway_kit.accounts.workspaces import Workspaces
from gateway_kit.exceptions import InvalidRequestError, NotFoundError

pytestmark = pytest.mark.anyio

CONFIG = GatewayConfig.model_validate({"storage": {"url": "memory://"}})


async def test_pages_follow_the_ids_and_filters_apply_before_the_limit() -> None:
    async with MemoryStorage() as storage:
        workspaces = Workspaces(storage, CONFIG)
        ids = [f"ws_{i:02}" for i in range(7)]
        for i, workspace_id in enumerate(ids):
            plan = "scale" if i % 2 else "starter"
            await workspaces.create(f"t{i}@example.com", plan=plan, workspace_id=workspace_id)
        first = await workspaces.page(limit=3)
        assert [w.id for w in first.workspaces] == ids[:3]
        assert first.next_after == "ws_02"
        rest = await workspaces.page(limit=10, after=first.next_after)
        assert [w.id for w in rest.workspaces] == ids[3:]
        assert rest.next_after is None
        scale = await workspaces.page(limit=2, plan="scale")
        assert [w.id for w in scale.workspaces] == ["ws_01", "ws_03"]
        assert (await workspaces.page(limit=2, plan="scale", after="ws_03")).next_after is None
        # A page exactly full at the end has no next page.
        assert (await workspaces.page(limit=7)).next_after is None


async def test_changes_are_checked_and_indexed() -> None:
    async with MemoryStorage() as storage:
        workspaces = Workspaces(storage, CONFIG)
        made = await workspaces.create("a@example.com")
        with pytest.raises(InvalidRequestError, match="no plan named 'gold'"):
            await workspaces.update(made.id, plan="gold")
        with pytest.raises(InvalidRequestError, match="not an e-mail"):
            await workspaces.update(made.id, email="a\x07@example.com")
        with pytest.raises(NotFoundError):
            await workspaces.update("ws_nosuch", status="suspended")
        await workspaces.update(made.id, status="suspended", plan="scale")
        [listed] = (await workspaces.page(status="suspended")).workspaces
        assert (listed.id, listed.plan, listed.email) == (made.id, "scale", "a@example.com")
        await workspaces.forget(made.id)
        assert await workspaces.get(made.id) is None
        assert (await workspaces.page()).workspaces == []


async def test_an_index_entry_of_an_older_version_is_read_and_rewritten() -> None:
    async with MemoryStorage() as storage:
        workspaces = Workspaces(storage, CONFIG)
        made = await workspaces.create("old@example.com", plan="scale")
        await storage.map_set("gk:workspaces", made.id, b"old@example.com")  # as 0.0 wrote it
        [listed] = (await workspaces.page(plan="scale")).workspaces
        assert (listed.id, listed.plan) == (made.id, "scale")
        assert (await storage.map_get("gk:workspaces", made.id) or b"").startswith(b"{")
