"""``Gateway``: the one async context manager that owns the gateway's resources.

A host application enters it in its lifespan; the standalone app does the same. Layers and
endpoints hold a reference and use its resources at request time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import anyio
import httpx

from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.accounts.guardian import GuardianSettingsStore
from gateway_kit.accounts.keys import Keys
from gateway_kit.accounts.pii import PIISettingsStore
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.accounts.spend import Ledger
from gateway_kit.accounts.wallet import Wallet
from gateway_kit.accounts.workspaces import Workspaces
from gateway_kit.cache.service import AnswerCache
from gateway_kit.config import GatewayConfig, ProviderConfig
from gateway_kit.config.gateway import deployment_places
from gateway_kit.cost.costs import Costs
from gateway_kit.cost.tokenizer import TokenCounter
from gateway_kit.events.bus import EventBus
from gateway_kit.exceptions import ConfigError, GatewayError, MissingExtraError, StorageError
from gateway_kit.observe.events import EventLog
from gateway_kit.observe.logs import RequestLines
from gateway_kit.observe.metrics import Metrics
from gateway_kit.observe.observer import Observer
from gateway_kit.observe.requestlog import RequestLog
from gateway_kit.observe.tracing import TracedStorage, Tracing
from gateway_kit.observe.usage import UsageTotals
from gateway_kit.providers.base import EmbeddingsProvider, Provider
from gateway_kit.providers.mock import MockProvider
from gateway_kit.providers.openai import OpenAIProvider
from gateway_kit.routing import AutoSelector, Cooldowns, ModelRoute, ModelTable, Router
from gateway_kit.storage import Storage, storage_from_url
from gateway_kit.webhooks.emitter import QUEUE as DELIVERY_QUEUE
from gateway_kit.webhooks.emitter import WebhookEmitter
from gateway_kit.webhooks.ssrf import SSRFGuard, guarded_client
from gateway_kit.webhooks.store import WebhookStore
from gateway_kit.webhooks.worker import DeliveryWorker

_T = TypeVar("_T")


def create_http_client(*, transport: str = "auto", max_connections: int = 512) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` tuned for proxying: a pool that keeps every connection alive.

    ``transport="aiohttp"`` keeps the httpx API over aiohttp's faster connection handling
    (needs the ``aiohttp`` extra, part of ``server``: ``MissingExtraError`` without it);
    ``"auto"`` takes it when it is installed and httpx's own pool otherwise.
    """
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    if transport in ("aiohttp", "auto"):
        try:
            from httpx_aiohttp import AiohttpTransport
        except ImportError as exc:
            if transport == "auto":
                return httpx.AsyncClient(limits=limits)
            module = (exc.name or "httpx_aiohttp").partition(".")[0]
            raise MissingExtraError(
                "transport", "'aiohttp'", extra="aiohttp", module=module
            ) from None
        return httpx.AsyncClient(transport=AiohttpTransport(limits=limits), limits=limits)
    return httpx.AsyncClient(limits=limits)


#: The provider types (``ProviderConfig.type``) that serve ``POST /v1/embeddings``.
_EMBEDDING_TYPES = frozenset({"openai", "mock"})


def _model_names(config: GatewayConfig) -> list[str]:
    """The model names clients may ask for: the configured models and the ``auto`` ones."""
    return [m.name for m in config.models] + [auto.name for auto in config.routing.auto]


def _running(resource: _T | None) -> _T:
    """A resource of a running ``Gateway``; a clear error before it is entered."""
    if resource is None:
        raise GatewayError("the Gateway is not running: enter it first (async with gateway)")
    return resource


