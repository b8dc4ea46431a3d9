"""``AnswerCache``: the gateway's answer cache as the layer, the API and the CLI see it.

It holds the store of answers (``LocalCacheStore``, listening to the change feed for purges
made elsewhere), publishes purges on the change feed (so every gateway process on the storage
drops the same entries within the feed's ``cache_ttl``, the process that purges at once), and
reads each workspace's outcome counters from the storage: requests served from the cache
(``hit``), served from upstream (``miss``), not eligible (``bypass``), and answers kept
(``stored``). The counters are written by the cache layer in the request's settlement step.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.cache.store import LocalCacheStore, StoreFigures, purge_ident
from gateway_kit.config import Mode
from gateway_kit.config.cache import CacheConfig
from gateway_kit.storage import Storage

__all__ = ["OUTCOMES", "SHARED_SCOPE", "AnswerCache", "CacheStats", "outcome_key"]

#: What a request's cache verdict counts as, in the workspace's counters.
OUTCOMES = ("hit", "miss", "bypass", "stored")
#: The scope of entries when ``scope = "shared"`` (no workspace id looks like it).
SHARED_SCOPE = "shared"


def outcome_key(workspace_id: str, outcome: str) -> str:
    """The counter of ``outcome`` for ``workspace_id``."""
    return f"{workspace_id}:cache:{outcome}"


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A workspace's counters, and its entries in this process's store."""

    hits: int
    misses: int
    bypasses: int
    stored: int
    store: StoreFigures

    @property
    def hit_rate(self) -> float:
        """Hits over the requests that could hit (hits and misses), 0 when none."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


class AnswerCache:
    def __init__(self, storage: Storage, changes: ChangeFeed, config: CacheConfig) -> None:
        self._storage = storage
        self._changes = changes
        self.config = config
        self.store = LocalCacheStore(
            max_entries=config.max_entries,
            max_bytes=config.max_bytes,
            max_entry_bytes=config.max_entry_bytes,
            ttl_s=config.ttl_s,
        )
        if config.mode is not Mode.OFF:
            changes.listen(self.store)

    def scope_of(self, workspace_id: str | None) -> str:
        """Where a workspace's entries are: its own scope, or the shared one."""
        if self.config.scope == "shared" or workspace_id is None:
            return SHARED_SCOPE
        return workspace_id

    async def purge(self, workspace_id: str | None = None, model: str | None = None) -> int:
        """Drop a workspace's entries (of ``model`` only, if given), or every entry
        (``workspace_id=None``), here at once and in every process through the change feed;
        how many this process dropped."""
        scope = None if workspace_id is None else self.scope_of(workspace_id)
        dropped = self.store.purge(scope, model)
        await self._changes.publish(("cache", purge_ident(scope, model)))
        return dropped

    async def stats(self, workspace_id: str) -> CacheStats:
        counts = [await self._storage.get(outcome_key(workspace_id, o)) for o in OUTCOMES]
        hits, misses, bypasses, stored = (int(raw) if raw else 0 for raw in counts)
        figures = self.store.figures(self.scope_of(workspace_id))
        return CacheStats(hits, misses, bypasses, stored, figures)
