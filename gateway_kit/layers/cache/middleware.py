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

What the request asks of the cache (``CacheControls``) holds throughout: an answer older than
its age bound is a miss (and the new answer replaces it), its namespace is part of the key and
the semantic partition, its TTL is its answer's. Each kept answer says when it was kept (the
gateway's clock), and a hit says how long ago (``age``).

The request it keys on is the masked one when PII masking is on: ``ctx.json`` itself in
``full`` scope, ``ctx.extras["pii.masked"]`` in ``cache`` scope; in that scope the answer is
masked (``ctx.extras["pii.values"]``) before it is kept, and the values are part of the key
(the model read them: its answer is theirs only). ``monitor`` looks up and keeps but
serves every request from upstream, saying what would have hit in ``x-gateway-cache-monitor``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send
from gateway_kit.accounts.secrets import DeploymentSecret
from gateway_kit.cache.answer import CachedAnswer
from gateway_kit.cache.embedders import Embedder, Vector
from gateway_kit.cache.guard import same_meaning_words
from gateway_kit.cache.index import IndexEntry
from gateway_kit.cache.store import CacheKey
from gateway_kit.chat.model import resolve_model
from gateway_kit.chat.request import load_request
from gateway_kit.config import Mode, OnError
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.layers._base import GatewayLayer
from gateway_kit.layers.cache.embedder import ProviderEmbedder
from gateway_kit.layers.cache.policy import CacheControls, CachePolicy, CacheVerdict
from gateway_kit.layers.cache.step import STORED, CacheCounts
from gateway_kit.layers.cache.transform import StoreTransform
from gateway_kit.layers.pii.restore import in_json_strings
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.response import ResponseWriter
from gateway_kit.pipeline.transforms import JSONBody, TransformChain
from gateway_kit.pipeline.verdicts import Refusal, unavailable
from gateway_kit.sse import SSEEvent

__all__ = ["CacheMiddleware", "SemanticLookup"]

logger = logging.getLogger("gateway_kit.cache")

