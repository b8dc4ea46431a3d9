"""Where the semantic cache finds prompts like a new one: the ``VectorIndex`` protocol and
``LocalVectorIndex``.

A prompt is only ever compared with prompts of its own **partition**: the same scope (the
workspace), and a keyed hash of everything of the request but the final user message (the
model, the system prompt, the earlier turns, the tools, the parameters, the embedder's id).
Within a partition, ``search`` gives the entries whose vectors are at least ``threshold``
similar (cosine: the vectors are unit length), most similar first, each with the masked text
it was made from (for the lexical guard) and the exact key of its answer.

``LocalVectorIndex`` keeps each partition's vectors as one matrix (a search is one
matrix-vector product), at most ``per_partition`` entries a partition (the oldest dropped) and
``max_entries`` in all (the least recently used partition's oldest entries go first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from gateway_kit.cache.embedders import Vector
from gateway_kit.cache.store import CacheKey

__all__ = ["IndexEntry", "LocalVectorIndex", "Match", "VectorIndex", "best_matches"]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    vector: Vector
    #: The final user message the vector was made from (masked when PII masking is on).
    text: str
    #: Where its answer is.
    key: CacheKey


@dataclass(frozen=True, slots=True)
class Match:
    similarity: float
    entry: IndexEntry


class VectorIndex(Protocol):
    async def add(self, scope: str, partition: str, entry: IndexEntry) -> None: ...

    async def search(
        self, scope: str, partition: str, vector: Vector, *, threshold: float, limit: int = 5
    ) -> tuple[list[Match], float | None]:
        """The matches at or above ``threshold``, best first, and the best similarity seen
        (``None``: the partition is empty)."""
        ...

    async def forget(self, scope: str, partition: str, key: CacheKey) -> None:
        """Drop the entry of ``key`` (its answer is gone)."""
        ...

    async def purge(self, scope: str | None = None, model: str | None = None) -> int: ...


def best_matches(
    np: Any, matrix: Any, entries: list[IndexEntry], vector: Vector, threshold: float, limit: int
) -> tuple[list[Match], float | None]:
    """``search``'s answer over ``entries`` (their vectors stacked in ``matrix``)."""
    if not entries:
        return [], None
    similarities = matrix @ vector
    best = float(similarities.max())
    if best < threshold:
        return [], best
    order = np.argsort(-similarities)[:limit]
    found = [
        Match(float(similarities[i]), entries[i]) for i in order if similarities[i] >= threshold
    ]
    return found, best


class _Partition:
    __slots__ = ("entries", "matrix")

    def __init__(self) -> None:
        self.entries: list[IndexEntry] = []
        self.matrix: Any = None  # the entries' vectors stacked, made on the next search


class LocalVectorIndex:
    """An in-process ``VectorIndex`` (numpy); see the module docstring."""

    def __init__(self, *, per_partition: int = 1000, max_entries: int = 100_000) -> None:
        import numpy

        self._np = numpy
        self.per_partition = per_partition
        self.max_entries = max_entries
        self._partitions: OrderedDict[tuple[str, str], _Partition] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    async def add(self, scope: str, partition: str, entry: IndexEntry) -> None:
        self.add_now(scope, partition, entry)

    def add_now(self, scope: str, partition: str, entry: IndexEntry) -> None:
        where = (scope, partition)
        found = self._partitions.get(where)
        if found is None:
            found = self._partitions[where] = _Partition()
        self._partitions.move_to_end(where)
        kept = [e for e in found.entries if e.key != entry.key]  # stored again: replaced
        self._count -= len(found.entries) - len(kept)
        kept.append(entry)
        self._count += 1
        if len(kept) > self.per_partition:
            self._count -= len(kept) - self.per_partition
            kept = kept[-self.per_partition :]
        found.entries, found.matrix = kept, None
        while self._count > self.max_entries:
            oldest_where, oldest = next(iter(self._partitions.items()))
            oldest.entries.pop(0)
            oldest.matrix = None
            self._count -= 1
            if not oldest.entries:
                del self._partitions[oldest_where]

    async def search(
        self, scope: str, partition: str, vector: Vector, *, threshold: float, limit: int = 5
    ) -> tuple[list[Match], float | None]:
        found = self._partitions.get((scope, partition))
        if found is None or not found.entries:
            return [], None
        self._partitions.move_to_end((scope, partition))
        if found.matrix is None:
            found.matrix = self._np.stack([e.vector for e in found.entries])
        return best_matches(self._np, found.matrix, found.entries, vector, threshold, limit)

    async def forget(self, scope: str, partition: str, key: CacheKey) -> None:
        found = self._partitions.get((scope, partition))
        if found is None:
            return
        kept = [e for e in found.entries if e.key != key]
        self._count -= len(found.entries) - len(kept)
        found.entries, found.matrix = kept, None
        if not kept:
            del self._partitions[(scope, partition)]

    async def purge(self, scope: str | None = None, model: str | None = None) -> int:
        return self.purge_now(scope, model)

    def purge_now(self, scope: str | None = None, model: str | None = None) -> int:
        dropped = 0
        for where in list(self._partitions):
            if scope is not None and where[0] != scope:
                continue
            found = self._partitions[where]
            kept = [e for e in found.entries if model is not None and e.key.model != model]
            dropped += len(found.entries) - len(kept)
            found.entries, found.matrix = kept, None
            if not kept:
                del self._partitions[where]
        self._count -= dropped
        return dropped
