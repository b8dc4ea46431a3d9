"""What a workspace set for Guardian: its keys' own thresholds and allow-lists.

One record per workspace (``<ws>:guardian:settings``, JSON), read on the request path through
an in-process cache kept current by the change feed (topic ``guardian``), like the budget's
settings: a change made through any instance applies everywhere within ``auth.cache_ttl_s``.

- ``key_rules``: per key, rule name to the fields it changes (``{"kid_1": {"repeat":
  {"block_at": 50}}}``), applied over the plan's and the configuration's;
- ``allow``: per key, the rules it is exempt from (``["repeat"]``, or ``["*"]`` for all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway_kit.accounts.changes import ChangeFeed, FeedCache
from gateway_kit.storage import Storage

__all__ = ["GuardianSettings", "GuardianSettingsStore"]


@dataclass(frozen=True, slots=True)
class GuardianSettings:
    key_rules: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    allow: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def exempt(self, key_id: str, rule: str) -> bool:
        allowed = self.allow.get(key_id, ())
        return "*" in allowed or rule in allowed

    def to_bytes(self) -> bytes:
        data = {"key_rules": self.key_rules, "allow": {k: list(v) for k, v in self.allow.items()}}
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> GuardianSettings:
        data = json.loads(raw)
        allow = {k: tuple(v) for k, v in (data.get("allow") or {}).items()}
        return cls(dict(data.get("key_rules") or {}), allow)


class GuardianSettingsStore:
    """Read (cached) and save a workspace's Guardian settings."""

    def __init__(self, storage: Storage, *, changes: ChangeFeed | None = None) -> None:
        self._storage = storage
        self.changes = changes if changes is not None else ChangeFeed(storage, cache_ttl=0)
        self._cache: FeedCache[GuardianSettings] = FeedCache(self.changes, "guardian")

    @staticmethod
    def _key(workspace_id: str) -> str:
        return f"{workspace_id}:guardian:settings"

    async def get(self, workspace_id: str) -> GuardianSettings:
        if (hit := self._cache.get(workspace_id)) is not None:
            return hit
        version = self._cache.version
        raw = await self._storage.get(self._key(workspace_id))
        settings = GuardianSettings.from_bytes(raw) if raw else GuardianSettings()
        self._cache.put(workspace_id, settings, version=version)
        return settings

    async def save(self, workspace_id: str, settings: GuardianSettings) -> None:
        await self._storage.set(self._key(workspace_id), settings.to_bytes())
        await self.changes.publish(("guardian", workspace_id))