_SECRET_KEY = "gk:cache:secret"
_JSON = [(b"content-type", b"application/json")]
_STREAM = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(frozen=True, slots=True)
class SemanticLookup:
    """A request looked up by meaning: where, what, and what was found."""

    partition: str
    text: str
    vector: Vector
    answer: CachedAnswer | None
    similarity: float | None
    #: The best similarity in the partition (the histogram's), ``None`` when it was empty.
    best: float | None


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
        self._provider_embedder: Embedder | None = None

    def passes(self, scope: Scope) -> bool:
        # Answers are cached with or without Auth (without it, in the shared scope); the
        # embeddings route is not cached; a gateway not entered is the endpoint's to answer.
        return self.mode is Mode.OFF or self.request_kind != "chat" or not self.gateway.running

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
        counts = CacheCounts(gateway.cache.counters)
        ctx.admission.join(counts)
        # Every line of the header, as one list (RFC 9110 5.3): a `no-store` on a second
        # line was once not read, and the answer served.
        cache_control = ", ".join(
            bytes(value).decode("latin-1")
            for name, value in scope["headers"]
            if name == b"cache-control"
        )
        reason = self.policy.bypass_reason(payload, cache_control)
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
        controls = self.policy.controls(payload, cache_control)
        namespace = controls.namespace
        masked: dict[str, Any] = ctx.extras.get("pii.masked") or payload
        # PII's cache scope: the model reads the values, so they are part of the key.
        values: dict[str, str] | None = (
            ctx.extras.get("pii.values") if "pii.masked" in ctx.extras else None
        )
        principal = ctx.principal
        workspace_id = principal.workspace_id if principal is not None else None
        cache = gateway.cache
        where = cache.scope_of(workspace_id)
        secret = await self._secret.get()
        key = CacheKey(
            where, route.name, self.policy.key(masked, route.name, secret, values, namespace)
        )
        if cache.shared and where == workspace_id:
            # The answer is read in the admission step itself: no round trip of its own.
            counts.read = cache.shared_key(key)
        # The admission first: a hit counts against the quota and passes Budget.
        refusal = await ctx.admission.commit(ctx, self.storage)
        if refusal is not None:
            await refusal.send(send)
            return None
        route = resolve_model(ctx, gateway, payload, "chat")  # a downgrade changes the model
        assert not isinstance(route, Refusal)
        model = route.name
        read = counts.read_done and model == key.model
        if model != key.model:
            key = CacheKey(where, model, self.policy.key(masked, model, secret, values, namespace))
        try:
            if read:
                answer = None if counts.read_value is None else cache.decode(counts.read_value)
            else:
                answer = await cache.store.get(key)
        except StorageError as exc:  # the shared store: the storage failed
            refusal = unavailable(self.concern, self.on_error, exc)
            if refusal is not None:
                await refusal.send(send)
                return None
            ctx.verdicts[self.concern] = CacheVerdict(action="unchecked")
            ctx.headers.append((b"x-gateway-cache", b"unchecked"))
            return receive
        if answer is not None and not controls.accepts(answer.stored_at, gateway.clock()):
            answer = None  # older than the request accepts: a miss, its new answer kept
        enforce = self.mode is Mode.ENFORCE
        if answer is not None and enforce:
            await self._serve(ctx, payload, model, answer, send, verdict=CacheVerdict(action="hit"))
            return None
        lookup = None
        if answer is None and await self._semantic_on(model, workspace_id):
            lookup = await self._semantic(ctx, masked, values, model, where, secret, controls)
            if lookup is not None and lookup.answer is not None and enforce:
                verdict = CacheVerdict(action="semantic", similarity=lookup.similarity)
                await self._serve(ctx, payload, model, lookup.answer, send, verdict=verdict)
                return None
        would_hit = answer is not None or (lookup is not None and lookup.answer is not None)
        best = lookup.best if lookup is not None else None
        ctx.verdicts[self.concern] = CacheVerdict(action="miss", would_hit=would_hit, best=best)
        ctx.headers.append((b"x-gateway-cache", b"miss"))
        if self.mode is Mode.MONITOR:
            ctx.headers.append((b"x-gateway-cache-monitor", b"hit" if would_hit else b"miss"))

        def keep(answer: CachedAnswer) -> None:
            routing = ctx.verdicts.get("routing")
            if getattr(routing, "model", model) != model:
                return  # served by a fallback: not the answer of this model
            if values:
                answer = _masked(answer, values)
            if answer.size > cache.config.max_entry_bytes:
                return
            answer = replace(answer, stored_at=gateway.clock())
            ttl = controls.ttl

            async def write() -> None:
                if not await cache.store.put(key, answer, ttl) or lookup is None:
                    return
                await cache.index.add(where, lookup.partition, entry_of(lookup, key))

            local_index = cache.local_index if lookup is not None else None
            if cache.local is not None and (lookup is None or local_index is not None):
                # In this process: kept now, so the client's next request finds it.
                if not cache.local.put_now(key, answer, ttl):
                    return
                if lookup is not None and local_index is not None:
                    local_index.add_now(where, lookup.partition, entry_of(lookup, key))

                ctx.extras[STORED] = True
                return
            ctx.extras[STORED] = write  # to the storage after the response, off its path

        ctx.transforms.append(StoreTransform(ctx, keep))
        return receive

    async def _semantic_on(self, model: str, workspace_id: str | None) -> bool:
        """Whether the request is looked up by meaning: its model is one of the
        configuration's, or its workspace turned the semantic cache on."""
        models = self.gateway.config.cache.semantic.models
        if model in models or "*" in models:
            return True
        if workspace_id is None:
            return False
        return (await self.gateway.cache.settings.get(workspace_id)).semantic

    async def _semantic(
        self,
        ctx: RequestContext,
        masked: dict[str, Any],
        values: dict[str, str] | None,
        model: str,
        where: str,
        secret: bytes,
        controls: CacheControls,
    ) -> SemanticLookup | None:
        """Look the request up by meaning; ``None`` when its final message is no user text
        (or the embedder failed: then it is a miss, and its answer is kept for exact hits)."""
        cache = self.gateway.cache
        config = self.gateway.config.cache.semantic
        try:
            embedder = self._embedder()
            parts = self.policy.semantic_parts(
                masked, model, embedder.id, secret, values, controls.namespace
            )
            if parts is None:
                return None
            partition, text = parts
            started = time.perf_counter()
            vector = (await embedder.embed([text]))[0]
            matches, best = await cache.index.search(
                where, partition, vector, threshold=config.threshold
            )
        except Exception as exc:  # a provider down, a model that cannot load, the storage
            logger.warning("semantic cache: no lookup for %s: %r", ctx.request_id, exc)
            return None
        found: CachedAnswer | None = None
        similarity = None
        lenient = config.guard == "lenient"
        for match in matches:
            if not same_meaning_words(match.entry.text, text, lenient=lenient):
                continue
            try:
                found = await cache.store.get(match.entry.key)
                if found is None:  # its answer expired or was evicted
                    await cache.index.forget(where, partition, match.entry.key)
                    continue
                if not controls.accepts(found.stored_at, self.gateway.clock()):
                    found = None  # older than the request accepts
                    continue
            except StorageError:
                found = None
                break
            similarity = match.similarity
            break
        ctx.timings["semantic"] = time.perf_counter() - started
        return SemanticLookup(partition, text, vector, found, similarity, best)

    def _embedder(self) -> Embedder:
        custom = self.gateway.cache.custom_embedder
        if custom is not None:
            return custom
        if self._provider_embedder is not None:
            return self._provider_embedder
        name = self.gateway.config.cache.semantic.embedder
        if name == "local":
            return self.gateway.cache.local_embedder()
        self._provider_embedder = ProviderEmbedder(self.gateway, name)
        return self._provider_embedder

    async def _serve(
        self,
        ctx: RequestContext,
        payload: dict[str, Any],
        model: str,
        answer: CachedAnswer,
        send: Send,
        *,
        verdict: CacheVerdict,
    ) -> None:
        """Answer from the cache, through the outer layers' transforms."""
        started = time.perf_counter()
        ctx.verdicts[self.concern] = verdict
        ctx.cost = cost = self.gateway.costs.served_free(model, answer.usage)
        ctx.headers += [
            (b"x-gateway-cache", verdict.action.encode()),
            (b"x-gateway-model", model.encode()),
            *cost.headers(),
        ]
        if verdict.similarity is not None:
            ctx.headers.append(
                (b"x-gateway-cache-similarity", f"{verdict.similarity:.4f}".encode())
            )
        if answer.stored_at is not None:  # HTTP's Age: how long ago the answer was kept
            age = max(0, int(self.gateway.clock() - answer.stored_at))
            ctx.headers.append((b"age", b"%d" % age))
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
                if event.done:  # the cost as a live stream tells it (hits had no comment)
                    await writer.emit(chain.event(SSEEvent.comment(cost.comment())))
                await writer.emit(chain.event(event))
            await writer.emit(chain.close())
            await writer.end()
        except OSError:
            return  # the client left
        finally:
            chain.close()
            ctx.timings["cache"] = time.perf_counter() - started


