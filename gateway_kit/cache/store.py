"""Where cached answers live: the ``CacheStore`` protocol and ``LocalCacheStore``.

``LocalCacheStore`` keeps answers in the gateway's process, bounded in entries and in bytes
(the least recently used answer goes first) and in time (``ttl_s``). An entry's key is its
scope (a workspace id, or ``*`` for the shared scope), the model, and the request's keyed hash;
a purge names a scope, optionally a model, or everything (``AnswerCache`` applies the purges
other processes publish on the change feed).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway_kit.cache.answer import CachedAnswer

__all__ = ["ALL", "CacheKey", "CacheStore", "LocalCacheStore", "StoreFigures", "purge_ident"]

#: A purge of everything (the change feed's identifier for it).
ALL = "*"


@dataclass(frozen=True, slots=True)
class CacheKey:
    scope: str
    model: str
    digest: str


@dataclass(frozen=True, slots=True)
class StoreFigures:
    entries: int
    bytes: int
    max_entries: int
    max_bytes: int
    evicted: int


class CacheStore(Protocol):
    """What the cache layer needs of a store of answers."""

    async def get(self, key: CacheKey) -> CachedAnswer | None: ...

    async def put(self, key: CacheKey, answer: CachedAnswer, ttl_s: float | None = None) -> bool:
        """Keep ``answer`` for ``ttl_s`` (the store's TTL when ``None`` or longer); ``False``
        when it is too large to keep."""
        ...

    async def purge(self, scope: str | None = None, model: str | None = None) -> int:
        """Drop the entries of ``scope`` (``None``: every scope), of ``model`` if given;
        how many were dropped (here: a shared store may not know)."""
        ...

    async def figures(self, scope: str | None = None) -> StoreFigures: ...


def purge_ident(scope: str | None, model: str | None) -> str:
    """The change feed's identifier of a purge: ``<scope>`` or ``<scope>/<model>``, ``*`` for
    every scope."""
    where = ALL if scope is None else scope
    return where if model is None else f"{where}/{model}"


class LocalCacheStore:
    """An in-process LRU of answers with a time to live; see the module docstring."""

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        max_entry_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[CacheKey, tuple[float, CachedAnswer]] = OrderedDict()
        self._bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: CacheKey) -> CachedAnswer | None:
        return self.get_now(key)

    def get_now(self, key: CacheKey) -> CachedAnswer | None:
        found = self._entries.get(key)
        if found is None:
            return None
        expires, answer = found
        if expires <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return answer

    async def put(self, key: CacheKey, answer: CachedAnswer, ttl_s: float | None = None) -> bool:
        return self.put_now(key, answer, ttl_s)

    def put_now(self, key: CacheKey, answer: CachedAnswer, ttl_s: float | None = None) -> bool:
        if answer.size > self.max_entry_bytes or answer.size > self.max_bytes:
            return False
        if key in self._entries:
            self._drop(key)
        ttl = self.ttl_s if ttl_s is None else min(ttl_s, self.ttl_s)
        self._entries[key] = (self._clock() + ttl, answer)
        self._bytes += answer.size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.evicted += 1
        return True

    async def purge(self, scope: str | None = None, model: str | None = None) -> int:
        return self.purge_now(scope, model)

    def purge_now(self, scope: str | None = None, model: str | None = None) -> int:
        if scope is None and model is None:
            dropped = len(self._entries)
            self.clear()
            return dropped
        doomed = [
            key
            for key in self._entries
            if (scope is None or key.scope == scope) and (model is None or key.model == model)
        ]
        for key in doomed:
            self._drop(key)
        return len(doomed)

    async def figures(self, scope: str | None = None) -> StoreFigures:
        return self.figures_now(scope)

    def figures_now(self, scope: str | None = None) -> StoreFigures:
        if scope is None:
            entries, size = len(self._entries), self._bytes
        else:
            sizes = [a.size for key, (_, a) in self._entries.items() if key.scope == scope]
            entries, size = len(sizes), sum(sizes)
        return StoreFigures(entries, size, self.max_entries, self.max_bytes, self.evicted)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: CacheKey) -> None:
        _, answer = self._entries.pop(key)
        self._bytes -= answer.size
