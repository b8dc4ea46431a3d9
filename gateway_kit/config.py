"""Configuration: pydantic models, a TOML file, ``GATEWAY_KIT_*`` environment overrides.

``GatewayConfig()`` with no arguments is the offline demo: the built-in mock provider serving
``mock-large`` and ``mock-mini``. ``load_config(path)`` reads a TOML file, applies overrides such
as ``GATEWAY_KIT_SERVER__PORT=9000`` (``__`` separates the levels; list items by index, as in
``GATEWAY_KIT_PROVIDERS__0__BASE_URL``; values are parsed as JSON when they parse, else kept as
strings) and validates. Errors name the file, the field and, for overrides, the variable.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from gateway_kit.exceptions import ConfigError
from gateway_kit.periods import PeriodUnit

ENV_PREFIX = "GATEWAY_KIT_"
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Config):
    """The HTTP side of the standalone gateway."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    #: Request bodies above this many bytes are answered 413.
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)


class ProviderConfig(_Config):
    """One upstream model service."""

    name: str = Field(pattern=_NAME_PATTERN)
    type: Literal["openai", "mock"] = "openai"
    #: The API root (``.../v1``) of an OpenAI-compatible service.
    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    #: Read the API key from this environment variable at load time.
    api_key_env: str | None = None
    #: Extra headers sent upstream (e.g. ``OpenAI-Organization``).
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    #: ``aiohttp`` needs the ``aiohttp`` extra; several times faster under concurrency.
    transport: Literal["httpx", "aiohttp"] = "httpx"
    max_connections: int = Field(default=512, ge=1)
    #: Mock only: seconds between streamed chunks.
    stream_delay_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _read_api_key_env(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("api_key_env") and not data.get("api_key"):
            variable = data["api_key_env"]
            if variable not in os.environ:
                raise ValueError(f"api_key_env: environment variable {variable} is not set")
            data = {**data, "api_key": os.environ[variable]}
        return data

    @model_validator(mode="after")
    def _check_base_url(self) -> ProviderConfig:
        parts = urlsplit(self.base_url)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}")
        return self


class PriceConfig(_Config):
    """A model's price in USD per million tokens, for models the price table does not know."""

    input_usd_per_mtok: Decimal = Field(ge=0)
    output_usd_per_mtok: Decimal = Field(ge=0)
    #: Cached input tokens read; defaults to the input price.
    cache_read_usd_per_mtok: Decimal | None = Field(default=None, ge=0)
    #: Input tokens written to a provider's prompt cache; defaults to the input price.
    cache_write_usd_per_mtok: Decimal | None = Field(default=None, ge=0)


class ModelConfig(_Config):
    """A model name clients may ask for, and where it is served."""

    name: str = Field(pattern=_NAME_PATTERN)
    provider: str
    #: The name the provider knows it by; defaults to ``name``.
    upstream_model: str | None = None
    #: Shown in ``GET /v1/models`` as ``owned_by``; defaults to the provider's name.
    owned_by: str | None = None
    #: Its price, when the price table does not know it (private and self-hosted models).
    price: PriceConfig | None = None
    #: Price it as this model of the price table instead (default: ``upstream_model``).
    price_as: str | None = None
    #: Budget Control's downgrade target: a cheaper model name of this configuration.
    downgrade_to: str | None = None


class StorageConfig(_Config):
    """Where state lives: ``memory://``, ``sqlite:///path`` or ``redis://host:port/db``."""

    #: The standalone gateway's embedded default: a SQLite file in the working directory.
    url: str = "sqlite:///gateway-kit.db"
    #: Redis only: the namespace of every key, so that several gateways can share one server.
    redis_prefix: str = Field(default="gk:", min_length=1, max_length=64)


class PlanConfig(_Config):
    """What a workspace on this plan may use."""

    #: Requests included per quota period.
    included_requests: int = Field(ge=0)
    #: Burst limit: requests per minute, and the size of an instant burst.
    burst_limit_rpm: int = Field(ge=1)
    #: ``block``: 402 once the included requests are used; ``allow``: serve them, marked.
    overage: Literal["block", "allow"] = "block"
    #: The default spend cap per budget period, USD; a workspace may set its own. None: no cap.
    budget_usd: Decimal | None = Field(default=None, ge=0)


def _default_plans() -> dict[str, PlanConfig]:
    return {
        "starter": PlanConfig(included_requests=10_000, burst_limit_rpm=60),
        "scale": PlanConfig(included_requests=1_000_000, burst_limit_rpm=600),
    }


