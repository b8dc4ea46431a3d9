"""The answer cache kept in the gateway's storage, so that every gateway instance on it (Redis)
serves what any of them stored: ``StorageCacheStore`` (answers) and ``StorageVectorIndex``
(the semantic cache's prompts). ``cache.store = "auto"`` uses them on Redis storage.

Layout, every key in the scope's partition (a workspace's, or ``shared``):

- ``<scope>:cache:a:<digest>``: an answer (``CachedAnswer.to_bytes``), with the cache's TTL;
- ``<scope>:cache:keys``: a map of the scope's answers, digest -> ``<model> <expiry> <bytes>``:
  what a purge deletes (by model, or all), pruned of expired entries as answers are added
  (every 64 a process adds to that scope, or every ``max_entries / 8`` when fewer), and then
  to ``max_entries`` and ``max_bytes`` a scope (the entries nearest their expiry, the oldest,
  go first);
- ``<scope>:cache:v:<partition>``: a map of one partition's prompts, digest -> JSON of the
  vector (base64 float16: about 700 bytes for 256 dimensions), the masked text and the model;
  at most ``per_partition`` (trimmed every 16 additions a process makes to that partition);
- ``<scope>:cache:vl:<partition>``: the partition's changes, a capped log (the last 256):
  ``+<digest> <record>`` (a prompt added, its record with it), ``-<digest>`` (one removed),
  ``*`` (the partition purged). A process that mirrors the partition reads only the changes
  after those it has seen, a page of the log at a time, and the whole map only the first
  time, after a purge, when it fell more than the log holds behind, and (when it changed)
  once a minute;
- ``<scope>:cache:vv:<partition>``: the partition's version, moved after each change is
  logged: a semantic lookup of a partition unchanged since this process last looked is one
  ``get``;
- ``<scope>:cache:parts``: the scope's partitions, for purges;
- ``gk:cache:scopes``: every scope with answers, for a purge of everything.

A lookup is one ``get`` (a semantic one: one ``get`` more, and a page of the change log when
the partition changed). Bounds: each answer
(``max_entry_bytes``), each scope's answers in number and bytes (checked as above, so a scope
may run over by what one process's additions to it bring between two checks: at most 64, an
eighth of a smaller ``max_entries``); memory as a whole is also the
store's to bound (Redis's ``maxmemory``, with an eviction policy such as ``allkeys-lru``).
"""

from __future__ import annotations

