"""gateway-kit: an LLM gateway as composable pure-ASGI layers."""

from __future__ import annotations

from gateway_kit.exceptions import (
    ConfigError,
    GatewayError,
    InvalidKeyError,
    ProviderError,
    StorageError,
    UpstreamStreamError,
    UpstreamUnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "GatewayError",
    "InvalidKeyError",
    "ProviderError",
    "StorageError",
    "UpstreamStreamError",
    "UpstreamUnavailableError",
    "__version__",
]
