"""The innermost app of ``POST /v1/chat/completions``: validate, route, call, relay.

Policy layers wrap this app; it is what remains of a request once they let it through. It
answers JSON bodies whole and relays streams event by event, and a client that goes away
cancels the upstream call and releases its connection.
"""

from __future__ import annotations

import time

import anyio

from gateway_kit._asgi import CancelOnDisconnect, Receive, Scope, Send, send_error
from gateway_kit.chat.request import RequestError, load_chat_request
from gateway_kit.cost.metering import StreamMeter, ask_for_usage, usage_of_body
from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.gateway import Gateway, ModelRoute
from gateway_kit.pipeline.context import RequestContext, get_context
from gateway_kit.providers.base import ChatCall, ChatResponse
from gateway_kit.sse import sse_event

_STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ChatCompletionsEndpoint:
    """ASGI app serving chat completions from the ``Gateway``'s routes."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._max_body_bytes = gateway.config.server.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not self._gateway.running:
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
        if isinstance(loaded, RequestError):
            await loaded.send(send)
            return
        payload, receive = loaded
        ctx = get_context(scope)
        requested = ctx.model or payload["model"]
        route = self._gateway.route(requested)
        if route is None:
            await RequestError(
                404,
                f"The model '{requested}' does not exist or you do not have access to it.",
                code="model_not_found",
                param="model",
            ).send(send)
            return
        ctx.model = route.name
        body = ctx.body
        if payload["model"] != route.upstream_model:
            payload = {**payload, "model": route.upstream_model}
            body = None
        meter = None
        if payload.get("stream") is True:
            payload, strip = ask_for_usage(payload)
            body = None if strip else body
            meter = StreamMeter(strip_usage=strip)
        call = ChatCall(payload, body, stream=meter is not None, request_id=ctx.request_id)
        try:
            async with CancelOnDisconnect(receive, send) as guard:
                await self._relay(route, call, scope, guard.send, meter)
        except OSError:
            # ASGI 2.4 servers raise from `send` once the client is gone: nothing to answer.
            return

    async def _relay(
        self,
        route: ModelRoute,
        call: ChatCall,
        scope: Scope,
        send: Send,
        meter: StreamMeter | None,
    ) -> None:
        ctx = get_context(scope)
        costs = self._gateway.costs
        # From the call on, upstream may bill: whatever happens, the request gets a cost
        # (reported, or estimated when the usage never arrived).
        billable = True
        started = time.perf_counter()
        try:
            try:
                response = await route.provider.chat(call)
            except UpstreamUnavailableError as exc:
                billable = False
                ctx.timings["upstream"] = time.perf_counter() - started
                await send_error(send, 502, str(exc), type="api_error", code="upstream_unavailable")
                return
            ctx.timings["upstream"] = time.perf_counter() - started
            billable = 200 <= response.status < 300
            headers = [*response.headers, (b"x-gateway-model", route.name.encode())]
            if response.events is None:
                if billable:
                    usage = usage_of_body(response.body)
                    ctx.cost = costs.of(
                        route.name, usage or costs.estimate_usage(route.name, call.payload)
                    )
                    costs.observe(ctx.cost)
                    headers.extend(ctx.cost.headers())
                headers.append((b"content-length", str(len(response.body)).encode()))
                await send(
                    {"type": "http.response.start", "status": response.status, "headers": headers}
                )
                await send(
                    {"type": "http.response.body", "body": response.body, "more_body": False}
                )
                return
            try:
                # A provider that streams unasked is relayed as it is, its usage read not cut.
                meter = meter or StreamMeter(strip_usage=False)
                await self._relay_stream(ctx, route, call, response, headers, send, meter)
            finally:
                if response.close is not None:
                    with anyio.CancelScope(shield=True):
                        await response.close()
        finally:
            if billable and ctx.cost is None:
                output = meter.chunks if meter is not None else None
                usage = costs.estimate_usage(route.name, call.payload, output_tokens=output)
                ctx.cost = costs.of(route.name, usage)

    async def _relay_stream(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        call: ChatCall,
        response: ChatResponse,
        headers: list[tuple[bytes, bytes]],
        send: Send,
        meter: StreamMeter,
    ) -> None:
        assert response.events is not None
        billable = 200 <= response.status < 300
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": headers + _STREAM_HEADERS,
            }
        )
        try:
            async for event in response.events:
                forward = meter.process(event)
                if forward is None:
                    continue
                if meter.done and billable:
                    # The cost is known only now: an SSE comment just before `[DONE]`.
                    await send(
                        {
                            "type": "http.response.body",
                            "body": self._stream_cost(ctx, route, call, meter),
                            "more_body": True,
                        }
                    )
                await send({"type": "http.response.body", "body": forward, "more_body": True})
        except UpstreamStreamError as exc:
            # The status is already sent: the client learns of the break in-band, and never
            # gets a `[DONE]` that would make a truncated answer look complete.
            error = {
                "message": str(exc),
                "type": "api_error",
                "code": "upstream_stream_error",
                "param": None,
            }
            await send(
                {
                    "type": "http.response.body",
                    "body": sse_event({"error": error}),
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _stream_cost(
        self, ctx: RequestContext, route: ModelRoute, call: ChatCall, meter: StreamMeter
    ) -> bytes:
        """Price the finished stream; the SSE comment that tells the client."""
        costs = self._gateway.costs
        usage = meter.usage or costs.estimate_usage(
            route.name, call.payload, output_tokens=meter.chunks
        )
        ctx.cost = costs.of(route.name, usage)
        costs.observe(ctx.cost)
        fields = b" ".join(name + b"=" + value for name, value in ctx.cost.headers())
        return b": " + fields + b"\n\n"
