"""A scriptable OpenAI-compatible upstream for tests, over ``httpx.MockTransport``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from gateway_kit import (
    Gateway,
    GatewayConfig,
    MemoryStorage,
    ModelConfig,
    ProviderConfig,
    StorageError,
)
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.config import AuthConfig, StorageConfig

#: In-memory state and no API keys: for tests of the proxy itself.
OPEN = {"storage": StorageConfig(url="memory://"), "auth": AuthConfig(mode="off")}


def offline_config(**fields: Any) -> GatewayConfig:
    """The offline demo's models, in memory, without keys (unless ``fields`` say otherwise)."""
    return GatewayConfig(**{**OPEN, **fields})


def chunk(content: str = "", *, index: int = 0, finish: str | None = None, **delta: Any) -> bytes:
    """One OpenAI chat.completion.chunk event."""
    if content:
        delta["content"] = content
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-fake",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"

COMPLETION = {
    "id": "chatcmpl-fake",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-fake",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    "system_fingerprint": "fp_unknown_field_kept",
}

#: The default answer to ``POST /v1/embeddings`` (a chat completion is no embeddings list).
EMBEDDINGS = {
    "object": "list",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
    "model": "embed-fake",
    "usage": {"prompt_tokens": 1, "total_tokens": 1},
}


class ScriptedStream(httpx.AsyncByteStream):
    """An upstream body produced chunk by chunk; records whether it was closed or finished.

    ``before_each(i)`` is awaited before chunk ``i`` is produced: a test uses it to hold the
    upstream back until the client has seen the previous event.
    """

    def __init__(
        self,
        chunks: list[bytes],
        *,
        before_each: Callable[[int], Awaitable[None]] | None = None,
        fail_after: int | None = None,
    ) -> None:
        self.chunks = chunks
        self.before_each = before_each
        self.fail_after = fail_after
        self.closed = False
        self.finished = False
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, piece in enumerate(self.chunks):
            if self.fail_after is not None and index == self.fail_after:
                raise httpx.RemoteProtocolError("peer closed connection mid-stream")
            if self.before_each is not None:
                await self.before_each(index)
            self.sent += 1
            yield piece
        self.finished = True

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class FakeUpstream:
    """Answers like an OpenAI-compatible API and records what it was asked."""

    requests: list[httpx.Request] = field(default_factory=list)
    status: int = 200
    json_body: Any = field(default_factory=lambda: COMPLETION)
    raw_body: bytes | None = None
    stream: ScriptedStream | None = None
    error: Exception | None = None
    delay: float = 0.0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.delay:
            await anyio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        if self.stream is not None:
            return httpx.Response(
                self.status, headers={"content-type": "text/event-stream"}, stream=self.stream
            )
        if self.raw_body is not None:
            return httpx.Response(
                self.status, content=self.raw_body, headers={"content-type": "application/json"}
            )
        if self.json_body is COMPLETION and request.url.path.endswith("/embeddings"):
            return httpx.Response(self.status, json=EMBEDDINGS)
        return httpx.Response(self.status, json=self.json_body)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def sent_json(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def upstream_config(**models: str) -> GatewayConfig:
    """A config with one OpenAI-compatible provider ``up`` and the given model aliases."""
    aliases = models or {"gpt-fake": "gpt-fake"}
    return GatewayConfig(
        **OPEN,
        providers=(
            ProviderConfig(name="up", base_url="https://upstream.test/v1", api_key="sk-up"),
        ),
        models=tuple(
            ModelConfig(name=name, provider="up", upstream_model=upstream)
            for name, upstream in aliases.items()
        ),
    )


def gateway_for(upstream: FakeUpstream, config: GatewayConfig | None = None) -> Gateway:
    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    return Gateway(config or upstream_config(), http_client=client)


@dataclass
class Env:
    """A running gateway on memory storage with a fake clock, a workspace and its key."""

    gateway: Gateway
    recorder: Any
    clock: Any
    storage: Any
    upstream: FakeUpstream
    workspace_id: str
    key: str

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {key or self.key}"}

    async def chat(self, key: str | None = None, **body: Any) -> Any:
        payload = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}], **body}
        return await self.recorder.request(
            "POST", "/v1/chat/completions", json=payload, headers=self.auth(key)
        )

    async def used_requests(self) -> int:
        me = await self.recorder.request("GET", "/v1/me", headers=self.auth())
        return int(me.json()["used_requests"])


TEST_PLANS = {
    "tiny": {"included_requests": 5, "burst_limit_rpm": 3},
    "scale": {"included_requests": 1000, "burst_limit_rpm": 600},
}


@asynccontextmanager
async def provisioned(
    plan: str = "tiny",
    *,
    storage_class: Any = None,
    real_clock: bool = False,
    ssrf_guard: Any = None,
    **config: Any,
) -> AsyncIterator[Env]:
    """A gateway with Auth and Limits on, its workspace on ``plan``, and one key (an admin
    key: the workspace owner's).

    The clock is fake (2026-11-18, mid-month), for storage, the gateway and its webhook
    worker alike (``env.clock.advance`` lets a backoff pass), unless ``real_clock``.
    """
    import time

    from gateway_kit import MemoryStorage, create_app
    from gateway_kit.testing import ASGIRecorder, FakeClock

    clock: Any = time.time if real_clock else FakeClock(1_795_000_000.0)
    fields = {
        "storage": {"url": "memory://"},
        "providers": [{"name": "up", "base_url": "https://upstream.test/v1"}],
        "models": [{"name": "gpt-fake", "provider": "up"}],
        "plans": TEST_PLANS,
        "default_plan": "tiny",
        "auth": {"cache_ttl_s": 0},
        # Off unless a test turns it on: these tests send one request many times over.
        "guardian": {"mode": "off"},
        **config,
    }
    upstream = FakeUpstream()
    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    async with (storage_class or MemoryStorage)(clock=clock) as storage:
        gateway = Gateway(
            GatewayConfig.model_validate(fields),
            storage=storage,
            http_client=client,
            clock=clock,
            ssrf_guard=ssrf_guard,
        )
        async with gateway:
            workspace = await gateway.workspaces.create("team@example.com", plan=plan)
            made = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
            yield Env(
                gateway,
                ASGIRecorder(create_app(gateway=gateway)),
                clock,
                storage,
                upstream,
                workspace.id,
                made.secret,
            )


class BreakableStorage(MemoryStorage):
    """Memory storage whose counters fail (``StorageError``) while ``broken`` is set."""

    broken = False

    async def incr_many(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise StorageError("storage is down")
        return await super().incr_many(*args, **kwargs)
