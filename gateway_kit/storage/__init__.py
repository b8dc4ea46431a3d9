"""State: the ``Storage`` protocol and its memory, SQLite and Redis backends.

``RedisStorage`` needs the ``redis`` extra; it is imported on first use, so that the rest works
without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway_kit.storage._factory import storage_from_url
from gateway_kit.storage.base import (
    THROTTLED,
    ClaimedItem,
    DeadItem,
    Increment,
    IncrManyResult,
    IncrResult,
    LogEntry,
    QueueSize,
    Storage,
    Throttle,
    ThrottleResult,
)
from gateway_kit.storage.memory import MemoryStorage
from gateway_kit.storage.sqlite import SQLiteStorage

if TYPE_CHECKING:
    from gateway_kit.storage.redis import RedisStorage

__all__ = [
    "THROTTLED",
    "ClaimedItem",
    "DeadItem",
    "IncrManyResult",
    "IncrResult",
    "Increment",
    "LogEntry",
    "MemoryStorage",
    "QueueSize",
    "RedisStorage",
    "SQLiteStorage",
    "Storage",
    "Throttle",
    "ThrottleResult",
    "storage_from_url",
]


def __getattr__(name: str) -> object:
    if name == "RedisStorage":
        from gateway_kit.storage.redis import RedisStorage

        return RedisStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
