"""gateway-kit: an LLM gateway as composable pure-ASGI layers.

Mount single layers in front of your own routes, or ``create_app(config)`` for the whole
gateway. See the README for the manual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway_kit._asgi import (
    Principal,
    RequestContext,
    get_context,
)
from gateway_kit.app import (
    create_app,
)
from gateway_kit.config import (
    GatewayConfig,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    load_config,
)
from gateway_kit.events import (
    EVENT_TYPES,
    BudgetAlertData,
    Event,
    EventData,
    EventType,
    GuardianBlockData,
    KeyRotatedData,
    LowBalanceData,
    PaymentFailedData,
    PaymentSucceededData,
    SecurityEventData,
    WebhookStaleData,
    sample_event,
    usd,
)
from gateway_kit.exceptions import (
    ConfigError,
    GatewayError,
    InvalidKeyError,
    InvalidRequestError,
    NotFoundError,
    ProviderError,
    StorageError,
    UnsafeURLError,
    UpstreamStreamError,
    UpstreamUnavailableError,
)
from gateway_kit.gateway import (
    Gateway,
    ModelRoute,
    create_http_client,
)
from gateway_kit.layers.telemetry import (
    TelemetryMiddleware,
)
from gateway_kit.providers.base import (
    ChatCall,
    ChatResponse,
    Provider,
)
from gateway_kit.providers.mock import (
    MockProvider,
)
from gateway_kit.providers.openai import (
    OpenAIProvider,
)
from gateway_kit.proxy import (
    ChatCompletionsEndpoint,
)
from gateway_kit.stack import (
    build_chat_stack,
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
from gateway_kit.webhooks.signing import (
    generate_secret,
    sign,
    verify_signature,
    verify_standard_webhook,
)
from gateway_kit.webhooks.ssrf import (
    SSRFGuard,
)

if TYPE_CHECKING:
    from gateway_kit.storage.redis import RedisStorage

__version__ = "0.1.0"

__all__ = [
    "EVENT_TYPES",
    "BudgetAlertData",
    "ChatCall",
    "ChatCompletionsEndpoint",
    "ChatResponse",
    "ClaimedItem",
    "ConfigError",
    "DeadItem",
    "Event",
    "EventData",
    "EventType",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "GuardianBlockData",
    "IncrManyResult",
    "IncrResult",
    "Increment",
    "InvalidKeyError",
    "InvalidRequestError",
    "KeyRotatedData",
    "LowBalanceData",
    "MemoryStorage",
    "MockProvider",
    "ModelConfig",
    "ModelRoute",
    "NotFoundError",
    "OpenAIProvider",
    "PaymentFailedData",
    "PaymentSucceededData",
    "Principal",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "RedisStorage",
    "RequestContext",
    "SQLiteStorage",
    "SSRFGuard",
    "SecurityEventData",
    "ServerConfig",
    "Storage",
    "StorageError",
    "TelemetryMiddleware",
    "Throttle",
    "ThrottleResult",
    "UnsafeURLError",
    "UpstreamStreamError",
    "UpstreamUnavailableError",
    "WebhookStaleData",
    "__version__",
    "build_chat_stack",
    "create_app",
    "create_http_client",
    "generate_secret",
    "get_context",
    "load_config",
    "sample_event",
    "sign",
    "storage_from_url",
    "usd",
    "verify_signature",
    "verify_standard_webhook",
]


def __getattr__(name: str) -> object:
    # RedisStorage needs the ``redis`` extra: imported on first use, not with the package.
    if name == "RedisStorage":
        from gateway_kit.storage.redis import RedisStorage

        return RedisStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
