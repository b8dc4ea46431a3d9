"""``CacheMiddleware``: answers a request the cache has seen before, and keeps new answers.

It is the innermost layer (after Budget): a request it may serve (``CachePolicy``) has its
admission committed here first, so a hit counts against the quota and passes Budget like any
request (the reservation is released at settlement: a hit costs nothing upstream, and its whole
flagship baseline counts as savings). Then, under the model as resolved (a Budget downgrade
included), the request's key is looked up in this process's store:

- a hit is answered here, as JSON or replayed as a stream (``stream: true``), through the
  transforms the outer layers registered (PII restore), with ``x-gateway-cache: hit``;
- a miss goes on to the endpoint with ``StoreTransform`` registered, which keeps the answer
  once it is whole (``x-gateway-cache: miss``);
- a request it may not serve goes on untouched (``x-gateway-cache: bypass`` and
  ``x-gateway-cache-reason``).

The request it keys on is the masked one when PII masking is on: ``ctx.json`` itself in
``full`` scope, ``ctx.extras["pii.masked"]`` in ``cache`` scope; in that scope the answer is
masked (``ctx.extras["pii.values"]``) before it is kept. ``monitor`` looks up and keeps but
serves every request from upstream, saying what would have hit in ``x-gateway-cache-monitor``.
"""

from __future__ import annotations

import time
from typing import Any

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send
from gateway_kit.accounts.secrets import DeploymentSecret
from gateway_kit.cache.answer import CachedAnswer
from gateway_kit.cache.store import CacheKey
from gateway_kit.chat.model import resolve_model
from gateway_kit.chat.request import load_request
from gateway_kit.config import Mode, OnError
from gateway_kit.cost.costs import RequestCost
from gateway_kit.gateway import Gateway
from gateway_kit.layers._base import GatewayLayer
from gateway_kit.layers.cache.policy import CachePolicy, CacheVerdict, check_cache_field
from gateway_kit.layers.cache.step import STORED, CacheCounts
from gateway_kit.layers.cache.transform import StoreTransform
from gateway_kit.pipeline.body import replace_json
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.response import ResponseWriter
from gateway_kit.pipeline.transforms import JSONBody, TransformChain
from gateway_kit.pipeline.verdicts import Refusal

__all__ = ["CacheMiddleware"]

