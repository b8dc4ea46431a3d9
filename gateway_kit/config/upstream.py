"""Upstream model services and the model names clients may ask for."""

from __future__ import annotations

import os
import re
from decimal import Decimal
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway_kit.config.base import NAME_PATTERN, _Config

__all__ = ["DeploymentConfig", "FaultsConfig", "ModelConfig", "PriceConfig", "ProviderConfig"]

#: RFC 9110's token (a header's name), and a value of printable ASCII, spaces and tabs.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")

#: Where each provider type is served when ``base_url`` is not given.
DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "mock": "https://api.openai.com/v1",  # unused
}


class FaultsConfig(_Config):
    """Faults a mock provider injects, so retries and fallback can be watched offline."""

    #: The share of calls that fail (0 to 1); 1 fails every call.
    error_rate: float = Field(default=0.0, ge=0, le=1)
    #: How a failing call fails: an HTTP status (429 or 5xx), or 0 for a refused connection.
    status: int = Field(default=503)
    #: Seconds every call waits before answering (failing or not).
    latency_s: float = Field(default=0.0, ge=0, le=3600)
    #: Cut every stream after this many events (no end marker): a stream that breaks.
    cut_after_events: int | None = Field(default=None, ge=0)
    #: Seed of the fault draws, so a run is reproducible.
    seed: int = 0

    @model_validator(mode="after")
    def _check_status(self) -> FaultsConfig:
        if self.status not in (0, 408, 429) and not 500 <= self.status <= 599:
            raise ValueError(f"status: must be 0, 408, 429 or 5xx, got {self.status}")
        return self


class ProviderConfig(_Config):
    """One upstream model service."""

    name: str = Field(pattern=NAME_PATTERN)
    #: ``openai`` (any OpenAI-compatible API), ``anthropic`` (the Messages API) or ``mock``.
    type: Literal["openai", "anthropic", "mock"] = "openai"
    #: The API root: ``.../v1`` of an OpenAI-compatible service, ``https://api.anthropic.com``
    #: for Anthropic. Defaults to the official endpoint of ``type``.
    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    #: Read the API key from this environment variable at load time.
    api_key_env: str | None = None
    #: Extra headers sent upstream (e.g. ``OpenAI-Organization``).
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    connect_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    #: The HTTP client under the provider. ``auto`` (the default) is aiohttp behind the httpx
    #: API when it is installed (the ``server`` and ``aiohttp`` extras), else httpx: aiohttp
    #: costs about half the CPU per request and has 2-3x the throughput under concurrency.
    transport: Literal["auto", "httpx", "aiohttp"] = "auto"
    max_connections: int = Field(default=512, ge=1)
    #: Request fields never sent to this provider, for models that refuse them (e.g.
    #: ``["temperature", "top_p"]`` for the newest Claude models); the rest pass through.
    drop_params: tuple[str, ...] = ()
    #: Mock only: seconds between streamed chunks.
    stream_delay_s: float = Field(default=0.0, ge=0, le=60)
    #: Mock only: faults to inject (errors, latency, cut streams).
    faults: FaultsConfig | None = None
    #: Anthropic only: the ``anthropic-version`` header.
    anthropic_version: str = "2023-06-01"
    #: Anthropic only: ``max_tokens`` when the request gives none (the Messages API needs one).
    default_max_tokens: int = Field(default=4096, ge=1)

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        # Checked here, not by the HTTP client on every request (each was a 500).
        for name, value in headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r}: not an HTTP header name (letters, digits, -_.!#...)")
            if not _HEADER_VALUE.fullmatch(value):
                raise ValueError(
                    f"{name}: the value must be printable ASCII (no line break, no control "
                    "character)"
                )
        return headers

    @model_validator(mode="before")
    @classmethod
    def _default_base_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and "base_url" not in data:
            kind = data.get("type", "openai")
            if isinstance(kind, str) and kind in DEFAULT_BASE_URLS:
                data = {**data, "base_url": DEFAULT_BASE_URLS[kind]}
        return data

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
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"base_url: must be an http(s) URL, got {self.base_url!r}")
        try:
            port_ok = parts.port != 0
        except ValueError:  # past 65535, or not a number: no request could ever be sent
            port_ok = False
        if not port_ok:
            raise ValueError(f"base_url: the port must be from 1 to 65535, got {self.base_url!r}")
        for name in self.drop_params:
            if name in ("model", "messages", "input", "stream"):
                raise ValueError(f"drop_params: {name!r} is what the request is, not a parameter")
        if self.faults is not None and self.type != "mock":
            raise ValueError("faults: only a mock provider injects faults")
        return self


