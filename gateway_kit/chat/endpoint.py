"""The innermost apps of the inference routes: admit, route upstream, answer.

Policy layers wrap these apps; they are what remains of a request once the layers let it
through:

1. read and validate the request (once: a layer may have done it already);
2. resolve the model (``chat.model``: unknown models are refused here, before anything is
   held), then commit the admission: the one storage step of every layer that joined it
   (limits, the budget reservation...), which may still refuse;
3. hand the call to the router (retries, fallback, cooldown: ``routing``), with metering,
   priced at the model that served, as the first response transform;
4. answer through the transform chain: a JSON body whole (with its final length), a stream
   event by event as it arrives. A client that goes away cancels the upstream call and
   releases its connection; a stream the upstream cuts after it began ends with an error
   event, never with a ``[DONE]`` that would make a truncated answer look complete.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

import anyio

from gateway_kit._asgi import CancelOnDisconnect, Receive, Scope, Send, send_error
from gateway_kit._asgi.errors import send_not_running
from gateway_kit.chat.cache_field import without_cache_field
from gateway_kit.chat.meter import MeterTransform
from gateway_kit.chat.model import RouteVerdict, resolve_model
from gateway_kit.chat.request import RequestKind, load_request
from gateway_kit.cost.metering import ask_for_usage
from gateway_kit.exceptions import UpstreamStreamError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.entry import enter, finish
from gateway_kit.pipeline.response import ResponseWriter
from gateway_kit.pipeline.transforms import JSONBody, TransformChain
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.providers.base import ChatCall, EmbeddingsCall
from gateway_kit.routing import Attempt, ModelRoute, Routed, RoutingFailed
from gateway_kit.sse import SSEEvent

__all__ = ["ChatCompletionsEndpoint", "EmbeddingsEndpoint"]

_STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class _InferenceEndpoint:
    """What the chat and embeddings endpoints share: steps 1 to 3 of the module docstring."""

    #: It commits the admission before calling upstream (see ``pipeline.layer``).
    commits_admission = True
    #: The kind of request it serves; layers in front read it to validate the body.
    request_kind: ClassVar[RequestKind]

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._max_body_bytes = gateway.config.server.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        ctx, send, owner = enter(scope, send)
        try:
            await self._serve(ctx, scope, receive, send)
        finally:
            if owner:
                await finish(ctx)

    async def _serve(self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self._gateway
        if not gateway.running:
            await send_not_running(send)
            return
        kind = self.request_kind
        loaded = await load_request(scope, receive, max_body_bytes=self._max_body_bytes, kind=kind)
        if loaded is None:
            return  # the client left while sending its body
        if isinstance(loaded, Refusal):
            await ctx.admission.answer(ctx, gateway.storage, loaded, send)
            return
        payload, receive = loaded
        route = resolve_model(ctx, gateway, payload, kind)
        if isinstance(route, Refusal):
            await ctx.admission.answer(ctx, gateway.storage, route, send)
            return
        if ctx.admission.pending:
            refusal = await ctx.admission.commit(ctx, gateway.storage)
            if refusal is not None:
                await refusal.send(send)
                return
            # The layers may have changed the model (a budget downgrade): one of ours still.
            route = resolve_model(ctx, gateway, payload, kind)
            assert not isinstance(route, Refusal)
        payload = without_cache_field(payload)  # gateway-kit's own: never sent upstream
        try:
            async with CancelOnDisconnect(receive, send) as guard:
                await self._call(ctx, route, payload, guard.send)
        except OSError:
            # ASGI 2.4 servers raise from `send` once the client is gone: nothing to answer.
            return

    async def _call(
        self, ctx: RequestContext, route: ModelRoute, payload: dict[str, Any], send: Send
    ) -> None:
        raise NotImplementedError

    async def _routed(
        self,
        ctx: RequestContext,
        operation: str,
        route: ModelRoute,
        routing: Awaitable[Routed],
        send: Send,
    ) -> Routed | None:
        """The router's answer (``routing``: traced when tracing is on), or ``None`` once every
        deployment failed and the client has been told (``upstream`` timed until then)."""
        started = time.perf_counter()
        try:
            if ctx.tracing is None:
                return await routing
            return await _traced(ctx, operation, route, routing)
        except RoutingFailed as failed:
            ctx.timings["upstream"] = time.perf_counter() - started
            await self._unrouted(ctx, failed, send)
            return None

    @staticmethod
    async def _unrouted(ctx: RequestContext, failed: RoutingFailed, send: Send) -> None:
        """No deployment answered: 503 when all were cooling down, else 502."""
        ctx.verdicts["routing"] = RouteVerdict(
            action="failed",
            retries=failed.retries,
            attempts=tuple(a.label() for a in failed.attempts),
        )
        headers = []
        if failed.retry_after is not None:
            headers.append((b"retry-after", str(math.ceil(failed.retry_after)).encode()))
        if failed.cooling:
            await send_error(
                send,
                503,
                str(failed),
                type="api_error",
                code="deployments_cooling_down",
                headers=headers,
            )
        else:
            await send_error(send, 502, str(failed), type="api_error", code="upstream_unavailable")

    def _served(
        self, ctx: RequestContext, routed: Routed, *, strip_usage: bool = False
    ) -> tuple[TransformChain, list[tuple[bytes, bytes]]]:
        """Records where the request was served; the response's transform chain (metering
        first, priced at the model that served, for what was sent to it) and headers."""
        deployment = routed.deployment
        meter = MeterTransform(
            ctx,
            self._gateway.costs,
            deployment.model,
            routed.payload,
            strip_usage=strip_usage,
            usage_so_far=routed.response.usage_so_far,
            upstream=deployment.upstream_model,
        )
        # Transforms run innermost first: metering (registered last) sees the upstream first.
        transforms = ctx.transforms
        chain = TransformChain([meter, *reversed(transforms)] if transforms else (meter,))
        ctx.verdicts["routing"] = RouteVerdict(
            action="fallback" if routed.fallbacks else "served",
            model=deployment.model,
            provider=deployment.provider_name,
            fallbacks=routed.fallbacks,
            retries=routed.retries,
            attempts=tuple(a.label() for a in routed.attempts),
        )
        return chain, [*routed.response.headers, *routed.headers()]


async def _traced(
    ctx: RequestContext, operation: str, route: ModelRoute, call: Awaitable[Routed]
) -> Routed:
    """The router's answer (``call``) in the upstream call's span (GenAI conventions: a client
    span ``{operation} {model}``), until the answer (a stream's first event) arrived or every
    deployment failed. Without tracing the endpoint awaits the router directly."""
    attributes = {"gen_ai.operation.name": operation, "gen_ai.request.model": route.name}
    with ctx.tracing.span(
        f"{operation} {route.name}", kind="CLIENT", attributes=attributes
    ) as span:
        try:
            routed = await call
        except RoutingFailed as failed:  # every deployment failed: what was tried
            span.set_attributes(_tried(failed.attempts, failed.retries))
            raise
        _describe_upstream(span, routed)
        return routed


def _tried(attempts: Sequence[Attempt], retries: int) -> dict[str, Any]:
    """The attempts that failed (as the request's span and record list them) and retries."""
    return {
        "gateway_kit.retries": retries,
        "gateway_kit.fallbacks": [attempt.label() for attempt in attempts],
    }


def _describe_upstream(span: Any, routed: Routed) -> None:
    deployment = routed.deployment
    span.set_attributes(
        {
            "gen_ai.response.model": deployment.model,
            "gen_ai.provider.name": deployment.provider_name,
            "gateway_kit.upstream_model": deployment.upstream_model,
            **_tried(routed.attempts, routed.retries),
            "http.response.status_code": routed.response.status,
        }
    )


class ChatCompletionsEndpoint(_InferenceEndpoint):
    """``POST /v1/chat/completions`` served from the ``Gateway``'s models."""

    request_kind = "chat"

    async def _call(
        self, ctx: RequestContext, route: ModelRoute, payload: dict[str, Any], send: Send
    ) -> None:
        gateway = self._gateway
        body = ctx.body if payload is ctx.json else None
        strip = False
        stream = payload.get("stream") is True
        if stream:
            payload, strip = ask_for_usage(payload)
            body = None if strip else body
        call = ChatCall(payload, body, stream=stream, request_id=ctx.request_id)
        started = time.perf_counter()
        routed = await self._routed(ctx, "chat", route, gateway.router.chat(route, call), send)
        if routed is None:
            return
        response = routed.response
        chain, headers = self._served(ctx, routed, strip_usage=strip)
        try:
            chain.start(response.status)
            if response.events is None:
                ctx.timings["upstream"] = time.perf_counter() - started
                whole = JSONBody(response.body, response.document)
                chain.body(whole)
                await ResponseWriter(send, response.status, headers).whole(whole.encode())
                return
            ctx.timings["upstream"] = time.perf_counter() - started  # until the first event
            writer = ResponseWriter(send, response.status, headers + _STREAM_HEADERS)
            await self._stream(ctx, routed, chain, writer)
        finally:
            # Once upstream may bill, the request gets a cost whatever happens (a client that
            # left mid-stream, a cancellation): metering's close estimates it if need be.
            chain.close()
            if response.close is not None:
                with anyio.CancelScope(shield=True):
                    await response.close()

    @staticmethod
    async def _stream(
        ctx: RequestContext, routed: Routed, chain: TransformChain, writer: ResponseWriter
    ) -> None:
        events = routed.response.events
        assert events is not None
        assert routed.first is not None
        try:
            await writer.emit(chain.event(routed.first))
            async for event in events:
                await writer.emit(chain.event(event))
        except UpstreamStreamError as exc:
            # The status is already sent: the client learns of the break in-band, after what
            # the transforms held back.
            await writer.emit(chain.close())
            ctx.error_code = "upstream_stream_error"
            error = {
                "message": str(exc),
                "type": "api_error",
                "code": "upstream_stream_error",
                "param": None,
            }
            await writer.emit([SSEEvent.of_json({"error": error})])
        else:
            await writer.emit(chain.close())
        await writer.end()


class EmbeddingsEndpoint(_InferenceEndpoint):
    """``POST /v1/embeddings`` served from the ``Gateway``'s embedding models."""

    request_kind = "embedding"

    async def _call(
        self, ctx: RequestContext, route: ModelRoute, payload: dict[str, Any], send: Send
    ) -> None:
        gateway = self._gateway
        body = ctx.body if payload is ctx.json else None
        call = EmbeddingsCall(payload, body, request_id=ctx.request_id)
        started = time.perf_counter()
        routing = gateway.router.embeddings(route, call)
        routed = await self._routed(ctx, "embeddings", route, routing, send)
        if routed is None:
            return
        ctx.timings["upstream"] = time.perf_counter() - started
        response = routed.response
        chain, headers = self._served(ctx, routed)
        try:
            chain.start(response.status)
            whole = JSONBody(response.body, response.document)
            chain.body(whole)
            await ResponseWriter(send, response.status, headers).whole(whole.encode())
        finally:
            chain.close()
