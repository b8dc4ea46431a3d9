"""``PolicyLayer``: the scaffold every policy middleware is built on.

A layer subclasses it and writes one hook, ``admit``: read what it needs from the request,
then either answer (a refusal it can give without storage, e.g. a bad key) or join the
request's admission with a participant and register its response transforms. The scaffold
does the rest, the same way for every layer:

- guards ``scope["type"]`` (anything but HTTP passes through untouched);
- enters the pipeline (the context and the one ``send`` wrapper, when it runs first) and, as
  the request's owner, settles once the inner app has returned;
- commits the admission when nothing inside will: a layer in front of another policy layer
  or of the chat endpoint leaves the commit to them, so the whole stack makes one storage
  step; a layer in front of an app of yours commits before calling it.
"""

from __future__ import annotations

from typing import ClassVar

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.entry import enter, finish
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.storage.base import Storage

__all__ = ["PolicyLayer"]


class PolicyLayer:
    """Base class of the policy middlewares; see the module docstring."""

    #: Apps that commit the admission before doing any real work (policy layers, the chat
    #: endpoint) say so; a layer in front of them leaves the commit to them.
    commits_admission: ClassVar[bool] = True

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._commit_here = not getattr(app, "commits_admission", False)
        #: The kind of request the app inside serves (``chat`` or ``embedding``), as the
        #: endpoints say; layers that read the request validate it as such.
        self.request_kind: str = getattr(app, "request_kind", "chat")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.passes(scope):
            await self.app(scope, receive, send)
            return
        ctx, send, owner = enter(scope, send)
        try:
            if ctx.tracing is None:
                inner = await self.admit(ctx, scope, receive, send)
            else:
                name = getattr(self, "concern", type(self).__name__)
                with ctx.tracing.span(f"gateway_kit.layer.{name}"):
                    inner = await self.admit(ctx, scope, receive, send)
            if inner is None:
                return  # answered
            if self._commit_here:
                refusal = await ctx.admission.commit(ctx, self.storage)
                if refusal is not None:
                    await refusal.send(send)
                    return
            await self.app(scope, inner, send)
        finally:
            if owner:
                await finish(ctx)

    def passes(self, scope: Scope) -> bool:
        """Whether the layer has nothing to do with this request at all (it is off, say): it
        then goes straight through, at no cost. Checked before anything else."""
        return False

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        """Decide what to do with the request: return the ``receive`` to pass inward (the
        one given, or one replaying a body read here), or ``None`` after answering (through
        ``refuse``, so that the layers outside have decided first)."""
        return receive

    async def refuse(self, ctx: RequestContext, send: Send, refusal: Refusal) -> None:
        """Answer from ``admit`` (see ``Admission.answer``)."""
        await ctx.admission.answer(ctx, self.storage, refusal, send)

    @property
    def storage(self) -> Storage:
        """Where the admission runs when this layer commits it."""
        raise NotImplementedError
