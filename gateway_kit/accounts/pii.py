"""What a workspace set for PII masking: its own named patterns (always masked) and the values
it never wants masked (its own support address, say), over the configuration's.

One record per workspace (``<ws>:pii:settings``, JSON), read through a ``SettingsStore``
(topic ``pii``). The allow-list holds values the workspace chose to show the model; nothing
masking finds in a request is ever stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.accounts.settings import SettingsStore
from gateway_kit.storage import Storage

__all__ = ["PIISettings", "PIISettingsStore"]


@dataclass(frozen=True, slots=True)
class PIISettings:
    patterns: dict[str, str] = field(default_factory=dict)
    allow: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.patterns or self.allow)

    def to_bytes(self) -> bytes:
        data = {"patterns": self.patterns, "allow": list(self.allow)}
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> PIISettings:
        data = json.loads(raw)
        return cls(dict(data.get("patterns") or {}), tuple(data.get("allow") or ()))


class PIISettingsStore(SettingsStore[PIISettings]):
    """Read (cached) and save a workspace's PII masking settings."""

    def __init__(self, storage: Storage, *, changes: ChangeFeed | None = None) -> None:
        super().__init__(
            storage,
            "pii",
            decode=PIISettings.from_bytes,
            encode=PIISettings.to_bytes,
            empty=PIISettings,
            changes=changes,
        )
