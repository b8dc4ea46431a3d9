"""``AnswerCache``: the gateway's answer cache as the layer, the API and the CLI see it.

It holds the store of answers and, when the semantic cache is used, the index of prompts and
the embedder: in this process (``LocalCacheStore``, ``LocalVectorIndex``), or in the storage,
shared by every instance (``cache.shared``: ``cache.store = "auto"`` on Redis). A purge drops
the entries here at once; in-process stores of other processes drop theirs from the change
feed, which it publishes the purge on (within a second); a shared store is purged once. It
keeps the workspaces' settings (``CacheSettingsStore``: the semantic cache turned on), and
each workspace's counters (``CacheCounters``: added up in the process, written once a
second): requests served from the cache by exact match (``hit``) or by meaning
(``semantic``), served from upstream (``miss``), not eligible (``bypass``), answers kept
(``stored``), and the histogram of the best similarity each semantic lookup found.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.cache.answer import CachedAnswer
from gateway_kit.cache.counts import CacheCounters
from gateway_kit.cache.embedders import Embedder, LocalEmbedder
from gateway_kit.cache.index import LocalVectorIndex, VectorIndex
from gateway_kit.cache.settings import CacheSettingsStore
from gateway_kit.cache.shared import (
    StorageCacheStore,
    StorageVectorIndex,
    answer_key,
    decode_answer,
)
from gateway_kit.cache.store import (
    ALL,
    CacheKey,
    CacheStore,
    LocalCacheStore,
    StoreFigures,
    purge_ident,
)
from gateway_kit.config import Mode
from gateway_kit.config.cache import CacheConfig
from gateway_kit.storage import Storage

__all__ = [
    "BUCKETS",
    "OUTCOMES",
    "SHARED_SCOPE",
    "AnswerCache",
    "CacheStats",
    "bucket_of",
    "outcome_key",
]

#: What a request's cache verdict counts as, in the workspace's counters.
OUTCOMES = ("hit", "semantic", "miss", "bypass", "stored")
#: The similarity histogram's buckets: their lower bounds, 0.05 wide.
BUCKETS = tuple(f"{i / 20:.2f}" for i in range(20))
#: The scope of entries when ``scope = "shared"`` (no workspace id looks like it).
SHARED_SCOPE = "shared"


def outcome_key(workspace_id: str, outcome: str) -> str:
    """The counter of ``outcome`` (or of ``similarity:<bucket>``) for ``workspace_id``."""
    return f"{workspace_id}:cache:{outcome}"


def bucket_of(similarity: float) -> str:
    """The histogram bucket of a similarity (below 0 counts as 0, 1 as the top bucket)."""
    return BUCKETS[min(19, max(0, int(similarity * 20)))]


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A workspace's counters, and its entries in this process's store."""

    hits: int
    semantic_hits: int
    misses: int
    bypasses: int
    stored: int
    store: StoreFigures
    #: The best similarity of each semantic lookup, by bucket (``"0.90"``: 0.90 to 0.95).
    similarity: dict[str, int] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        """Hits (exact and semantic) over the requests that could hit, 0 when none."""
        looked_up = self.hits + self.semantic_hits + self.misses
        return (self.hits + self.semantic_hits) / looked_up if looked_up else 0.0


