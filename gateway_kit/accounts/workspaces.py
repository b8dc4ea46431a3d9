"""Workspaces: the accounts of the gateway. Each has an id (``ws_...``), a contact e-mail and a
plan; keys, quotas, budgets and webhooks hang off it.

Records live in storage (``<ws>:workspace``, JSON) with an index for listing and filtering
(``gk:workspaces``: per workspace its e-mail, plan and status). Reads on the request path go
through an in-process cache: records change rarely, and a storage round trip per request for
them would be waste. Every change (``update``: plan, e-mail, suspension; ``delete``) is
published to the change feed (``accounts.changes``), so every process drops its copy within
``auth.cache_ttl_s``.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from gateway_kit.accounts.changes import ChangeFeed, FeedCache
from gateway_kit.accounts.periods import iso_utc
from gateway_kit.config import GatewayConfig, PlanConfig
from gateway_kit.exceptions import InvalidRequestError, NotFoundError
from gateway_kit.storage import Storage
from gateway_kit.storage.lock import held

_INDEX = "gk:workspaces"
_ID_ALPHABET = string.ascii_lowercase + string.digits
WORKSPACE_ID = re.compile(r"ws_[a-z0-9]{1,64}")
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]+\.[^@\s]{2,}")
MAX_EMAIL = 254

Status = Literal["active", "suspended"]


@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    email: str
    plan: str
    created_at: float
    #: ``active``, or ``suspended`` by the operator (every key refused until resumed).
    status: Status = "active"

    @property
    def suspended(self) -> bool:
        return self.status == "suspended"

    def public(self) -> dict[str, Any]:
        return {
            "workspace_id": self.id,
            "email": self.email,
            "plan": self.plan,
            "status": self.status,
            "created_at": iso_at(self.created_at),
        }


@dataclass(frozen=True, slots=True)
class WorkspacePage:
    """One page of ``Workspaces.page``: the listed workspaces, and where the next page starts
    (``None`` on the last page)."""

    workspaces: list[Workspace]
    next_after: str | None


def new_workspace_id() -> str:
    return "ws_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


class Workspaces:
    """Create, read and list workspaces; ``plan_of`` is the cached request-path read."""

    def __init__(
        self, storage: Storage, config: GatewayConfig, *, changes: ChangeFeed | None = None
    ) -> None:
        self._storage = storage
        self._config = config
        self.changes = changes if changes is not None else ChangeFeed(storage, cache_ttl=0)
        self._cache: FeedCache[Workspace] = FeedCache(self.changes, "plan")

    async def create(
        self, email: str, *, plan: str | None = None, workspace_id: str | None = None
    ) -> Workspace:
        plan = plan or self._config.default_plan
        check_email(email)
        self.check_plan(plan)
        workspace_id = workspace_id or new_workspace_id()
        if not WORKSPACE_ID.fullmatch(workspace_id):
            raise InvalidRequestError(f"not a workspace id: {workspace_id!r}", param="workspace_id")
        workspace = Workspace(workspace_id, email, plan, await self._storage.now())
        created = await self._storage.set(
            f"{workspace_id}:workspace", json.dumps(asdict(workspace)).encode(), if_absent=True
        )
        if not created:
            raise InvalidRequestError(
                f"workspace {workspace_id} already exists", param="workspace_id"
            )
        await self._index(workspace)
        return workspace

    async def get(self, workspace_id: str) -> Workspace | None:
        if not WORKSPACE_ID.fullmatch(workspace_id):
            return None
        version = self._cache.version
        raw = await self._storage.get(f"{workspace_id}:workspace")
        if raw is None:
            return None
        workspace = _load(raw)
        self._cache.put(workspace_id, workspace, version=version)
        return workspace

    async def cached(self, workspace_id: str) -> Workspace | None:
        """``get`` through the in-process cache (the request path)."""
        if (hit := self._cache.get(workspace_id)) is not None:
            return hit
        return await self.get(workspace_id)

    async def list(self) -> list[str]:
        return sorted(await self._storage.map_items(_INDEX))

    async def page(
        self,
        *,
        limit: int = 50,
        after: str | None = None,
        plan: str | None = None,
        status: Status | None = None,
    ) -> WorkspacePage:
        """Workspaces by id, ``limit`` at a time from the one after ``after``, optionally only
        those on ``plan`` or in ``status``: one read of the index per page."""
        index = await self._storage.map_items(_INDEX)
        found: list[Workspace] = []
        for workspace_id in sorted(index):
            if after is not None and workspace_id <= after:
                continue
            workspace = _from_index(workspace_id, index[workspace_id])
            if workspace is None:  # indexed before plans were: read it, and index it anew
                workspace = await self.get(workspace_id)
                if workspace is None:
                    continue
                await self._index(workspace)
            if (plan is None or workspace.plan == plan) and (
                status is None or workspace.status == status
            ):
                if len(found) == limit:
                    return WorkspacePage(found, found[-1].id)
                found.append(workspace)
        return WorkspacePage(found, None)

    async def update(
        self,
        workspace_id: str,
        *,
        plan: str | None = None,
        email: str | None = None,
        status: Status | None = None,
    ) -> Workspace:
        """Change a workspace's plan, e-mail or status; every process sees it within
        ``auth.cache_ttl_s`` (this one at once). Changes at once go one at a time: each
        keeps the others' fields."""
        if not WORKSPACE_ID.fullmatch(workspace_id):
            raise NotFoundError(f"no workspace {workspace_id}")
        async with held(self._storage, f"{workspace_id}:lock:workspace"):
            workspace = await self.get(workspace_id)
            if workspace is None:
                raise NotFoundError(f"no workspace {workspace_id}")
            if plan is not None:
                self.check_plan(plan)
            if email is not None:
                check_email(email)
            updated = replace(
                workspace,
                plan=plan or workspace.plan,
                email=email or workspace.email,
                status=status or workspace.status,
            )
            await self._storage.set(
                f"{workspace_id}:workspace", json.dumps(asdict(updated)).encode()
            )
            await self._index(updated)
        await self.changes.publish(("plan", workspace_id))
        return updated

    async def set_plan(self, workspace_id: str, plan: str) -> Workspace:
        return await self.update(workspace_id, plan=plan)

    async def forget(self, workspace_id: str) -> None:
        """Drop the workspace's record and index entry (``accounts.removal`` deletes the rest
        of its state first); every process stops serving it within ``auth.cache_ttl_s``."""
        await self._storage.map_delete(_INDEX, workspace_id)
        await self._storage.delete(f"{workspace_id}:workspace")
        await self.changes.publish(("plan", workspace_id))

    def check_plan(self, plan: str) -> None:
        if plan not in self._config.plans:
            raise InvalidRequestError(
                f"no plan named {plan!r} (known: {', '.join(sorted(self._config.plans))})",
                param="plan",
            )

    async def _index(self, workspace: Workspace) -> None:
        entry = {"email": workspace.email, "plan": workspace.plan, "status": workspace.status}
        await self._storage.map_set(_INDEX, workspace.id, json.dumps(entry).encode())

    def plan(self, workspace: Workspace) -> PlanConfig:
        """The workspace's plan (the default plan if its plan left the configuration)."""
        return (
            self._config.plans.get(workspace.plan) or self._config.plans[self._config.default_plan]
        )


def check_email(email: str) -> None:
    if len(email) > MAX_EMAIL or not email.isprintable() or not _EMAIL.fullmatch(email):
        raise InvalidRequestError(f"not an e-mail address: {email!r}", param="email")


def iso_at(moment: float) -> str:
    return iso_utc(datetime.fromtimestamp(moment, UTC))


def _load(raw: bytes) -> Workspace:
    return Workspace(**json.loads(raw))


def _from_index(workspace_id: str, raw: bytes) -> Workspace | None:
    """A workspace as its index entry has it (``created_at`` is not indexed: 0); ``None`` for
    an entry of an older version (the e-mail alone)."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    return Workspace(
        workspace_id, entry["email"], entry["plan"], 0.0, entry.get("status", "active")
    )