def entry_of(lookup: SemanticLookup, key: CacheKey) -> IndexEntry:
    return IndexEntry(lookup.vector, lookup.text, key)


def _masked(answer: CachedAnswer, values: dict[str, str]) -> CachedAnswer:
    """``answer`` with the request's raw values (``placeholder -> value``) put back to their
    placeholders: PII masking in ``cache`` scope sent the model the raw values. In a tool call's
    arguments (JSON) a value is written escaped, as OpenAI's encoders (non-ASCII kept) and
    Python's (non-ASCII as ``\\u`` escapes) write it."""
    escaped = in_json_strings(values)
    ascii_escaped = {p: json.dumps(v)[1:-1] for p, v in values.items()}

    def longest_first(*forms: dict[str, str]) -> list[tuple[str, str]]:
        pairs = {(placeholder, value) for form in forms for placeholder, value in form.items()}
        return sorted(pairs, key=lambda item: (-len(item[1]), item))

    text_pairs = longest_first(values)
    argument_pairs = longest_first(escaped, ascii_escaped)

    def mask(text: str, pairs: list[tuple[str, str]] = text_pairs) -> str:
        for placeholder, value in pairs:
            if value in text:
                text = text.replace(value, placeholder)
        return text

    message = dict(answer.message)
    for field, value in message.items():  # content, refusal, a reasoning model's thinking
        if field != "role" and isinstance(value, str):
            message[field] = mask(value)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "arguments": mask(call["function"]["arguments"], argument_pairs),
                },
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
        answer.extra,
    )
