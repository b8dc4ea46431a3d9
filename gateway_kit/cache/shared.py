"""The answer cache kept in the gateway's storage, so that every gateway instance on it (Redis)
serves what any of them stored: ``StorageCacheStore`` (answers) and ``StorageVectorIndex``
(the semantic cache's prompts). ``cache.store = "auto"`` uses them on Redis storage.

Layout, every key in the scope's partition (a workspace's, or ``shared``):

- ``<scope>:cache:a:<digest>``: an answer (``CachedAnswer.to_bytes``), with the cache's TTL;
- ``<scope>:cache:keys``: a map of the scope's answers, digest -> ``<model> <expiry> <bytes>``:
  what a purge deletes (by model, or all), pruned of expired entries as answers are added
  (every 64 a process adds), and then to ``max_entries`` and ``max_bytes`` a scope (the
  entries nearest their expiry, the oldest, go first);
- ``<scope>:cache:v:<partition>``: a map of one partition's prompts, digest -> JSON of the
  vector (base64 float16: about 700 bytes for 256 dimensions), the masked text and the model;
  at most ``per_partition`` (trimmed every 16 additions a process makes);
- ``<scope>:cache:vv:<partition>``: the partition's version, moved by every change: a process
  reads a partition's prompts again only when it moved, so a semantic lookup of an unchanged
  partition is one ``get``;
- ``<scope>:cache:parts``: the scope's partitions, for purges;
- ``gk:cache:scopes``: every scope with answers, for a purge of everything.

A lookup is one ``get`` (and one ``map_items`` for a semantic one). Bounds: each answer
(``max_entry_bytes``), each scope's answers in number and bytes (checked as above, so a scope
may run over by what 64 additions bring between two checks); memory as a whole is also the
store's to bound (Redis's ``maxmemory``, with an eviction policy such as ``allkeys-lru``).
"""

from __future__ import annotations

import base64
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gateway_kit.cache.answer import CachedAnswer
from gateway_kit.cache.embedders import Vector
from gateway_kit.cache.index import IndexEntry, Match, best_matches
from gateway_kit.cache.store import CacheKey, StoreFigures
from gateway_kit.storage import Storage

__all__ = [
    "SCOPES_KEY",
    "StorageCacheStore",
    "StorageVectorIndex",
    "answer_key",
    "decode_answer",
]

#: Every scope that has had answers stored.
SCOPES_KEY = "gk:cache:scopes"

#: Prune a scope's map of expired answers every this many additions.
_PRUNE_EVERY = 64
#: Trim a partition's prompts to ``per_partition`` every this many additions (per process).
_TRIM_EVERY = 16
#: Partitions a process mirrors, the least recently searched dropped first.
_MIRRORED = 1000


class StorageCacheStore:
    def __init__(
        self,
        storage: Storage,
        *,
        max_entries: int,
        max_bytes: int,
        max_entry_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.time,
        prune_every: int = _PRUNE_EVERY,
    ) -> None:
        self._storage = storage
        self._prune_every = prune_every
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._added = 0
        #: Scopes this process knows are listed in ``SCOPES_KEY``.
        self._scopes: set[str] = set()

    async def get(self, key: CacheKey) -> CachedAnswer | None:
        raw = await self._storage.get(answer_key(key))
        return None if raw is None else decode_answer(raw)

    async def put(self, key: CacheKey, answer: CachedAnswer) -> bool:
        if answer.size > self.max_entry_bytes:
            return False
        storage, index = self._storage, _keys_key(key.scope)
        await storage.set(answer_key(key), answer.to_bytes(), ttl=self.ttl_s)
        if key.scope not in self._scopes:
            await storage.map_set(SCOPES_KEY, key.scope, b"1")
            self._scopes.add(key.scope)
        expires = self._clock() + self.ttl_s
        record = f"{key.model} {expires:.0f} {answer.size}"
        await storage.map_set(index, key.digest, record.encode())
        self._added += 1
        if self._added % self._prune_every == 0:
            await self._prune(key.scope)
        return True

    async def _prune(self, scope: str) -> None:
        """Forget expired answers, then the oldest past ``max_entries`` or ``max_bytes``."""
        storage, index = self._storage, _keys_key(scope)
        entries = sorted(
            (float(expiry), int(size), digest)
            for digest, value in (await storage.map_items(index)).items()
            for _, expiry, size in [value.decode().rsplit(" ", 2)]
        )
        now, count, total = self._clock(), len(entries), sum(e[1] for e in entries)
        for expires, size, digest in entries:
            if expires > now and count <= self.max_entries and total <= self.max_bytes:
                break
            await storage.delete(f"{scope}:cache:a:{digest}")
            await storage.map_delete(index, digest)
            count, total = count - 1, total - size

    async def purge(self, scope: str | None = None, model: str | None = None) -> int:
        if scope is None:
            scopes = await self._storage.map_items(SCOPES_KEY)
            return sum([await self.purge(name, model) for name in scopes])
        storage, index = self._storage, _keys_key(scope)
        dropped = 0
        for digest, value in (await storage.map_items(index)).items():
            if model is not None and value.decode().rsplit(" ", 2)[0] != model:
                continue
            await storage.delete(f"{scope}:cache:a:{digest}")
            await storage.map_delete(index, digest)
            dropped += 1
        return dropped

    async def figures(self, scope: str | None = None) -> StoreFigures:
        items = await self._storage.map_items(_keys_key(scope)) if scope else {}
        size = sum(int(value.decode().rsplit(" ", 1)[1]) for value in items.values())
        return StoreFigures(len(items), size, self.max_entries, self.max_bytes, 0)


