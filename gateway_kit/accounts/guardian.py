"""What a workspace set for Guardian: its keys' own thresholds and allow-lists.

One record per workspace (``<ws>:guardian:settings``, JSON), read through a ``SettingsStore``
(topic ``guardian``).

- ``key_rules``: per key, rule name to the fields it changes (``{"kid_1": {"repeat":
  {"block_at": 50}}}``), applied over the plan's and the configuration's;
- ``allow``: per key, the rules it is exempt from (``["repeat"]``, or ``["*"]`` for all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.accounts.settings import SettingsStore
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


class GuardianSettingsStore(SettingsStore[GuardianSettings]):
    """Read (cached) and save a workspace's Guardian settings."""

    def __init__(self, storage: Storage, *, changes: ChangeFeed | None = None) -> None:
        super().__init__(
            storage,
            "guardian",
            decode=GuardianSettings.from_bytes,
            encode=GuardianSettings.to_bytes,
            empty=GuardianSettings,
            changes=changes,
        )
