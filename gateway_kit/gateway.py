"""``Gateway``: the one async context manager that owns the gateway's resources.

A host application enters it in its lifespan; the standalone app does the same. Layers and
endpoints hold a reference and use its resources at request time.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import httpx

from gateway_kit.config import GatewayConfig, ProviderConfig
from gateway_kit.exceptions import ConfigError, GatewayError
from gateway_kit.providers.base import Provider
from gateway_kit.providers.mock import MockProvider
from gateway_kit.providers.openai import OpenAIProvider


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """Where a public model name is served."""

    name: str
    provider: Provider
    upstream_model: str


def create_http_client(
    *, transport: str = "httpx", max_connections: int = 512
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` tuned for proxying: a pool that keeps every connection alive.

    ``transport="aiohttp"`` keeps the httpx API over aiohttp's faster connection handling
    (needs the ``aiohttp`` extra).
    """
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    if transport == "aiohttp":
        try:
            from httpx_aiohttp import AiohttpTransport
        except ImportError:  # pragma: no cover - depends on the installed extras
            raise ConfigError(
                "transport = 'aiohttp' needs the aiohttp extra: pip install 'gateway-kit[aiohttp]'"
            ) from None
        return httpx.AsyncClient(transport=AiohttpTransport(limits=limits), limits=limits)
    return httpx.AsyncClient(limits=limits)


class Gateway:
    """Owns storage, HTTP clients and providers; enter it before serving requests.

    ``http_client`` (optional) is used for every HTTP provider instead of clients the gateway
    would create; the caller keeps ownership. ``providers`` replaces providers by name, for
    tests and custom integrations.
    """

    def __init__(
        self,
        config: GatewayConfig | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        providers: dict[str, Provider] | None = None,
    ) -> None:
        self.config = config if config is not None else GatewayConfig()
        self._http_client = http_client
        self._provider_overrides = dict(providers or {})
        self._routes: dict[str, ModelRoute] = {}
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise GatewayError("this Gateway is already running")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            providers = {
                spec.name: self._provider_overrides.get(spec.name)
                or await self._open_provider(spec, stack)
                for spec in self.config.providers
            }
            for name, provider in self._provider_overrides.items():
                providers.setdefault(name, provider)
            self._routes = {
                model.name: ModelRoute(
                    model.name, providers[model.provider], model.upstream_model or model.name
                )
                for model in self.config.models
            }
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        self._routes = {}
        if stack is not None:
            await stack.aclose()

    async def _open_provider(self, spec: ProviderConfig, stack: AsyncExitStack) -> Provider:
        provider: Provider
        if spec.type == "mock":
            provider = MockProvider(name=spec.name, delay=spec.stream_delay_s)
        else:
            client = self._http_client
            if client is None:
                client = create_http_client(
                    transport=spec.transport, max_connections=spec.max_connections
                )
                stack.push_async_callback(client.aclose)
            provider = OpenAIProvider(
                client=client,
                base_url=spec.base_url,
                api_key=spec.api_key.get_secret_value() if spec.api_key else None,
                name=spec.name,
                headers=spec.headers,
                timeout=httpx.Timeout(spec.timeout_s, connect=spec.connect_timeout_s),
            )
        stack.push_async_callback(provider.aclose)
        return provider

    @property
    def running(self) -> bool:
        return self._stack is not None

    def route(self, model: str) -> ModelRoute | None:
        """Where ``model`` is served, or ``None`` for an unknown model."""
        return self._routes.get(model)
