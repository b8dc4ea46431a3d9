"""gateway-kit: an LLM gateway as composable pure-ASGI layers.

Mount single layers in front of your own routes, or ``create_app(config)`` for the whole
gateway. See the README for the manual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.scopes import ROLES, KeyScope
from gateway_kit.app import (
    create_app,
)
from gateway_kit.chat.endpoint import ChatCompletionsEndpoint, EmbeddingsEndpoint
from gateway_kit.config import (
    AdminConfig,
    AuthConfig,
    AutoModelConfig,
    BudgetConfig,
    ComplexityConfig,
    CostConfig,
    DeploymentConfig,
    FaultsConfig,
    GatewayConfig,
    LimitsConfig,
    LogsConfig,
    MetricsConfig,
    Mode,
    ModelConfig,
    OnError,
    PaymentsConfig,
    PlanConfig,
    PriceConfig,
    ProviderConfig,
    RequestLogConfig,
    RoutingConfig,
    ServerConfig,
    StorageConfig,
    TracingConfig,
    WebhooksConfig,
    load_config,
)
from gateway_kit.cost.costs import Costs, RequestCost
from gateway_kit.cost.pricing import ModelPrice, PriceTable
from gateway_kit.cost.tokens import OutputEstimator, estimate_prompt_tokens, estimate_text_tokens
from gateway_kit.cost.usage import Usage
from gateway_kit.events.models import (
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
    SignatureError,
    StorageError,
    UnsafeURLError,
    UpstreamStreamError,
    UpstreamUnavailableError,
)
from gateway_kit.gateway import (
    Gateway,
    create_http_client,
)
from gateway_kit.layers.auth import (
    AuthMiddleware,
    AuthPolicy,
    AuthVerdict,
)
from gateway_kit.layers.budget import (
    BudgetMiddleware,
    BudgetPolicy,
    BudgetVerdict,
)
from gateway_kit.layers.limits import (
    LimitsMiddleware,
    LimitsPolicy,
    LimitsVerdict,
)
from gateway_kit.layers.observe import ObserveMiddleware
from gateway_kit.layers.telemetry import (
    TelemetryMiddleware,
)
from gateway_kit.observe import JSONFormatter, RequestLog, RequestRecord
from gateway_kit.payments import (
    PaymentNotice,
    parse_payment,
    sign_stripe_payload,
    verify_stripe_event,
)
from gateway_kit.pipeline import (
    Amend,
    Contribution,
    JSONBody,
    Participant,
    PolicyLayer,
    Refusal,
    RequestContext,
    ResponseTransform,
    Settlement,
    Verdict,
    get_context,
)
from gateway_kit.providers.anthropic import AnthropicProvider
from gateway_kit.providers.base import (
    ChatCall,
    ChatResponse,
    EmbeddingsCall,
    EmbeddingsProvider,
    Provider,
)
from gateway_kit.providers.mock import (
    MockProvider,
)
from gateway_kit.providers.openai import (
    OpenAIProvider,
)
from gateway_kit.routing import (
    AutoSelector,
    ModelRoute,
    ModelTable,
    Routed,
    Router,
    RoutingFailed,
)
from gateway_kit.sse import (
    SSEEvent,
    SSEParser,
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
    LogEntry,
    MemoryStorage,
    QueueSize,
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
    "ROLES",
    "AdminConfig",
    "Amend",
    "AnthropicProvider",
    "AuthConfig",
    "AuthMiddleware",
    "AuthPolicy",
    "AuthVerdict",
    "AutoModelConfig",
    "AutoSelector",
    "BudgetAlertData",
    "BudgetConfig",
    "BudgetMiddleware",
    "BudgetPolicy",
    "BudgetVerdict",
    "ChatCall",
    "ChatCompletionsEndpoint",
    "ChatResponse",
    "ClaimedItem",
    "ComplexityConfig",
    "ConfigError",
    "Contribution",
    "CostConfig",
    "Costs",
    "DeadItem",
    "DeploymentConfig",
    "EmbeddingsCall",
    "EmbeddingsEndpoint",
    "EmbeddingsProvider",
    "Event",
    "EventData",
    "EventType",
    "FaultsConfig",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "GuardianBlockData",
    "IncrManyResult",
    "IncrResult",
    "Increment",
    "InvalidKeyError",
    "InvalidRequestError",
    "JSONBody",
    "JSONFormatter",
    "KeyRotatedData",
    "KeyScope",
    "LimitsConfig",
    "LimitsMiddleware",
    "LimitsPolicy",
    "LimitsVerdict",
    "LogEntry",
    "LogsConfig",
    "LowBalanceData",
    "MemoryStorage",
    "MetricsConfig",
    "MockProvider",
    "Mode",
    "ModelConfig",
    "ModelPrice",
    "ModelRoute",
    "ModelTable",
    "NotFoundError",
    "ObserveMiddleware",
    "OnError",
    "OpenAIProvider",
    "OutputEstimator",
    "Participant",
    "PaymentFailedData",
    "PaymentNotice",
    "PaymentSucceededData",
    "PaymentsConfig",
    "PlanConfig",
    "PolicyLayer",
    "PriceConfig",
    "PriceTable",
    "Principal",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "QueueSize",
    "RedisStorage",
    "Refusal",
    "RequestContext",
    "RequestCost",
    "RequestLog",
    "RequestLogConfig",
    "RequestRecord",
    "ResponseTransform",
    "Routed",
    "Router",
    "RoutingConfig",
    "RoutingFailed",
    "SQLiteStorage",
    "SSEEvent",
    "SSEParser",
    "SSRFGuard",
    "SecurityEventData",
    "ServerConfig",
    "Settlement",
    "SignatureError",
    "Storage",
    "StorageConfig",
    "StorageError",
    "TelemetryMiddleware",
    "Throttle",
    "ThrottleResult",
    "TracingConfig",
    "UnsafeURLError",
    "UpstreamStreamError",
    "UpstreamUnavailableError",
    "Usage",
    "Verdict",
    "WebhookStaleData",
    "WebhooksConfig",
    "__version__",
    "build_chat_stack",
    "create_app",
    "create_http_client",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "generate_secret",
    "get_context",
    "load_config",
    "parse_payment",
    "sample_event",
    "sign",
    "sign_stripe_payload",
    "storage_from_url",
    "usd",
    "verify_signature",
    "verify_standard_webhook",
    "verify_stripe_event",
]


def __getattr__(name: str) -> object:
    # RedisStorage needs the ``redis`` extra: imported on first use, not with the package.
    if name == "RedisStorage":
        from gateway_kit.storage.redis import RedisStorage

        return RedisStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