import base64
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway_kit.cache.answer import CachedAnswer
from gateway_kit.cache.embedders import Vector
from gateway_kit.cache.index import IndexEntry, Match, best_matches
from gateway_kit.cache.store import CacheKey, StoreFigures
from gateway_kit.storage import LogEntry, Storage

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
#: Changes a partition's log keeps, and how many are read at a time.
_CHANGES = 256
_PAGE = 32
#: A purge in a partition's change log: read it whole again.
_PURGED = b"*"
#: A changed partition's mirror is read whole again after this long, whatever its log says:
#: what a change the log does not hold (an evicted key, a writer of an earlier version) left
#: out lasts no longer.
_REREAD_S = 60.0


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
        #: Answers this process added per scope since its last prune: per scope, so traffic
        #: alternating between workspaces cannot keep one from ever being pruned.
        self._added = _Counts()
        #: Scopes this process knows are listed in ``SCOPES_KEY``.
        self._scopes: set[str] = set()

    async def get(self, key: CacheKey) -> CachedAnswer | None:
        raw = await self._storage.get(answer_key(key))
        return None if raw is None else decode_answer(raw)

    async def put(self, key: CacheKey, answer: CachedAnswer, ttl_s: float | None = None) -> bool:
        if answer.size > self.max_entry_bytes:
            return False
        storage, index = self._storage, _keys_key(key.scope)
        ttl = self.ttl_s if ttl_s is None else min(ttl_s, self.ttl_s)
        await storage.set(answer_key(key), answer.to_bytes(), ttl=ttl)
        if key.scope not in self._scopes:
            await storage.map_set(SCOPES_KEY, key.scope, b"1")
            self._scopes.add(key.scope)
        expires = self._clock() + ttl
        record = f"{key.model} {expires:.0f} {answer.size}"
        await storage.map_set(index, key.digest, record.encode())
        # A small bound is checked as often as it could be passed; a large one every 64.
        every = max(1, min(self._prune_every, self.max_entries // 8))
        if self._added.one_more(key.scope) >= every:
            self._added.reset(key.scope)
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
        now = self._clock()
        # The answers still alive: an expired one waits in the map for the next prune.
        live = [
            int(size)
            for value in items.values()
            for _, expiry, size in [value.decode().rsplit(" ", 2)]
            if float(expiry) > now
        ]
        return StoreFigures(len(live), sum(live), self.max_entries, self.max_bytes, 0)


@dataclass(slots=True)
class _Mirror:
    """What this process knows of one partition: the version and the change log's position it
    is up to date with, its entries by digest, and their vectors stacked (made on demand)."""

    version: bytes | None
    seq: int
    entries: dict[str, IndexEntry]
    #: When the whole partition was last read (monotonic seconds).
    read_at: float
    listed: list[IndexEntry] | None = None
    matrix: Any = None


class StorageVectorIndex:
    """The semantic cache's index in the storage, with a mirror of the partitions this process
    searched. A partition's version (``<scope>:cache:vv:<partition>``, moved after every
    change) is read on each search: unchanged, the mirror answers (one ``get``, whatever the
    partition's size); moved, the changes since are read from the partition's change log (its
    newest page, usually one) and applied; the whole partition is read only the first time,
    after a purge, when more changed than the log tells, and (when it changed) once a minute."""

    def __init__(
        self,
        storage: Storage,
        *,
        per_partition: int,
        mirrored: int = _MIRRORED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import numpy

        self._np = numpy
        self._storage = storage
        self._clock = clock
        self.per_partition = per_partition
        self._mirrored = mirrored
        self._mirror: OrderedDict[tuple[str, str], _Mirror] = OrderedDict()
        self._added = _Counts()  # additions per (scope, partition) since its last trim

    async def add(self, scope: str, partition: str, entry: IndexEntry) -> None:
        storage = self._storage
        # float16: half the bytes a partition's read takes, similarities within about 1e-3.
        vector = self._np.asarray(entry.vector, dtype=self._np.float16)
        record = json.dumps(
            {
                "v": base64.b64encode(vector.tobytes()).decode(),
                "t": entry.text,
                "m": entry.key.model,
                "at": time.time(),
            }
        ).encode()
        key, digest = _vectors_key(scope, partition), entry.key.digest
        await storage.map_set(key, digest, record)
        await storage.map_set(f"{scope}:cache:parts", partition, entry.key.model.encode())
        changes = [b"+" + digest.encode() + b" " + record]
        if self._added.one_more(key) >= _TRIM_EVERY:
            self._added.reset(key)
            items = await storage.map_items(key)
            if len(items) > self.per_partition:
                ages = sorted((json.loads(raw)["at"], name) for name, raw in items.items())
                for _, name in ages[: len(items) - self.per_partition]:
                    await storage.map_delete(key, name)
                    changes.append(b"-" + name.encode())
        await self._changed(scope, partition, changes)

    async def _changed(self, scope: str, partition: str, changes: list[bytes]) -> None:
        """Log ``changes`` (after the map holds them), then move the version: a reader that
        sees the new version finds them in the log."""
        await self._storage.log_extend(_changes_key(scope, partition), changes, max_len=_CHANGES)
        await self._storage.incr(_version_key(scope, partition), 1)

    async def search(
        self, scope: str, partition: str, vector: Vector, *, threshold: float, limit: int = 5
    ) -> tuple[list[Match], float | None]:
        where = (scope, partition)
        version = await self._storage.get(_version_key(scope, partition))
        known = self._mirror.get(where)
        if known is None or known.version != version:
            known = await self._update(scope, partition, version, known)
            self._mirror[where] = known
            while len(self._mirror) > self._mirrored:
                self._mirror.popitem(last=False)
        self._mirror.move_to_end(where)
        if not known.entries:
            return [], None
        if known.listed is None:
            known.listed = list(known.entries.values())
            known.matrix = self._np.stack([e.vector for e in known.listed])
        return best_matches(self._np, known.matrix, known.listed, vector, threshold, limit)

    async def _update(
        self, scope: str, partition: str, version: bytes | None, known: _Mirror | None
    ) -> _Mirror:
        """The mirror brought up to ``version``: the changes since, or the whole partition."""
        log = _changes_key(scope, partition)
        if known is not None and self._clock() - known.read_at < _REREAD_S:
            newer = await self._changes_since(log, known.seq)
            if newer is not None and all(change.value != _PURGED for change in newer):
                for change in reversed(newer):  # oldest first
                    self._apply(scope, known.entries, change.value)
                if newer:
                    known.seq, known.listed, known.matrix = newer[0].seq, None, None
                # No change newer than those seen: they were read with the previous version.
                known.version = version
                return known
        # The log's position first, then the map: a change made in between is read again
        # from the log next time (applying one twice changes nothing).
        newest = await self._storage.log_page(log, limit=1)
        items = await self._storage.map_items(_vectors_key(scope, partition))
        entries = {digest: self._entry(scope, digest, raw) for digest, raw in items.items()}
        return _Mirror(version, newest[0].seq if newest else 0, entries, self._clock())

    async def _changes_since(self, log: str, seq: int) -> list[LogEntry] | None:
        """The changes after position ``seq``, newest first; ``None`` when the log cannot
        tell them all (it holds none, restarted, no longer reaches back to ``seq``) or they
        are many (the whole partition is read instead)."""
        newer: list[LogEntry] = []
        before: int | None = None
        while True:
            page = await self._storage.log_page(log, limit=_PAGE, before=before)
            if not page or (before is None and page[0].seq < seq):
                return None
            newer += [change for change in page if change.seq > seq]
            if page[-1].seq <= seq + 1:
                return newer
            if len(newer) >= _CHANGES // 2:
                return None
            before = page[-1].seq

    def _apply(self, scope: str, entries: dict[str, IndexEntry], change: bytes) -> None:
        if change.startswith(b"+"):
            digest, _, raw = change[1:].partition(b" ")
            entries[digest.decode()] = self._entry(scope, digest.decode(), raw)
        else:
            entries.pop(change[1:].decode(), None)

    def _entry(self, scope: str, digest: str, raw: bytes) -> IndexEntry:
        record: dict[str, Any] = json.loads(raw)
        raw16 = base64.b64decode(record["v"])
        stored = self._np.frombuffer(raw16, dtype=self._np.float16).astype(self._np.float32)
        return IndexEntry(stored, record["t"], CacheKey(scope, record["m"], digest))

    async def forget(self, scope: str, partition: str, key: CacheKey) -> None:
        await self._storage.map_delete(_vectors_key(scope, partition), key.digest)
        await self._changed(scope, partition, [b"-" + key.digest.encode()])

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
            await self._changed(scope, partition, [_PURGED])
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


def _changes_key(scope: str, partition: str) -> str:
    return f"{scope}:cache:vl:{partition}"


class _Counts:
    """Additions per name since its last trim; bounded (past 100,000 names it starts over:
    a name then waits a little longer for its trim, never forever)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def one_more(self, name: str) -> int:
        counts = self._counts
        if len(counts) >= 100_000 and name not in counts:
            counts.clear()
        counts[name] = count = counts.get(name, 0) + 1
        return count

    def reset(self, name: str) -> None:
        self._counts.pop(name, None)
