"""Where a request enters the pipeline and where it leaves it.

The first pipeline piece a request meets (Telemetry in the standalone app; whichever layer
runs first when they are embedded alone; the endpoint on its own) creates the context and puts
the one ``send`` wrapper in place (``enter``). It owns the request: once everything inside has
returned (the response is complete, failed or abandoned) it settles the admission, off the
client's path and shielded from cancellation (``finish``). Inner pieces find the context
already entered and use ``send`` as it is.
"""

from __future__ import annotations

import contextlib
import logging

import anyio

from gateway_kit._asgi.errors import INTERNAL_ERROR, send_error
from gateway_kit._asgi.types import Scope, Send
from gateway_kit.pipeline.context import RequestContext, get_context
from gateway_kit.pipeline.response import respond_through

__all__ = ["answer_fault", "enter", "finish"]

errors = logging.getLogger("gateway_kit")


def enter(scope: Scope, send: Send) -> tuple[RequestContext, Send, bool]:
    """The request's context, the ``send`` to use, and whether the caller owns the request
    (then it must call ``finish`` once the inner app has returned, in ``finally``)."""
    ctx = get_context(scope)
    if ctx.entered:
        return ctx, send, False
    ctx.entered = True
    return ctx, respond_through(ctx, send), True


async def finish(ctx: RequestContext) -> None:
    """Settle what the layers' storage step left to settle. Shielded: a request cancelled by
    a disconnect still gives back its quota and settles its reservation."""
    if not ctx.admission.settled:
        return
    settlements = ctx.admission.settlements(ctx)
    if settlements:
        with anyio.CancelScope(shield=True):
            await ctx.admission.settle(ctx, settlements)


async def answer_fault(ctx: RequestContext, send: Send) -> bool:
    """Answer a fault inside (an exception the app raised) as a 500 in the OpenAI shape,
    through the request's own ``send`` (its request id, its ``Server-Timing``), logged; the
    connection stays usable. ``False`` when the response had started: only closing the
    connection tells the client then (the caller re-raises)."""
    if ctx.status:
        return False
    errors.exception("unhandled error in request %s", ctx.request_id)
    with contextlib.suppress(OSError):  # the client left as well
        await send_error(send, 500, INTERNAL_ERROR, type="api_error", code="internal_error")
    return True