class PriceConfig(_Config):
    """A model's price in USD per million tokens, for models the price table does not know."""

    input_usd_per_mtok: Decimal = Field(ge=0)
    output_usd_per_mtok: Decimal = Field(ge=0)
    #: Cached input tokens read; defaults to the input price.
    cache_read_usd_per_mtok: Decimal | None = Field(default=None, ge=0)
    #: Input tokens written to a provider's prompt cache; defaults to the input price.
    cache_write_usd_per_mtok: Decimal | None = Field(default=None, ge=0)


class DeploymentConfig(_Config):
    """One place a model is served: a provider and the name it knows the model by."""

    provider: str
    #: The name the provider knows the model by; defaults to the model's name.
    upstream_model: str | None = None
    #: The share of requests sent here first (relative to the model's other deployments);
    #: 0 makes it a standby, tried only after the weighted ones.
    weight: float = Field(default=1.0, ge=0, le=1_000_000)


class ModelConfig(_Config):
    """A model name clients may ask for, and where it is served.

    A model is served by one provider (``provider``, ``upstream_model``) or by several
    weighted ``deployments``; when every deployment fails, the router tries the models of
    ``fallbacks`` in order (and theirs after them).
    """

    name: str = Field(pattern=NAME_PATTERN)
    #: The provider serving the model (or give ``deployments``).
    provider: str | None = None
    #: The name the provider knows it by; defaults to ``name``.
    upstream_model: str | None = None
    #: Several places serving the model, chosen by weight (instead of ``provider``).
    deployments: tuple[DeploymentConfig, ...] = ()
    #: Other model names to try, in order, when every deployment of this one fails.
    fallbacks: tuple[str, ...] = ()
    #: ``chat`` (``/v1/chat/completions``) or ``embedding`` (``/v1/embeddings``).
    kind: Literal["chat", "embedding"] = "chat"
    #: Shown in ``GET /v1/models`` as ``owned_by``; defaults to the provider's name.
    owned_by: str | None = None
    #: Its price, when the price table does not know it (private and self-hosted models).
    price: PriceConfig | None = None
    #: Price it as this model of the price table instead (default: ``upstream_model``).
    price_as: str | None = None
    #: Budget Control's downgrade target: a cheaper model name of this configuration.
    downgrade_to: str | None = None
    #: Tokens of context (prompt and answer); defaults to what the price table knows.
    context_window: int | None = Field(default=None, ge=1)
    #: What smart routing may send it: tool definitions, JSON/structured output, images.
    supports_tools: bool = True
    supports_json: bool = True
    supports_vision: bool = True

    @model_validator(mode="after")
    def _check_serving(self) -> ModelConfig:
        if (self.provider is None) == (not self.deployments):
            raise ValueError("give either provider or deployments (one of them, not both)")
        if self.deployments and self.upstream_model is not None:
            raise ValueError("upstream_model: give it per deployment when there are deployments")
        if self.deployments and sum(d.weight for d in self.deployments) <= 0:
            raise ValueError("deployments: the weights sum to 0, so none would ever be chosen")
        return self

    @property
    def served_by(self) -> tuple[DeploymentConfig, ...]:
        """The deployments, ``provider``/``upstream_model`` being the one of a simple model."""
        if self.deployments:
            return self.deployments
        assert self.provider is not None
        return (DeploymentConfig(provider=self.provider, upstream_model=self.upstream_model),)
