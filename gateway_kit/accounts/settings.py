"""``SettingsStore``: one JSON record of settings per workspace, read on the request path.

A layer's workspace settings (Guardian's key thresholds, PII masking's patterns) are one record
per workspace (``<ws>:<topic>:settings``), read through an in-process cache kept current by the
change feed (the topic): a change made through any instance applies everywhere within
``auth.cache_ttl_s``, like the budget's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from gateway_kit.accounts.changes import ChangeFeed, FeedCache, Topic
from gateway_kit.storage import Storage

__all__ = ["SettingsStore"]

T = TypeVar("T")


class SettingsStore(Generic[T]):
    """Read (cached) and save a workspace's settings of ``topic``: ``decode`` makes them of a
    stored record, ``encode`` the record, and ``empty`` stands for a workspace without one."""

    def __init__(
        self,
        storage: Storage,
        topic: Topic,
        *,
        decode: Callable[[bytes], T],
        encode: Callable[[T], bytes],
        empty: Callable[[], T],
        changes: ChangeFeed | None = None,
    ) -> None:
        self._storage = storage
        self._topic = topic
        self._decode, self._encode, self._empty = decode, encode, empty
        self.changes = changes if changes is not None else ChangeFeed(storage, cache_ttl=0)
        self._cache: FeedCache[T] = FeedCache(self.changes, topic)

    def _key(self, workspace_id: str) -> str:
        return f"{workspace_id}:{self._topic}:settings"

    async def get(self, workspace_id: str) -> T:
        if (hit := self._cache.get(workspace_id)) is not None:
            return hit
        version = self._cache.version
        raw = await self._storage.get(self._key(workspace_id))
        settings = self._decode(raw) if raw else self._empty()
        self._cache.put(workspace_id, settings, version=version)
        return settings

    async def save(self, workspace_id: str, settings: T) -> None:
        await self._storage.set(self._key(workspace_id), self._encode(settings))
        await self.changes.publish((self._topic, workspace_id))