class AnswerCache:
    def __init__(
        self,
        storage: Storage,
        changes: ChangeFeed,
        config: CacheConfig,
        *,
        local_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``local_clock`` times the in-process store's answers (a test's fake clock drives it
        as it drives the storage's TTLs)."""
        self._storage = storage
        self._changes = changes
        self.config = config
        #: Whether answers live in the storage (shared by every instance) or in this process.
        self.shared = config.store == "storage" or (
            config.store == "auto" and type(storage).__name__ == "RedisStorage"
        )
        self.local: LocalCacheStore | None = None
        self.store: CacheStore
        if self.shared:
            self.store = StorageCacheStore(
                storage,
                max_entries=config.max_entries,
                max_bytes=config.max_bytes,
                max_entry_bytes=config.max_entry_bytes,
                ttl_s=config.ttl_s,
            )
        else:
            self.store = self.local = LocalCacheStore(
                max_entries=config.max_entries,
                max_bytes=config.max_bytes,
                max_entry_bytes=config.max_entry_bytes,
                ttl_s=config.ttl_s,
                clock=local_clock,
            )
        self.settings = CacheSettingsStore(storage, changes=changes)
        #: The workspaces' counters, added up here and written once a second.
        self.counters = CacheCounters(storage)
        self._index: VectorIndex | None = None
        self._local_index: LocalVectorIndex | None = None
        self._embedder: Embedder | None = None
        #: An embedder plugged in with ``use``.
        self.custom_embedder: Embedder | None = None
        if config.mode is not Mode.OFF and not self.shared:
            changes.listen(self)

    def use(self, *, embedder: Embedder | None = None, index: VectorIndex | None = None) -> None:
        """Plug in an embedder of your own (any ``Embedder``: it then embeds for every
        semantic lookup, whatever ``cache.semantic.embedder`` says) and/or a vector index
        (any ``VectorIndex``). Call it after entering the gateway, before serving."""
        if embedder is not None:
            self.custom_embedder = embedder
        if index is not None:
            self._index = index
            self._local_index = index if isinstance(index, LocalVectorIndex) else None

    @property
    def index(self) -> VectorIndex:
        """The index of prompts (made on first use: it needs numpy, the semantic extra's)."""
        if self._index is None:
            per_partition = self.config.semantic.per_partition
            if self.shared:
                self._index = StorageVectorIndex(self._storage, per_partition=per_partition)
            else:
                self._index = self._local_index = LocalVectorIndex(
                    per_partition=per_partition, max_entries=self.config.max_entries
                )
        return self._index

    @property
    def local_index(self) -> LocalVectorIndex | None:
        """The in-process index, when that is the index (answers kept in this process)."""
        index = self.index
        return index if isinstance(index, LocalVectorIndex) else None

    async def start(self) -> None:
        """Load the local embedder now (in a thread) when the configuration's models use it:
        the first request looked up by meaning should not pay half a second for it."""
        semantic = self.config.semantic
        if self.config.mode is not Mode.OFF and semantic.models and semantic.embedder == "local":
            await anyio.to_thread.run_sync(self.local_embedder)

    def local_embedder(self) -> Embedder:
        """The local embedder (loaded once: half a second, and 16 MB)."""
        if self._embedder is None:
            self._embedder = LocalEmbedder()
        return self._embedder

    def shared_key(self, key: CacheKey) -> str:
        """The storage key of ``key``'s answer in the shared store."""
        return answer_key(key)

    @staticmethod
    def decode(raw: bytes) -> CachedAnswer | None:
        """An answer as the shared store keeps it (``None``: unreadable, a miss)."""
        return decode_answer(raw)

    def scope_of(self, workspace_id: str | None) -> str:
        """Where a workspace's entries are: its own scope, or the shared one."""
        if self.config.scope == "shared" or workspace_id is None:
            return SHARED_SCOPE
        return workspace_id

    async def purge(self, workspace_id: str | None = None, model: str | None = None) -> int:
        """Drop a workspace's answers (of ``model`` only, if given), or every answer
        (``workspace_id=None``), here at once and in every process through the change feed;
        how many this process dropped."""
        scope = None if workspace_id is None else self.scope_of(workspace_id)
        dropped = await self.store.purge(scope, model)
        if self._index is not None or self.shared:
            await self.index.purge(scope, model)
        if not self.shared:
            await self._changes.publish(("cache", purge_ident(scope, model)))
        return dropped

    # The change feed's listener interface (``accounts.changes``): purges made elsewhere.

    topic = "cache"

    def drop(self, ident: str) -> None:
        """A purge published on the change feed (``purge_ident``)."""
        scope, _, model = ident.partition("/")
        where = None if scope == ALL else scope
        if self.local is not None:
            self.local.purge_now(where, model or None)
        if self._local_index is not None:
            self._local_index.purge_now(where, model or None)

    def clear(self) -> None:
        """The feed could not be followed: drop everything (a refill, never a stale answer)."""
        if self.local is not None:
            self.local.clear()
        if self._local_index is not None:
            self._local_index.purge_now()

    async def stats(self, workspace_id: str) -> CacheStats:
        names = [*OUTCOMES, *(f"similarity:{b}" for b in BUCKETS)]
        keys = [outcome_key(workspace_id, name) for name in names]
        written = [await self._storage.get(key) for key in keys]
        # What this process counted and has not written yet is added: it sees its own counts.
        values = [
            (int(raw) if raw else 0) + self.counters.pending(key)
            for key, raw in zip(keys, written, strict=True)
        ]
        hits, semantic, misses, bypasses, stored = values[: len(OUTCOMES)]
        histogram = {
            bucket: count
            for bucket, count in zip(BUCKETS, values[len(OUTCOMES) :], strict=True)
            if count
        }
        figures = await self.store.figures(self.scope_of(workspace_id))
        return CacheStats(hits, semantic, misses, bypasses, stored, figures, histogram)
