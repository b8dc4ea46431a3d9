"""What a workspace set for the answer cache: whether its requests are looked up by meaning
(the semantic cache) on top of the configuration's models.

One record per workspace (``<ws>:semantic:settings``, JSON), read through a ``SettingsStore``
(topic ``semantic``): a change applies on every instance within ``auth.cache_ttl_s``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.accounts.settings import SettingsStore
from gateway_kit.storage import Storage

__all__ = ["CacheSettings", "CacheSettingsStore"]


@dataclass(frozen=True, slots=True)
class CacheSettings:
    #: ``True``: every chat request of the workspace is looked up by meaning too.
    semantic: bool = False

    def to_bytes(self) -> bytes:
        return json.dumps({"semantic": self.semantic}).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> CacheSettings:
        return cls(bool(json.loads(raw).get("semantic")))


class CacheSettingsStore(SettingsStore[CacheSettings]):
    def __init__(self, storage: Storage, *, changes: ChangeFeed | None = None) -> None:
        super().__init__(
            storage,
            "semantic",
            decode=CacheSettings.from_bytes,
            encode=CacheSettings.to_bytes,
            empty=CacheSettings,
            changes=changes,
        )
