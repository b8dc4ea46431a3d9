"""``Memo``: a bounded memory of work already done (Guardian's message facts, PII masking's
spans), used on the event loop only (no lock)."""

from __future__ import annotations

import itertools
from typing import TypeVar

__all__ = ["Memo"]

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """A plain dict (a hit costs one lookup in C; an LRU's bookkeeping would cost more than the
    rest of a hit), of which the oldest half is dropped when it is full."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def remember(self, key: K, value: V) -> None:
        if len(self) >= self.size:
            for old in list(itertools.islice(self, self.size // 2)):
                del self[old]
        self[key] = value