class StorageVectorIndex:
    """The semantic cache's index in the storage, with a mirror of the partitions this process
    searched: a partition's version (``<scope>:cache:vv:<partition>``, moved by every change
    of it) is read on each search, and its prompts only when it moved, so a search of an
    unchanged partition costs one ``get``, whatever its size."""

    def __init__(self, storage: Storage, *, per_partition: int, mirrored: int = _MIRRORED) -> None:
        import numpy

        self._np = numpy
        self._storage = storage
        self.per_partition = per_partition
        self._mirrored = mirrored
        #: (scope, partition) -> (its version when read, its entries, their vectors stacked).
        self._mirror: OrderedDict[tuple[str, str], tuple[bytes | None, list[IndexEntry], Any]]
        self._mirror = OrderedDict()
        self._added = 0

    async def add(self, scope: str, partition: str, entry: IndexEntry) -> None:
        storage = self._storage
        # float16: half the bytes a partition's read takes, similarities within about 1e-3.
        vector = self._np.asarray(entry.vector, dtype=self._np.float16)
        record = {
            "v": base64.b64encode(vector.tobytes()).decode(),
            "t": entry.text,
            "m": entry.key.model,
            "at": time.time(),
        }
        key = _vectors_key(scope, partition)
        await storage.map_set(key, entry.key.digest, json.dumps(record).encode())
        await storage.map_set(f"{scope}:cache:parts", partition, entry.key.model.encode())
        self._added += 1
        if self._added % _TRIM_EVERY == 0:
            items = await storage.map_items(key)
            if len(items) > self.per_partition:
                ages = sorted((json.loads(raw)["at"], digest) for digest, raw in items.items())
                for _, digest in ages[: len(items) - self.per_partition]:
                    await storage.map_delete(key, digest)
        await storage.incr(_version_key(scope, partition), 1)

    async def search(
        self, scope: str, partition: str, vector: Vector, *, threshold: float, limit: int = 5
    ) -> tuple[list[Match], float | None]:
        where = (scope, partition)
        version = await self._storage.get(_version_key(scope, partition))
        known = self._mirror.get(where)
        if known is not None and version is not None and known[0] == version:
            self._mirror.move_to_end(where)
            _, entries, matrix = known
        else:
            entries = await self._read(scope, partition)
            matrix = self._np.stack([e.vector for e in entries]) if entries else None
            self._mirror[where] = (version, entries, matrix)
            self._mirror.move_to_end(where)
            while len(self._mirror) > self._mirrored:
                self._mirror.popitem(last=False)
        if not entries:
            return [], None
        return best_matches(self._np, matrix, entries, vector, threshold, limit)

    async def _read(self, scope: str, partition: str) -> list[IndexEntry]:
        items = await self._storage.map_items(_vectors_key(scope, partition))
        entries: list[IndexEntry] = []
        for digest, raw in items.items():
            record: dict[str, Any] = json.loads(raw)
            raw16 = base64.b64decode(record["v"])
            stored = self._np.frombuffer(raw16, dtype=self._np.float16).astype(self._np.float32)
            entries.append(IndexEntry(stored, record["t"], CacheKey(scope, record["m"], digest)))
        return entries

    async def forget(self, scope: str, partition: str, key: CacheKey) -> None:
        await self._storage.map_delete(_vectors_key(scope, partition), key.digest)
        await self._storage.incr(_version_key(scope, partition), 1)

    async def purge(self, scope: str | None = None, model: str | None = None) -> int:
        if scope is None:
            scopes = await self._storage.map_items(SCOPES_KEY)
            return sum([await self.purge(name, model) for name in scopes])
        storage, parts = self._storage, f"{scope}:cache:parts"
        dropped = 0
        for partition, owner in (await storage.map_items(parts)).items():
            if model is not None and owner.decode() != model:
                continue
            await storage.delete(_vectors_key(scope, partition))
            await storage.map_delete(parts, partition)
            await storage.incr(_version_key(scope, partition), 1)
            dropped += 1
        return dropped


def answer_key(key: CacheKey) -> str:
    """Where ``key``'s answer is kept (in its scope's partition)."""
    return f"{key.scope}:cache:a:{key.digest}"


def decode_answer(raw: bytes) -> CachedAnswer | None:
    """A kept answer, or ``None`` when it cannot be read (another version's: a miss)."""
    try:
        return CachedAnswer.of_bytes(raw)
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _keys_key(scope: str | None) -> str:
    return f"{scope}:cache:keys"


def _vectors_key(scope: str, partition: str) -> str:
    return f"{scope}:cache:v:{partition}"


def _version_key(scope: str, partition: str) -> str:
    return f"{scope}:cache:vv:{partition}"
