"""Workspaces: the accounts of the gateway. Each has an id (``ws_...``), a contact e-mail and a
plan; keys, quotas, budgets and webhooks hang off it.

Records live in storage (``<ws>:workspace``, JSON) with an index for listing
(``gk:workspaces``). Reads on the request path go through an in-process cache: plans change
rarely, and a storage round trip per request for them would be waste. ``set_plan`` publishes
the change to the change feed (``accounts.changes``), so every process drops its copy within
``auth.cache_ttl_s``.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import asdict, dataclass

from gateway_kit.accounts.changes import ChangeFeed, FeedCache
from gateway_kit.config import GatewayConfig, PlanConfig
from gateway_kit.exceptions import InvalidRequestError, NotFoundError
from gateway_kit.storage import Storage

_INDEX = "gk:workspaces"
_ID_ALPHABET = string.ascii_lowercase + string.digits
WORKSPACE_ID = re.compile(r"ws_[a-z0-9]{1,64}")
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]+\.[^@\s]{2,}")


@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    email: str
    plan: str
    created_at: float


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
        if not _EMAIL.fullmatch(email):
            raise InvalidRequestError(f"not an e-mail address: {email!r}")
        if plan not in self._config.plans:
            raise InvalidRequestError(
                f"no plan named {plan!r} (known: {', '.join(sorted(self._config.plans))})"
            )
        workspace_id = workspace_id or new_workspace_id()
        if not WORKSPACE_ID.fullmatch(workspace_id):
            raise InvalidRequestError(f"not a workspace id: {workspace_id!r}")
        workspace = Workspace(workspace_id, email, plan, await self._storage.now())
        created = await self._storage.set(
            f"{workspace_id}:workspace", json.dumps(asdict(workspace)).encode(), if_absent=True
        )
        if not created:
            raise InvalidRequestError(f"workspace {workspace_id} already exists")
        await self._storage.map_set(_INDEX, workspace_id, email.encode())
        return workspace

    async def get(self, workspace_id: str) -> Workspace | None:
        if not WORKSPACE_ID.fullmatch(workspace_id):
            return None
        version = self._cache.version
        raw = await self._storage.get(f"{workspace_id}:workspace")
        if raw is None:
            return None
        workspace = Workspace(**json.loads(raw))
        self._cache.put(workspace_id, workspace, version=version)
        return workspace

    async def cached(self, workspace_id: str) -> Workspace | None:
        """``get`` through the in-process cache (the request path)."""
        if (hit := self._cache.get(workspace_id)) is not None:
            return hit
        return await self.get(workspace_id)

    async def list(self) -> list[str]:
        return sorted(await self._storage.map_items(_INDEX))

    async def set_plan(self, workspace_id: str, plan: str) -> Workspace:
        workspace = await self.get(workspace_id)
        if workspace is None:
            raise NotFoundError(f"no workspace {workspace_id}")
        if plan not in self._config.plans:
            raise InvalidRequestError(f"no plan named {plan!r}")
        updated = Workspace(workspace.id, workspace.email, plan, workspace.created_at)
        await self._storage.set(f"{workspace_id}:workspace", json.dumps(asdict(updated)).encode())
        await self.changes.publish(("plan", workspace_id))
        return updated

    def plan(self, workspace: Workspace) -> PlanConfig:
        """The workspace's plan (the default plan if its plan left the configuration)."""
        return (
            self._config.plans.get(workspace.plan) or self._config.plans[self._config.default_plan]
        )
