"""``GatewayConfig``: everything the gateway is configured with, checked as a whole."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gateway_kit.config.accounts import AuthConfig, LimitsConfig, PlanConfig, default_plans
from gateway_kit.config.base import _Config
from gateway_kit.config.cache import CacheConfig, SemanticCacheConfig
from gateway_kit.config.guardian import GuardianConfig, merge_rules
from gateway_kit.config.money import BudgetConfig, CostConfig, PaymentsConfig
from gateway_kit.config.observe import LogsConfig, MetricsConfig, RequestLogConfig, TracingConfig
from gateway_kit.config.pii import PIIConfig
from gateway_kit.config.routing import AutoModelConfig, ComplexityConfig, RoutingConfig
from gateway_kit.config.server import AdminConfig, ServerConfig, StorageConfig
from gateway_kit.config.upstream import (
    DeploymentConfig,
    FaultsConfig,
    ModelConfig,
    ProviderConfig,
)
from gateway_kit.config.webhooks import WebhooksConfig

__all__ = ["GatewayConfig", "deployment_places"]


def _default_providers() -> tuple[ProviderConfig, ...]:
    return (
        ProviderConfig(name="mock", type="mock"),
        # Fails half its calls with a 503: the demo's fallback chain, to watch it work.
        ProviderConfig(
            name="mock-flaky", type="mock", faults=FaultsConfig(error_rate=0.5, status=503)
        ),
    )


def _default_models() -> tuple[ModelConfig, ...]:
    return (
        # Priced like today's flagship and its small sibling, so the demo shows real figures.
        ModelConfig(
            name="mock-large", provider="mock", price_as="gpt-5.1", downgrade_to="mock-mini"
        ),
        ModelConfig(
            name="mock-mini",
            provider="mock",
            price_as="gpt-5-mini",
            context_window=16_000,
            supports_vision=False,
        ),
        # Served by the flaky provider; what it cannot serve, mock-large does.
        ModelConfig(
            name="mock-flaky",
            provider="mock-flaky",
            price_as="gpt-5.1",
            fallbacks=("mock-large",),
        ),
        ModelConfig(
            name="mock-embed", provider="mock", kind="embedding", price_as="text-embedding-3-small"
        ),
    )


def _default_routing() -> RoutingConfig:
    # `auto`: the cheapest demo model that can serve the request; hard prompts go large.
    complexity = ComplexityConfig(
        min_prompt_tokens=4000,
        patterns=(r"\bprove\b", r"step[- ]by[- ]step", r"\barchitecture\b"),
        models=("mock-large",),
    )
    return RoutingConfig(
        auto=(
            AutoModelConfig(name="auto", models=("mock-mini", "mock-large"), complexity=complexity),
        )
    )


class GatewayConfig(_Config):
    """Everything the gateway is configured with. ``GatewayConfig()`` runs offline."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    providers: tuple[ProviderConfig, ...] = Field(default_factory=_default_providers)
    models: tuple[ModelConfig, ...] = Field(default_factory=_default_models)
    plans: dict[str, PlanConfig] = Field(default_factory=default_plans)
    #: The plan of workspaces created without one.
    default_plan: str = "starter"
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    payments: PaymentsConfig = Field(default_factory=PaymentsConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    guardian: GuardianConfig = Field(default_factory=GuardianConfig)
    pii: PIIConfig = Field(default_factory=PIIConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    request_log: RequestLogConfig = Field(default_factory=RequestLogConfig)
    logs: LogsConfig = Field(default_factory=LogsConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    #: Retries, fallback and cooldown; the offline demo (no ``models`` given) adds ``auto``.
    routing: RoutingConfig = Field(default_factory=RoutingConfig)

    @model_validator(mode="before")
    @classmethod
    def _demo_routing(cls, data: Any) -> Any:
        # The demo's `auto` model picks among the demo's models: only with them.
        if isinstance(data, dict) and "models" not in data and "routing" not in data:
            data = {**data, "routing": _default_routing()}
        return data

    @model_validator(mode="after")
    def _check_references(self) -> GatewayConfig:
        provider_names = [p.name for p in self.providers]
        _unique("providers", provider_names)
        _unique("models", [m.name for m in self.models])
        if self.default_plan not in self.plans:
            raise ValueError(
                f"default_plan: no plan named {self.default_plan!r} "
                f"(known: {', '.join(self.plans) or 'none'})"
            )
        for index, model in enumerate(self.models):
            for place, deployment in deployment_places(index, model):
                if deployment.provider not in provider_names:
                    raise ValueError(
                        f"{place}.provider: no provider named {deployment.provider!r} "
                        f"(known: {', '.join(provider_names) or 'none'})"
                    )
        models = {m.name: m for m in self.models}
        for index, model in enumerate(self.models):
            if model.downgrade_to is not None and model.downgrade_to not in models:
                raise ValueError(
                    f"models[{index}].downgrade_to: no model named {model.downgrade_to!r}"
                )
            if model.downgrade_to == model.name:
                raise ValueError(
                    f"models[{index}].downgrade_to: a model cannot downgrade to itself"
                )
            for fallback in model.fallbacks:
                target = models.get(fallback)
                if target is None:
                    raise ValueError(f"models[{index}].fallbacks: no model named {fallback!r}")
                if target.kind != model.kind:
                    raise ValueError(
                        f"models[{index}].fallbacks: {fallback!r} is a {target.kind} model, "
                        f"{model.name!r} a {model.kind} model"
                    )
            cycle = _fallback_cycle(model.name, models)
            if cycle:
                raise ValueError(f"models[{index}].fallbacks: a cycle: {' -> '.join(cycle)}")
        _check_auto(self.routing, models)
        _check_semantic(self.cache.semantic, models)
        for name, plan in self.plans.items():
            if plan.guardian:
                try:
                    merge_rules(self.guardian.rules, plan.guardian)
                except ValueError as exc:
                    raise ValueError(f"plans.{name}.guardian.{exc}") from None
        return self

    @property
    def is_offline(self) -> bool:
        """True when every provider is the built-in mock."""
        return all(p.type == "mock" for p in self.providers)


def _check_semantic(semantic: SemanticCacheConfig, models: dict[str, ModelConfig]) -> None:
    for name in semantic.models:
        if name != "*" and (name not in models or models[name].kind != "chat"):
            raise ValueError(f"cache.semantic.models: no chat model named {name!r}")
    if semantic.embedder != "local":
        model = models.get(semantic.embedder)
        if model is None or model.kind != "embedding":
            raise ValueError(
                f"cache.semantic.embedder: 'local' or an embedding model's name, not "
                f"{semantic.embedder!r}"
            )


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what}: the name {name!r} is used twice")
        seen.add(name)


def deployment_places(index: int, model: ModelConfig) -> list[tuple[str, DeploymentConfig]]:
    """Each deployment with where the configuration gives it, for error messages."""
    if model.deployments:
        return [(f"models[{index}].deployments[{i}]", d) for i, d in enumerate(model.deployments)]
    return [(f"models[{index}]", model.served_by[0])]


def _fallback_cycle(start: str, models: dict[str, ModelConfig]) -> list[str]:
    """A fallback path from ``start`` back to a model already on it, or ``[]``."""
    path: list[str] = []

    def visit(name: str) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        model = models.get(name)
        if model is None:
            return []
        path.append(name)
        for fallback in model.fallbacks:
            found = visit(fallback)
            if found:
                return found
        path.pop()
        return []

    return visit(start)


def _check_auto(routing: RoutingConfig, models: dict[str, ModelConfig]) -> None:
    seen: set[str] = set()
    for index, auto in enumerate(routing.auto):
        place = f"routing.auto[{index}]"
        if auto.name in models:
            raise ValueError(f"{place}.name: {auto.name!r} is also a model's name")
        if auto.name in seen:
            raise ValueError(f"{place}.name: the name {auto.name!r} is used twice")
        seen.add(auto.name)
        lists = [("models", auto.models)]
        if auto.complexity is not None:
            lists.append(("complexity.models", auto.complexity.models))
        for field, names in lists:
            for name in names:
                model = models.get(name)
                if model is None:
                    raise ValueError(f"{place}.{field}: no model named {name!r}")
                if model.kind != "chat":
                    raise ValueError(f"{place}.{field}: {name!r} is not a chat model")
