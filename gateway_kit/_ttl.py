"""``TTLMap``: a small expiring cache for the request path.

cachetools' ``TTLCache`` keeps a linked list in order and expires on every access; for lookups
that happen on every request (a key's principal, a workspace's plan) a dict of
``(expires_at, value)`` is several times cheaper. Bounded: when full, the oldest entry goes.
``jitter`` spreads expiries out, so that entries filled together (a warm-up, a cache drop) are
not all refreshed from storage in the same second.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TTLMap(Generic[K, V]):
    """``get`` answers ``None`` once an entry is ``ttl`` seconds old.

    With ``jitter`` (a fraction, 0 to 1) each entry lives between ``ttl * (1 - jitter)`` and
    ``ttl`` seconds, drawn from ``rand`` (``random.random`` unless injected).
    """

    __slots__ = ("_clock", "_entries", "_jitter", "_maxsize", "_rand", "_ttl")

    def __init__(
        self,
        ttl: float,
        *,
        maxsize: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        jitter: float = 0.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError("jitter must be between 0 and 1")
        self._ttl = ttl
        self._maxsize = maxsize
        self._clock = clock
        self._jitter = jitter
        self._rand = rand
        self._entries: dict[K, tuple[float, V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

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
        ttl = self._ttl * (1.0 - self._jitter * self._rand()) if self._jitter else self._ttl
        self._entries[key] = (self._clock() + ttl, value)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
