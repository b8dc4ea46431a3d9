"""gateway-kit: an LLM gateway as composable pure-ASGI layers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway_kit.exceptions import (
    ConfigError,
    GatewayError,
    InvalidKeyError,
    ProviderError,
    StorageError,
    UpstreamStreamError,
    UpstreamUnavailableError,
)
from gateway_kit.storage import (
    ClaimedItem,
    DeadItem,
    Increment,
    IncrManyResult,
    IncrResult,
    MemoryStorage,
    SQLiteStorage,
    Storage,
    Throttle,
    ThrottleResult,
    storage_from_url,
)

if TYPE_CHECKING:
    from gateway_kit.storage.redis import RedisStorage

__version__ = "0.1.0"

__all__ = [
    "ClaimedItem",
    "ConfigError",
    "DeadItem",
    "GatewayError",
    "IncrManyResult",
    "IncrResult",
    "Increment",
    "InvalidKeyError",
    "MemoryStorage",
    "ProviderError",
    "RedisStorage",
    "SQLiteStorage",
    "Storage",
    "StorageError",
    "Throttle",
    "ThrottleResult",
    "UpstreamStreamError",
    "UpstreamUnavailableError",
    "__version__",
    "storage_from_url",
]


def __getattr__(name: str) -> object:
    # RedisStorage needs the ``redis`` extra: imported on first use, not with the package.
    if name == "RedisStorage":
        from gateway_kit.storage.redis import RedisStorage

        return RedisStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
