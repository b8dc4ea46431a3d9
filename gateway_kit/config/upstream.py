"""Upstream model services and the model names clients may ask for."""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from gateway_kit.config.base import NAME_PATTERN, _Config

__all__ = ["ModelConfig", "PriceConfig", "ProviderConfig"]


class ProviderConfig(_Config):
    """One upstream model service."""

    name: str = Field(pattern=NAME_PATTERN)
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
    #: The HTTP client under the provider. ``auto`` (the default) is aiohttp behind the httpx
    #: API when it is installed (the ``server`` and ``aiohttp`` extras), else httpx: aiohttp
    #: costs about half the CPU per request and has 2-3x the throughput under concurrency.
    transport: Literal["auto", "httpx", "aiohttp"] = "auto"
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

    name: str = Field(pattern=NAME_PATTERN)
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
