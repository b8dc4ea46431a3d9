"""The innermost app of ``POST /v1/chat/completions``: admit, call upstream, answer.

Policy layers wrap this app; it is what remains of a request once they let it through:

1. read and validate the request (once: a layer may have done it already);
2. check the model exists, then commit the admission: the one storage step of every layer
   that joined it (limits, the budget reservation...), which may still refuse;
3. call the model the layers settled on, with metering as the first response transform;
4. answer through the transform chain: a JSON body whole (with its final length), a stream
   event by event as it arrives. A client that goes away cancels the upstream call and
   releases its connection; a stream the upstream cuts ends with an error event, never with a
   ``[DONE]`` that would make a truncated answer look complete.
"""

from __future__ import annotations

import time

import anyio

from gateway_kit._asgi import CancelOnDisconnect, Receive, Scope, Send, send_error
from gateway_kit.chat.meter import MeterTransform
from gateway_kit.chat.request import load_chat_request
from gateway_kit.cost.metering import ask_for_usage
from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.gateway import Gateway, ModelRoute
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.entry import enter, finish
from gateway_kit.pipeline.response import ResponseWriter
from gateway_kit.pipeline.transforms import JSONBody, TransformChain
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.providers.base import ChatCall, ChatResponse
from gateway_kit.sse import SSEEvent

__all__ = ["ChatCompletionsEndpoint"]

_STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ChatCompletionsEndpoint:
    """ASGI app serving chat completions from the ``Gateway``'s routes."""

    #: It commits the admission before calling upstream (see ``pipeline.layer``).
    commits_admission = True

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
            await send_error(
                send,
                503,
                "The gateway is not running: enter the Gateway in the application's lifespan.",
                type="api_error",
                code="gateway_not_running",
            )
            return
        loaded = await load_chat_request(scope, receive, max_body_bytes=self._max_body_bytes)
        if loaded is None:
            return  # the client left while sending its body
        if isinstance(loaded, Refusal):
            await ctx.admission.answer(ctx, gateway.storage, loaded, send)
            return
        payload, receive = loaded
        requested = ctx.model or payload["model"]
        if gateway.route(requested) is None:
            unknown = Refusal(
                404,
                f"The model '{requested}' does not exist or you do not have access to it.",
                code="model_not_found",
                param="model",
            )
            await ctx.admission.answer(ctx, gateway.storage, unknown, send)
            return
        if ctx.admission.pending:
            refusal = await ctx.admission.commit(ctx, gateway.storage)
            if refusal is not None:
                await refusal.send(send)
                return
        # The layers may have changed the model (a budget downgrade): one of ours still.
        route = gateway.route(ctx.model or requested)
        assert route is not None
        ctx.model = route.name
        body = ctx.body
        if payload["model"] != route.upstream_model:
            payload = {**payload, "model": route.upstream_model}
            body = None
        strip = False
        stream = payload.get("stream") is True
        if stream:
            payload, strip = ask_for_usage(payload)
            body = None if strip else body
        call = ChatCall(payload, body, stream=stream, request_id=ctx.request_id)
        meter = MeterTransform(ctx, gateway.costs, route.name, call.payload, strip_usage=strip)
        # Transforms run innermost first: metering (registered last) sees the upstream first.
        transforms = ctx.transforms
        chain = TransformChain([meter, *reversed(transforms)] if transforms else (meter,))
        try:
            async with CancelOnDisconnect(receive, send) as guard:
                await self._relay(ctx, route, call, chain, guard.send)
        except OSError:
            # ASGI 2.4 servers raise from `send` once the client is gone: nothing to answer.
            return

    async def _relay(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        call: ChatCall,
        chain: TransformChain,
        send: Send,
    ) -> None:
        started = time.perf_counter()
        try:
            response = await route.provider.chat(call)
        except UpstreamUnavailableError as exc:
            ctx.timings["upstream"] = time.perf_counter() - started
            await send_error(send, 502, str(exc), type="api_error", code="upstream_unavailable")
            return
        headers = [*response.headers, (b"x-gateway-model", route.name.encode())]
        try:
            chain.start(response.status)
            if response.events is None:
                ctx.timings["upstream"] = time.perf_counter() - started
                body = JSONBody(response.body)
                chain.body(body)
                await ResponseWriter(send, response.status, headers).whole(body.encode())
                return
            writer = ResponseWriter(send, response.status, headers + _STREAM_HEADERS)
            await self._stream(ctx, response, chain, writer, started)
        finally:
            # Once upstream may bill, the request gets a cost whatever happens (a client that
            # left mid-stream, a cancellation): metering's close estimates it if need be.
            chain.close()
            if response.close is not None:
                with anyio.CancelScope(shield=True):
                    await response.close()

    async def _stream(
        self,
        ctx: RequestContext,
        response: ChatResponse,
        chain: TransformChain,
        writer: ResponseWriter,
        started: float,
    ) -> None:
        assert response.events is not None
        try:
            async for event in response.events:
                if not writer.started:
                    # The response starts with the first event: upstream time runs until then.
                    ctx.timings["upstream"] = time.perf_counter() - started
                await writer.emit(chain.event(event))
        except UpstreamStreamError as exc:
            # The status is already sent: the client learns of the break in-band, after what
            # the transforms held back.
            await writer.emit(chain.close())
            error = {
                "message": str(exc),
                "type": "api_error",
                "code": "upstream_stream_error",
                "param": None,
            }
            await writer.emit([SSEEvent.of_json({"error": error})])
        else:
            await writer.emit(chain.close())
        if not writer.started:
            ctx.timings["upstream"] = time.perf_counter() - started
        await writer.end()
