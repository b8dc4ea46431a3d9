"""Storage round trips per request: one before the upstream call for Auth + Limits + Guardian +
Budget together with a warm key, one after it to settle, and still one as later layers join.

Every ``Storage`` operation is atomic and is one round trip (one script on Redis, one
transaction on SQLite); the counting subclass records the top-level operations each request
makes, on every backend.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway_kit import (
    Gateway,
    GatewayConfig,
    MemoryStorage,
    SQLiteStorage,
    TelemetryMiddleware,
)
from gateway_kit._asgi import ASGIApp, Receive, Scope, Send
from gateway_kit.chat.endpoint import ChatCompletionsEndpoint
from gateway_kit.layers.auth import AuthMiddleware
from gateway_kit.layers.budget import BudgetMiddleware
from gateway_kit.layers.guardian import GuardianMiddleware
from gateway_kit.layers.limits import LimitsMiddleware
from gateway_kit.pipeline.admission import Amend, Contribution, Settlement
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.layer import PolicyLayer
from gateway_kit.pipeline.verdicts import Refusal, Verdict
from gateway_kit.storage import Increment, IncrManyResult, Storage
from gateway_kit.testing import ASGIRecorder, FakeClock
from tests.fakes import COMPLETION

pytestmark = pytest.mark.anyio

OPERATIONS = (
    "get", "set", "delete", "cas", "incr", "incr_many", "throttle", "map_set", "map_get",
    "map_delete", "map_items", "log_append", "log_range", "enqueue", "claim", "ack", "retry",
    "dead", "dead_items", "requeue", "discard", "now",
)  # fmt: skip
_NESTED = contextvars.ContextVar("nested", default=False)


def counting(base: type[Any]) -> type[Any]:
    """``base`` recording each top-level operation (one inside another is not a round trip)."""

    def wrap(name: str) -> Callable[..., Any]:
        inner = getattr(base, name)

        async def op(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _NESTED.get():
                return await inner(self, *args, **kwargs)
            self.calls.append((name, args[0] if args else None))
            token = _NESTED.set(True)
            try:
                return await inner(self, *args, **kwargs)
            finally:
                _NESTED.reset(token)

        return op

    namespace: dict[str, Any] = {name: wrap(name) for name in OPERATIONS}
    cls = type(f"Counting{base.__name__}", (base,), namespace)
    cls.calls = []
    return cls


class ToyWindow(PolicyLayer):
    """A later layer with state: a per-key counter (limited) and a read, in the same step."""

    def __init__(self, app: ASGIApp, *, gateway: Gateway) -> None:
        super().__init__(app)
        self._gateway = gateway

    @property
    def storage(self) -> Storage:
        return self._gateway.storage

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        if ctx.principal is not None:
            ctx.admission.join(_ToyStep(ctx.principal.workspace_id, ctx.principal.key_id))
        return receive


class _ToyStep:
    concern = "toy"

    def __init__(self, workspace_id: str, key_id: str) -> None:
        self.key = f"{workspace_id}:toy:{key_id}"
        self.note = f"{workspace_id}:toy:note"

    def contribute(self, ctx: RequestContext) -> Contribution | None:
        return Contribution([Increment(self.key, 1, ttl=60, limit=1000)], reads=[self.note])

    def decide(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | None:
        ctx.verdicts[self.concern] = Verdict(action=f"seen={result.values.get(self.key)}")
        return None

    def refused(self, ctx: RequestContext, result: IncrManyResult) -> Refusal | Amend:
        return Refusal(429, "toy", code="toy")

    def failed(self, ctx: RequestContext, error: Exception) -> Refusal | None:
        return None

    def settle(self, ctx: RequestContext, admitted: bool) -> Settlement | None:
        return None


def chat_app(gateway: Gateway, *, toy: bool) -> ASGIApp:
    """The standalone chat stack (Guardian's windows and spend reads in the step too),
    optionally with the toy between Guardian and Budget."""
    app: ASGIApp = BudgetMiddleware(ChatCompletionsEndpoint(gateway), gateway=gateway)
    if toy:
        app = ToyWindow(app, gateway=gateway)
    app = GuardianMiddleware(app, gateway=gateway)
    app = LimitsMiddleware(app, gateway=gateway)
    return TelemetryMiddleware(AuthMiddleware(app, gateway=gateway))


@asynccontextmanager
async def counted(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    clock = FakeClock(1_795_000_000.0)
    if backend == "memory":
        storage = counting(MemoryStorage)(clock=clock)
    elif backend == "sqlite":
        storage = counting(SQLiteStorage)(tmp_path / "state.db", clock=clock)
    else:
        from gateway_kit.storage.redis import RedisStorage

        url = request.getfixturevalue("redis_url")
        storage = counting(RedisStorage)(url, prefix=request.getfixturevalue("redis_prefix"))
    async with storage:
        yield storage, clock


def priced_config(**fields: Any) -> GatewayConfig:
    """One priced model, and a plan whose quota and cap are far above the load: Limits counts
    and Budget reserves and settles every request."""
    return GatewayConfig.model_validate(
        {
            "providers": [{"name": "up", "base_url": "https://upstream.test/v1"}],
            "models": [
                {
                    "name": "gpt-fake",
                    "provider": "up",
                    "price": {"input_usd_per_mtok": "1", "output_usd_per_mtok": "2"},
                }
            ],
            "plans": {"p": {"included_requests": 1000, "burst_limit_rpm": 1000, "budget_usd": 100}},
            "default_plan": "p",
            **fields,
        }
    )


@pytest.mark.parametrize(
    "backend", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]
)
@pytest.mark.parametrize("toy", [False, True], ids=["auth+limits+budget", "with-a-later-layer"])
async def test_a_warm_request_makes_one_round_trip_before_upstream_and_one_after(
    backend: str, toy: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    config = priced_config(webhooks={"worker": False})
    before_upstream: list[list[Any]] = []
    async with counted(backend, tmp_path, request) as (storage, clock):

        async def upstream(http: httpx.Request) -> httpx.Response:
            before_upstream.append(list(storage.calls))
            return httpx.Response(200, json=COMPLETION)

        client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
        gateway = Gateway(config, storage=storage, http_client=client, clock=clock)
        async with gateway:
            workspace = await gateway.workspaces.create("team@example.com")
            key = (await gateway.keys.create(workspace.id)).secret
            recorder = ASGIRecorder(chat_app(gateway, toy=toy))
            body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
            headers = {"authorization": f"Bearer {key}"}
            assert (
                await recorder.request("POST", "/v1/chat/completions", json=body, headers=headers)
            ).status == 200
            for _ in range(3):  # warm: the key, plan, caps and billing switch are cached
                storage.calls.clear()
                before_upstream.clear()
                response = await recorder.request(
                    "POST", "/v1/chat/completions", json=body, headers=headers
                )
                assert response.status == 200
                assert response.headers["x-gateway-cost-usd"] != "unknown"
                [calls] = before_upstream
                assert [name for name, _ in calls] == ["incr_many"], calls
                # After the response: the settlement, one step (the budget's real cost).
                assert [name for name, _ in storage.calls] == ["incr_many", "incr_many"]


def _upstream(http: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=COMPLETION)


async def test_without_caches_the_workspace_is_read_once_per_request() -> None:
    """Auth reads the key and its workspace (suspended?); Limits and Budget take the workspace
    from the context instead of reading it again."""
    config = priced_config(auth={"cache_ttl_s": 0})
    clock = FakeClock(1_795_000_000.0)
    async with counting(MemoryStorage)(clock=clock) as storage:
        client = httpx.AsyncClient(transport=httpx.MockTransport(_upstream))
        async with Gateway(config, storage=storage, http_client=client, clock=clock) as gateway:
            workspace = await gateway.workspaces.create("a@example.com")
            key = (await gateway.keys.create(workspace.id)).secret
            recorder = ASGIRecorder(chat_app(gateway, toy=False))
            storage.calls.clear()
            answer = await recorder.request(
                "POST",
                "/v1/chat/completions",
                json={"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
            )
            assert answer.status == 200
            reads = [key for name, key in storage.calls if name == "get"]
            assert reads.count(f"{workspace.id}:workspace") == 1, storage.calls


@pytest.mark.parametrize(
    "backend", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]
)
async def test_a_hit_on_the_shared_cache_is_read_in_the_admission_step(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With answers in the storage, the cached answer is one of the admission step's reads:
    a hit makes no round trip of its own (one step before answering, one to settle)."""
    from gateway_kit import create_app

    config = priced_config(webhooks={"worker": False}, cache={"store": "storage"})
    async with counted(backend, tmp_path, request) as (storage, clock):
        client = httpx.AsyncClient(transport=httpx.MockTransport(_upstream))
        gateway = Gateway(config, storage=storage, http_client=client, clock=clock)
        async with gateway:
            workspace = await gateway.workspaces.create("team@example.com")
            key = (await gateway.keys.create(workspace.id)).secret
            recorder = ASGIRecorder(create_app(gateway=gateway))
            body = {
                "model": "gpt-fake",
                "messages": [{"role": "user", "content": "hi"}],
                "temperature": 0,
            }
            headers = {"authorization": f"Bearer {key}"}
            first = await recorder.request(
                "POST", "/v1/chat/completions", json=body, headers=headers
            )
            assert first.headers["x-gateway-cache"] == "miss"
            for _ in range(3):
                storage.calls.clear()
                hit = await recorder.request(
                    "POST", "/v1/chat/completions", json=body, headers=headers
                )
                assert hit.headers["x-gateway-cache"] == "hit"
                assert [name for name, _ in storage.calls] == ["incr_many", "incr_many"]