_SECRET_KEY = "gk:cache:secret"
_JSON = [(b"content-type", b"application/json")]
_STREAM = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class CacheMiddleware(GatewayLayer):
    """The exact answer cache for chat completions."""

    concern = "cache"

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
    ) -> None:
        config = gateway.config.cache
        super().__init__(app, gateway=gateway, section=config, mode=mode, on_error=on_error)
        self.policy = CachePolicy(config)
        self._secret = DeploymentSecret(lambda: gateway.storage, _SECRET_KEY, config.secret)

    def passes(self, scope: Scope) -> bool:
        # Answers are cached with or without Auth (without it, in the shared scope); the
        # embeddings route is not cached.
        return self.mode is Mode.OFF or self.request_kind != "chat"

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        gateway = self.gateway
        loaded = await load_request(
            scope, receive, max_body_bytes=gateway.config.server.max_body_bytes, kind="chat"
        )
        if loaded is None:
            return None  # the client left
        if isinstance(loaded, Refusal):
            await self.refuse(ctx, send, loaded)
            return None
        payload, receive = loaded
        asked = payload
        refusal = check_cache_field(payload)
        if refusal is not None:
            await self.refuse(ctx, send, refusal)
            return None
        if "cache" in payload:  # ours, not the provider's: it does not go upstream
            payload = {k: v for k, v in payload.items() if k != "cache"}
            replace_json(scope, payload)
        ctx.admission.join(CacheCounts())
        reason = self.policy.bypass_reason(asked, _header(scope, b"cache-control"))
        if reason is not None:
            ctx.verdicts[self.concern] = CacheVerdict(action="bypass", reason=reason)
            ctx.headers += [
                (b"x-gateway-cache", b"bypass"),
                (b"x-gateway-cache-reason", reason.encode()),
            ]
            return receive
        route = resolve_model(ctx, gateway, payload, "chat")
        if isinstance(route, Refusal):
            await self.refuse(ctx, send, route)
            return None
        # The admission first: a hit counts against the quota and passes Budget.
        refusal = await ctx.admission.commit(ctx, self.storage)
        if refusal is not None:
            await refusal.send(send)
            return None
        route = resolve_model(ctx, gateway, payload, "chat")  # a downgrade changes the model
        assert not isinstance(route, Refusal)
        model = route.name
        masked: dict[str, Any] = ctx.extras.get("pii.masked") or payload
        principal = ctx.principal
        cache = gateway.cache
        where = cache.scope_of(principal.workspace_id if principal is not None else None)
        key = CacheKey(where, model, self.policy.key(masked, model, await self._secret.get()))
        answer = cache.store.get(key)
        if answer is not None and self.mode is Mode.ENFORCE:
            await self._serve(ctx, payload, model, answer, send)
            return None
        ctx.verdicts[self.concern] = CacheVerdict(action="miss", would_hit=answer is not None)
        ctx.headers.append((b"x-gateway-cache", b"miss"))
        if self.mode is Mode.MONITOR:
            monitor = b"hit" if answer is not None else b"miss"
            ctx.headers.append((b"x-gateway-cache-monitor", monitor))
        values: dict[str, str] | None = ctx.extras.get("pii.values")

        def keep(answer: CachedAnswer) -> None:
            routing = ctx.verdicts.get("routing")
            if getattr(routing, "model", model) != model:
                return  # served by a fallback: not the answer of this model
            if values and "pii.masked" in ctx.extras:
                answer = _masked(answer, values)
            if cache.store.put(key, answer):
                ctx.extras[STORED] = True

        ctx.transforms.append(StoreTransform(ctx, keep))
        return receive

    async def _serve(
        self,
        ctx: RequestContext,
        payload: dict[str, Any],
        model: str,
        answer: CachedAnswer,
        send: Send,
    ) -> None:
        """Answer from the cache, through the outer layers' transforms."""
        started = time.perf_counter()
        ctx.verdicts[self.concern] = CacheVerdict(action="hit")
        priced = self.gateway.costs.of(model, answer.usage)
        ctx.cost = cost = RequestCost(model, answer.usage, 0, priced.baseline_micro_usd)
        ctx.headers += [
            (b"x-gateway-cache", b"hit"),
            (b"x-gateway-model", model.encode()),
            *cost.headers(),
        ]
        transforms = ctx.transforms
        chain = TransformChain(list(reversed(transforms)))
        chain.start(200)
        try:
            if payload.get("stream") is not True:
                whole = JSONBody(answer.body())
                chain.body(whole)
                await ResponseWriter(send, 200, list(_JSON)).whole(whole.encode())
                return
            options = payload.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            writer = ResponseWriter(send, 200, list(_STREAM))
            for event in answer.events(include_usage=include_usage):
                await writer.emit(chain.event(event))
            await writer.emit(chain.close())
            await writer.end()
        except OSError:
            return  # the client left
        finally:
            chain.close()
            ctx.timings["cache"] = time.perf_counter() - started


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _masked(answer: CachedAnswer, values: dict[str, str]) -> CachedAnswer:
    """``answer`` with the request's raw values (``placeholder -> value``) put back to their
    placeholders: PII masking in ``cache`` scope sent the model the raw values."""
    pairs = sorted(values.items(), key=lambda item: len(item[1]), reverse=True)

    def mask(text: str) -> str:
        for placeholder, value in pairs:
            if value in text:
                text = text.replace(value, placeholder)
        return text

    message = dict(answer.message)
    for field in ("content", "refusal"):
        if isinstance(message.get(field), str):
            message[field] = mask(message[field])
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [
            {
                **call,
                "function": {**call["function"], "arguments": mask(call["function"]["arguments"])},
            }
            if isinstance(call, dict)
            and isinstance(call.get("function"), dict)
            and isinstance(call["function"].get("arguments"), str)
            else call
            for call in calls
        ]
    return CachedAnswer.made(
        answer.model,
        message,
        answer.finish_reason,
        answer.usage,
        answer.system_fingerprint,
        answer.reported_usage,
    )
