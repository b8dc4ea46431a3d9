"""The answer cache's state: answers as kept (``answer``), the stores (``store`` in the
process, ``shared`` in the storage), the semantic cache's embedders (``embedders``), index
(``index``) and lexical guard (``guard``), and ``AnswerCache`` (``service``): purges through
the change feed, per-workspace settings and counters. The layer that serves and keeps answers
is ``gateway_kit.layers.cache``.

To plug in another embedding model, implement ``Embedder`` (``id``, ``async embed(texts)``);
another vector store, ``VectorIndex``.
"""

from gateway_kit.cache.answer import CachedAnswer, StreamAssembler
from gateway_kit.cache.embedders import Embedder, LocalEmbedder
from gateway_kit.cache.index import IndexEntry, LocalVectorIndex, Match, VectorIndex
from gateway_kit.cache.service import AnswerCache, CacheStats
from gateway_kit.cache.shared import StorageCacheStore, StorageVectorIndex
from gateway_kit.cache.store import CacheKey, CacheStore, LocalCacheStore

__all__ = [
    "AnswerCache",
    "CacheKey",
    "CacheStats",
    "CacheStore",
    "CachedAnswer",
    "Embedder",
    "IndexEntry",
    "LocalCacheStore",
    "LocalEmbedder",
    "LocalVectorIndex",
    "Match",
    "StorageCacheStore",
    "StorageVectorIndex",
    "StreamAssembler",
    "VectorIndex",
]
