"""``TTLMap``: a small expiring cache for the request path.

cachetools' ``TTLCache`` keeps a linked list in order and expires on every access; for lookups
that happen on every request (a key's principal, a workspace's plan) a dict of
``(expires_at, value)`` is several times cheaper. Bounded: when full, the oldest entry goes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TTLMap(Generic[K, V]):
    """``get`` answers ``None`` once an entry is ``ttl`` seconds old."""

    __slots__ = ("_clock", "_entries", "_maxsize", "_ttl")

    def __init__(
        self, ttl: float, *, maxsize: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._maxsize = maxsize
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._entries.pop(key, None)
            return None
        return entry[1]

    def set(self, key: K, value: V) -> None:
        if len(self._entries) >= self._maxsize and key not in self._entries:
            # Insertion order: the first entry is the oldest.
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (self._clock() + self._ttl, value)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)
