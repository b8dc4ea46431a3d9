"""The answer cache's state: answers as kept (``answer``), the in-process store (``store``),
and ``AnswerCache`` (``service``): purges through the change feed, per-workspace counters.
The layer that serves and keeps answers is ``gateway_kit.layers.cache``."""

from gateway_kit.cache.answer import CachedAnswer, StreamAssembler
from gateway_kit.cache.service import AnswerCache, CacheStats
from gateway_kit.cache.store import CacheKey, CacheStore, LocalCacheStore

__all__ = [
    "AnswerCache",
    "CacheKey",
    "CacheStats",
    "CacheStore",
    "CachedAnswer",
    "LocalCacheStore",
    "StreamAssembler",
]