class AuthConfig(_Config):
    """API keys: ``Authorization: Bearer <key>``."""

    mode: Literal["enforce", "off"] = "enforce"
    #: Seconds a verified key is trusted without asking storage again. A key revoked on another
    #: instance (or by the CLI) stops working here within this time; 0 asks storage every time.
    cache_ttl_s: float = Field(default=5.0, ge=0)


class LimitsConfig(_Config):
    """The burst limit and the included requests per period."""

    mode: Literal["enforce", "monitor", "off"] = "enforce"
    period: PeriodUnit = "month"
    #: When storage fails: ``open`` serves the request uncounted, ``closed`` answers 503.
    on_error: Literal["open", "closed"] = "open"


class WebhooksConfig(_Config):
    """Webhook delivery: the schedule, the deadline, the SSRF policy and the worker."""

    #: Attempts per delivery, the first immediate (spec: 5).
    max_attempts: int = Field(default=5, ge=1, le=20)
    #: Seconds before each retry, in order (spec: 1 s, 5 s, 30 s, 5 min, 30 min).
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 30.0, 300.0, 1800.0)
    #: Total deadline of one attempt, connect to status line (spec: 5 s).
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    #: Admit http:// URLs (addresses are still checked). For development only.
    allow_http: bool = False
    #: Operator allow-list past the SSRF guard: CIDRs (``127.0.0.0/8``) or exact host names.
    allow: tuple[str, ...] = ()
    #: Run the delivery worker inside the gateway (``gateway-kit worker`` runs it alone).
    worker: bool = True
    #: Deliveries in flight per worker, and per webhook (one dead endpoint cannot starve
    #: the others).
    concurrency: int = Field(default=32, ge=1, le=1000)
    per_webhook_concurrency: int = Field(default=4, ge=1, le=100)
    #: How often an idle worker looks for due deliveries.
    poll_interval_s: float = Field(default=0.5, gt=0, le=60)
    #: How long a worker owns a claimed delivery; must exceed ``timeout_s``.
    lease_s: float = Field(default=30.0, gt=0)
    max_webhooks_per_workspace: int = Field(default=20, ge=1, le=1000)
    #: Attempts kept in each webhook's delivery log.
    log_size: int = Field(default=1000, ge=10, le=100_000)

    @model_validator(mode="after")
    def _check_schedule(self) -> WebhooksConfig:
        if len(self.retry_backoff_s) < self.max_attempts - 1:
            raise ValueError(
                f"retry_backoff_s needs at least {self.max_attempts - 1} values for "
                f"max_attempts = {self.max_attempts}"
            )
        if any(delay < 0 for delay in self.retry_backoff_s):
            raise ValueError("retry_backoff_s: delays cannot be negative")
        if self.lease_s <= self.timeout_s:
            raise ValueError("lease_s must be longer than timeout_s")
        return self


class PaymentsConfig(_Config):
    """The payment processor's webhook endpoint (``POST /v1/payments/stripe``)."""

    #: The endpoint's signing secret (``whsec_...``) from the Stripe dashboard. Unset: the
    #: endpoint answers 404.
    stripe_webhook_secret: SecretStr | None = None
    #: How old (or how far in the future) a signed event may be, in seconds.
    stripe_tolerance_s: int = Field(default=300, ge=1, le=3600)


class AdminConfig(_Config):
    """The operator API under ``/api/v1/admin`` (wallet top-ups and billing)."""

    #: ``Authorization: Bearer <token>``; unset, the operator API answers 404. Use 32+ random
    #: characters, e.g. from ``GATEWAY_KIT_ADMIN__TOKEN``.
    token: SecretStr | None = Field(default=None)

    @model_validator(mode="after")
    def _check_token(self) -> AdminConfig:
        if self.token is not None and len(self.token.get_secret_value()) < 24:
            raise ValueError("token: use at least 24 random characters")
        return self


class CostConfig(_Config):
    """Cost accounting: the price table's baseline for savings."""

    #: Savings are measured against this model: today's top-tier (flagship) model, priced
    #: from the table (or ``models[].price`` when it is one of ours).
    flagship_model: str = "gpt-5.1"


