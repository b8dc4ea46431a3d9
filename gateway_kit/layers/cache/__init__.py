"""The answer cache as a layer: ``CacheMiddleware`` (see its module), ``CachePolicy`` (what may
be served from the cache, and the key), ``StoreTransform`` (keeps answers once whole).

The store of answers, purges and counters are the ``gateway_kit.cache`` domain's.
"""

from gateway_kit.layers.cache.middleware import CacheMiddleware
from gateway_kit.layers.cache.policy import CachePolicy, CacheVerdict
from gateway_kit.layers.cache.transform import StoreTransform

__all__ = ["CacheMiddleware", "CachePolicy", "CacheVerdict", "StoreTransform"]