class Gateway:
    """Owns storage, HTTP clients and providers; enter it before serving requests.

    ``storage`` (optional) replaces the backend ``config.storage.url`` names; ``http_client``
    is used for every HTTP provider instead of clients the gateway would create; the caller
    keeps ownership of both. ``providers`` replaces providers by name, for tests and custom
    integrations. ``events`` is the bus layers publish to; subscribe before or after entering.
    ``clock`` (Unix seconds) decides quota periods; tests pass the fake clock they give storage.
    It also times the webhook worker (``webhook_worker``) and the account caches' change feed
    (their freshness and polls; the real clock's monotonic twin when it is ``time.time``), and
    their waits too if it is a ``Clock`` such as ``gateway_kit.testing.FakeClock``.
    ``run_worker`` (default ``config.webhooks.worker``) runs a webhook delivery worker inside;
    one-off commands pass ``False`` and leave deliveries to the serving processes.
    ``ssrf_guard`` replaces the guard built from ``config.webhooks`` (e.g. with a resolver).
    ``tracer`` (an OpenTelemetry ``Tracer``) turns spans on with it, whatever
    ``tracing.enabled`` says.
    """

    def __init__(
        self,
        config: GatewayConfig | None = None,
        *,
        storage: Storage | None = None,
        http_client: httpx.AsyncClient | None = None,
        providers: dict[str, Provider] | None = None,
        clock: Callable[[], float] = time.time,
        run_worker: bool | None = None,
        ssrf_guard: SSRFGuard | None = None,
        tracer: Any = None,
    ) -> None:
        self.config = config if config is not None else GatewayConfig()
        #: OpenTelemetry spans (``tracing.enabled``, or a ``tracer`` given: an OpenTelemetry
        #: ``Tracer``, for tests and hosts that keep their own provider).
        self.tracing = Tracing(self.config.tracing, tracer=tracer)
        self.events = EventBus()
        self.clock = clock
        self._run_worker = self.config.webhooks.worker if run_worker is None else run_worker
        hooks = self.config.webhooks
        self.costs = Costs(self.config)
        #: Exact prompt tokens for OpenAI models (offline, ``tokens`` extra), else estimates.
        self.tokens = TokenCounter(self.config)
        self.ssrf_guard = ssrf_guard or SSRFGuard(allow_http=hooks.allow_http, allow=hooks.allow)
        self._injected_storage = storage
        self._storage: Storage | None = None
        self._http_client = http_client
        self._provider_overrides = dict(providers or {})
        self._check_embeddings_by_type()
        self._table: ModelTable | None = None
        self._router: Router | None = None
        #: The ``auto`` models of smart routing, by name.
        self.auto = {
            auto.name: AutoSelector(auto, {m.name: m for m in self.config.models}, self.costs)
            for auto in self.config.routing.auto
        }
        self._workspaces: Workspaces | None = None
        self._keys: Keys | None = None
        self._ledger: Ledger | None = None
        self._wallet: Wallet | None = None
        self._guardian_settings: GuardianSettingsStore | None = None
        self._pii_settings: PIISettingsStore | None = None
        self._cache: AnswerCache | None = None
        self._observer: Observer | None = None
        #: Request records dropped by the request logs of earlier starts.
        self._records_dropped = 0
        self._event_log: EventLog | None = None
        #: ``/metrics``' figures (``None`` unless ``metrics.enabled``); they outlive restarts
        #: of the ``Gateway`` as a process's counters do.
        self.metrics = self._metrics_of(self.config)
        self._webhooks: WebhookStore | None = None
        self._webhook_client: httpx.AsyncClient | None = None
        self._webhook_worker: DeliveryWorker | None = None
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise GatewayError("this Gateway is already running")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            storage = self._injected_storage
            if storage is None:
                url = self.config.storage.url
                try:
                    storage = storage_from_url(url, redis_prefix=self.config.storage.redis_prefix)
                except ValueError as exc:
                    raise ConfigError(f"storage.url: {exc}") from None
                await stack.enter_async_context(storage)
            if self.tracing.enabled:
                storage = cast(Storage, TracedStorage(storage, self.tracing))
            self._storage = storage
            # Freshness is timed on a monotonic clock; a test's fake clock drives it instead.
            cache_clock = time.monotonic if self.clock is time.time else self.clock
            cache_ttl = self.config.auth.cache_ttl_s
            changes = ChangeFeed(storage, cache_ttl=cache_ttl, clock=cache_clock)
            self._workspaces = Workspaces(storage, self.config, changes=changes)
            self._keys = Keys(
                storage,
                self.events,
                changes=changes,
                unscoped=ROLES[self.config.auth.unscoped_keys],
            )
            self._ledger = Ledger(storage, changes=changes)
            self._wallet = Wallet(storage, self.events, changes=changes)
            self._guardian_settings = GuardianSettingsStore(storage, changes=changes)
            self._pii_settings = PIISettingsStore(storage, changes=changes)
            self._cache = AnswerCache(storage, changes, self.config.cache, local_clock=cache_clock)
            await self._cache.start()
            # Polls the change feed: cached keys, plans, caps and billing stay current, and
            # purges of the answer cache made elsewhere arrive. And writes the answer
            # cache's counters once a second (and at exit).
            feed_tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(feed_tasks.cancel_scope.cancel)  # runs first on exit
            await feed_tasks.start(changes.run)
            await feed_tasks.start(self._cache.counters.run)
            self._observer = observer = self._observe(storage)
            self._event_log = event_log = EventLog(storage)
            stack.callback(self.events.subscribe(event_log))
            # Writes the request log's records (and at exit: the requests are over by then).
            await feed_tasks.start(observer.requests.run)
            await self._start_webhooks(storage, stack)
            providers = {
                spec.name: self._provider_overrides.get(spec.name)
                or await self._open_provider(spec, stack)
                for spec in self.config.providers
            }
            for name, provider in self._provider_overrides.items():
                providers.setdefault(name, provider)
            self._check_embeddings(providers)
            routing = self.config.routing
            self._table = table = ModelTable(self.config, providers)
            cooldowns = Cooldowns(storage, routing, clock=self.clock)
            # Keeps every deployment's health current, off the request path.
            health_tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(health_tasks.cancel_scope.cancel)  # runs first on exit
            await health_tasks.start(cooldowns.run, table.deployment_keys)
            self._router = Router(table, cooldowns, routing, clock=self.clock)
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
        observer = self._observer
        self._table = self._router = None
        self._storage = self._workspaces = self._keys = self._webhooks = None
        self._ledger = self._wallet = self._guardian_settings = None
        self._pii_settings = self._cache = self._observer = self._event_log = None
        self._webhook_client = self._webhook_worker = None
        if stack is not None:
            await stack.aclose()
        if observer is not None:  # its last records are written by now (or dropped)
            self._records_dropped += observer.requests.dropped

    async def _start_webhooks(self, storage: Storage, stack: AsyncExitStack) -> None:
        hooks = self.config.webhooks
        store = WebhookStore(
            storage, max_per_workspace=hooks.max_webhooks_per_workspace, log_size=hooks.log_size
        )
        client = guarded_client(self.ssrf_guard, timeout=hooks.timeout_s)
        stack.push_async_callback(client.aclose)
        self._webhooks, self._webhook_client = store, client
        worker = None
        if self._run_worker:
            worker = DeliveryWorker(
                storage=storage,
                store=store,
                client=client,
                events=self.events,
                config=hooks,
                clock=self.clock,
                on_attempt=self.metrics.webhook_attempt if self.metrics is not None else None,
            )
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)  # runs first on exit (last in, first out)
            await tasks.start(worker.run)
            self._webhook_worker = worker
        emitter = WebhookEmitter(store, storage, on_queued=worker.wake if worker else None)
        stack.callback(self.events.subscribe(emitter))

    @staticmethod
    def _metrics_of(config: GatewayConfig) -> Metrics | None:
        if not config.metrics.enabled:
            return None
        return Metrics(
            config.metrics,
            models=_model_names(config),
            providers=[p.name for p in config.providers],
        )

    def _observe(self, storage: Storage) -> Observer:
        config = self.config
        usage = UsageTotals(
            storage,
            config.request_log,
            clock=self.clock,
            models=_model_names(config),
        )
        requests = RequestLog(storage, config.request_log, clock=self.clock, usage=usage)
        metrics = self.metrics
        if metrics is not None:
            metrics.read_at_scrape(
                "gateway_request_log_pending",
                "gauge",
                "Request records not written to the storage yet.",
                (),
                lambda: {(): requests.pending},
            )

            async def queue() -> dict[object, float]:
                size = await storage.queue_size(DELIVERY_QUEUE)
                return {"waiting": size.waiting, "leased": size.leased, "dead": size.dead}

            metrics.read_before_scrape(
                "gateway_webhook_queue_depth",
                "gauge",
                "Webhook deliveries in the queue, by state (dead: held for a replay).",
                ("state",),
                queue,
            )
            metrics.read_at_scrape(
                "gateway_storage_errors",
                "counter",
                "Storage operations that failed in this process.",
                (),
                lambda: {(): StorageError.raised},
            )
            # A counter outlives the gateway's restarts: each start's log counts from 0.
            carried = self._records_dropped
            metrics.read_at_scrape(
                "gateway_request_log_dropped",
                "counter",
                "Request records dropped: the storage could not take them for too long.",
                (),
                lambda: {(): carried + requests.dropped},
            )
        return Observer(requests, lines=RequestLines(config.logs), metrics=metrics)

    def _check_embeddings_by_type(self) -> None:
        """An embedding model on a provider type without embeddings, refused when the gateway
        is made: at its start it was inside a server's lifespan, a traceback. Providers given
        in code are checked at the start (``_check_embeddings``)."""
        types = {spec.name: spec.type for spec in self.config.providers}
        for index, model in enumerate(self.config.models):
            if model.kind != "embedding":
                continue
            for place, deployment in deployment_places(index, model):
                name = deployment.provider
                if name not in self._provider_overrides and types[name] not in _EMBEDDING_TYPES:
                    raise ConfigError(
                        f"{place}.provider: provider {name!r} ({types[name]}) does not serve "
                        "embeddings (an openai-compatible or mock provider does)"
                    )

    def _check_embeddings(self, providers: dict[str, Provider]) -> None:
        for index, model in enumerate(self.config.models):
            if model.kind != "embedding":
                continue
            for deployment in model.served_by:
                if not isinstance(providers[deployment.provider], EmbeddingsProvider):
                    raise ConfigError(
                        f"models[{index}]: provider {deployment.provider!r} does not serve "
                        "embeddings (an openai-compatible or mock provider does)"
                    )

    async def _open_provider(self, spec: ProviderConfig, stack: AsyncExitStack) -> Provider:
        provider: Provider
        if spec.type == "mock":
            provider = MockProvider(name=spec.name, delay=spec.stream_delay_s, faults=spec.faults)
        else:
            client = self._http_client
            if client is None:
                client = create_http_client(
                    transport=spec.transport, max_connections=spec.max_connections
                )
                stack.push_async_callback(client.aclose)
            api_key = spec.api_key.get_secret_value() if spec.api_key else None
            timeout = httpx.Timeout(spec.timeout_s, connect=spec.connect_timeout_s)
            if spec.type == "anthropic":
                from gateway_kit.providers.anthropic import AnthropicProvider

                provider = AnthropicProvider(
                    client=client,
                    base_url=spec.base_url,
                    api_key=api_key,
                    name=spec.name,
                    headers=spec.headers,
                    timeout=timeout,
                    version=spec.anthropic_version,
                    default_max_tokens=spec.default_max_tokens,
                )
            else:
                provider = OpenAIProvider(
                    client=client,
                    base_url=spec.base_url,
                    api_key=api_key,
                    name=spec.name,
                    headers=spec.headers,
                    timeout=timeout,
                )
        stack.push_async_callback(provider.aclose)
        return provider

    @property
    def running(self) -> bool:
        return self._stack is not None

    @property
    def storage(self) -> Storage:
        return _running(self._storage)

    @property
    def workspaces(self) -> Workspaces:
        return _running(self._workspaces)

    @property
    def ledger(self) -> Ledger:
        """The spend ledger: budget reservations, settlements, savings."""
        return _running(self._ledger)

    @property
    def guardian_settings(self) -> GuardianSettingsStore:
        """Workspaces' Guardian settings: their keys' thresholds and allow-lists."""
        return _running(self._guardian_settings)

    @property
    def pii_settings(self) -> PIISettingsStore:
        """Workspaces' PII masking settings: their own patterns and allow-lists."""
        return _running(self._pii_settings)

    @property
    def cache(self) -> AnswerCache:
        """The answer cache: its store (this process's), purges, and per-workspace counts."""
        return _running(self._cache)

    @property
    def observer(self) -> Observer:
        """Where finished requests go: the request log, the metrics, the log lines."""
        return _running(self._observer)

    @property
    def event_log(self) -> EventLog:
        """Each workspace's recent events (``GET .../events``, the dashboard)."""
        return _running(self._event_log)

    @property
    def requests(self) -> RequestLog:
        """The request log: a record per chat and embeddings request, and usage totals."""
        return self.observer.requests

    @property
    def wallet(self) -> Wallet:
        """Workspaces' prepaid balances: credits, the billing switch, low-balance alerts."""
        return _running(self._wallet)

    @property
    def webhooks(self) -> WebhookStore:
        return _running(self._webhooks)

    @property
    def webhook_client(self) -> httpx.AsyncClient:
        """The SSRF-guarded client deliveries (and test sends) go through."""
        return _running(self._webhook_client)

    @property
    def webhook_worker(self) -> DeliveryWorker | None:
        """The delivery worker running inside; ``None`` with ``run_worker=False``."""
        if self._stack is None:
            raise GatewayError("the Gateway is not running: enter it first (async with gateway)")
        return self._webhook_worker

    @property
    def keys(self) -> Keys:
        return _running(self._keys)

    @property
    def models(self) -> ModelTable:
        """The model table: which models exist, where they are served, their fallbacks."""
        return _running(self._table)

    @property
    def router(self) -> Router:
        """Calls a model's deployments with retries, fallback and cooldown."""
        return _running(self._router)

    def route(self, model: str) -> ModelRoute | None:
        """Where ``model`` is served, or ``None`` for an unknown model (``models.resolve``)."""
        table = self._table
        return table.resolve(model) if table is not None else None