class BudgetConfig(_Config):
    """Budget Control: spend caps per period with warn, downgrade and block verdicts."""

    mode: Literal["enforce", "monitor", "off"] = "enforce"
    period: PeriodUnit = "month"
    #: Fractions of the cap at which the verdict becomes warn, downgrade and block.
    warn_at: float = Field(default=0.8, gt=0, le=1)
    downgrade_at: float = Field(default=0.9, gt=0, le=1)
    block_at: float = Field(default=1.0, gt=0, le=1)
    #: When storage fails: ``closed`` answers 503 (money is at stake), ``open`` serves uncounted.
    on_error: Literal["open", "closed"] = "closed"
    #: Output tokens assumed for a model before any of its responses has been seen.
    default_output_tokens: int = Field(default=512, ge=1)

    @model_validator(mode="after")
    def _check_order(self) -> BudgetConfig:
        if not self.warn_at <= self.downgrade_at <= self.block_at:
            raise ValueError("thresholds must satisfy warn_at <= downgrade_at <= block_at")
        return self


def _default_providers() -> tuple[ProviderConfig, ...]:
    return (ProviderConfig(name="mock", type="mock"),)


def _default_models() -> tuple[ModelConfig, ...]:
    return (
        # Priced like today's flagship and its small sibling, so the demo shows real figures.
        ModelConfig(
            name="mock-large", provider="mock", price_as="gpt-5.1", downgrade_to="mock-mini"
        ),
        ModelConfig(name="mock-mini", provider="mock", price_as="gpt-5-mini"),
    )


class GatewayConfig(_Config):
    """Everything the gateway is configured with. ``GatewayConfig()`` runs offline."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    providers: tuple[ProviderConfig, ...] = Field(default_factory=_default_providers)
    models: tuple[ModelConfig, ...] = Field(default_factory=_default_models)
    plans: dict[str, PlanConfig] = Field(default_factory=_default_plans)
    #: The plan of workspaces created without one.
    default_plan: str = "starter"
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    payments: PaymentsConfig = Field(default_factory=PaymentsConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)

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
            if model.provider not in provider_names:
                raise ValueError(
                    f"models[{index}].provider: no provider named {model.provider!r} "
                    f"(known: {', '.join(provider_names) or 'none'})"
                )
        model_names = {m.name for m in self.models}
        for index, model in enumerate(self.models):
            if model.downgrade_to is not None and model.downgrade_to not in model_names:
                raise ValueError(
                    f"models[{index}].downgrade_to: no model named {model.downgrade_to!r}"
                )
            if model.downgrade_to == model.name:
                raise ValueError(
                    f"models[{index}].downgrade_to: a model cannot downgrade to itself"
                )
        return self

    @property
    def is_offline(self) -> bool:
        """True when every provider is the built-in mock."""
        return all(p.type == "mock" for p in self.providers)


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what}: the name {name!r} is used twice")
        seen.add(name)


def load_config(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read ``path`` (TOML; ``None`` for the defaults), apply env overrides, validate."""
    environ = os.environ if environ is None else environ
    source = str(path) if path is not None else "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such configuration file") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read the file ({exc.strerror})") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    origins = _apply_overrides(raw, environ, source)
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, origins)) from None


def _apply_overrides(
    raw: dict[str, Any], environ: Mapping[str, str], source: str
) -> dict[str, str]:
    """Apply ``GATEWAY_KIT_A__B=value`` to ``raw``; return {dotted field: variable}."""
    origins: dict[str, str] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or "__" not in variable:
            continue  # e.g. GATEWAY_KIT_API_KEY belongs to the CLI, not the config
        path = variable[len(ENV_PREFIX) :].lower().split("__")
        if not all(path):
            raise ConfigError(f"{variable}: empty part in the variable name")
        _set_path(raw, path, _parse_value(environ[variable]), variable, source)
        origins[".".join(path)] = variable
    return origins


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _set_path(node: Any, path: list[str], value: Any, variable: str, source: str) -> None:
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) > len(node):
                raise ConfigError(
                    f"{variable}: {'.'.join(path[:depth])} in {source} has {len(node)} "
                    f"item(s); {part!r} is not an index"
                )
            index = int(part)
            if index == len(node):
                node.append(value if last else {})
            elif last:
                node[index] = value
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, [] if path[depth + 1].isdigit() else {})
        else:
            raise ConfigError(f"{variable}: {'.'.join(path[:depth])} is not a table")


def _describe(exc: ValidationError, source: str, origins: Mapping[str, str]) -> str:
    lines = [f"{source}: invalid configuration"]
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        origin = origins.get(field)
        suffix = f" (set by {origin})" if origin else ""
        lines.append(f"  {field}: {message}{suffix}")
    return "\n".join(lines)
