"""Configuration: pydantic models (unknown keys refused, frozen), a TOML file and
``GATEWAY_KIT_*`` environment overrides.

``GatewayConfig()`` with no arguments is the offline demo: the built-in mock provider serving
``mock-large`` and ``mock-mini``. ``load_config(path)`` reads a file and the environment;
``ENV_VARIABLES`` lists the ``GATEWAY_KIT_*`` variables that are not overrides.
"""

from __future__ import annotations

from gateway_kit.config.accounts import AuthConfig, LimitsConfig, PlanConfig
from gateway_kit.config.base import Mode, OnError
from gateway_kit.config.cache import CacheConfig, SemanticCacheConfig
from gateway_kit.config.environment import ENV_PREFIX, ENV_VARIABLES
from gateway_kit.config.gateway import GatewayConfig
from gateway_kit.config.guardian import GuardianConfig, GuardianRules
from gateway_kit.config.loader import load_config
from gateway_kit.config.money import BudgetConfig, CostConfig, PaymentsConfig
from gateway_kit.config.observe import LogsConfig, MetricsConfig, RequestLogConfig, TracingConfig
from gateway_kit.config.pii import PIIConfig
from gateway_kit.config.routing import AutoModelConfig, ComplexityConfig, RoutingConfig
from gateway_kit.config.server import AdminConfig, ServerConfig, StorageConfig
from gateway_kit.config.upstream import (
    DeploymentConfig,
    FaultsConfig,
    ModelConfig,
    PriceConfig,
    ProviderConfig,
)
from gateway_kit.config.webhooks import WebhooksConfig

__all__ = [
    "ENV_PREFIX",
    "ENV_VARIABLES",
    "AdminConfig",
    "AuthConfig",
    "AutoModelConfig",
    "BudgetConfig",
    "CacheConfig",
    "ComplexityConfig",
    "CostConfig",
    "DeploymentConfig",
    "FaultsConfig",
    "GatewayConfig",
    "GuardianConfig",
    "GuardianRules",
    "LimitsConfig",
    "LogsConfig",
    "MetricsConfig",
    "Mode",
    "ModelConfig",
    "OnError",
    "PIIConfig",
    "PaymentsConfig",
    "PlanConfig",
    "PriceConfig",
    "ProviderConfig",
    "RequestLogConfig",
    "RoutingConfig",
    "SemanticCacheConfig",
    "ServerConfig",
    "StorageConfig",
    "TracingConfig",
    "WebhooksConfig",
    "load_config",
]
