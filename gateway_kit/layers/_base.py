"""``GatewayLayer``: what the gateway's own policy layers share on top of ``PolicyLayer``.

A layer reads its ``mode`` and ``on_error`` from its section of the configuration (either may
be given to the constructor instead), keeps its state in the ``Gateway``'s storage, and has
nothing to do with a request no key authenticated (Auth off, or in front of it). A layer whose
``off`` mode still has work to do (Budget records spend) says so with ``off_passes = False``.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from gateway_kit._asgi.types import ASGIApp, Scope
from gateway_kit.config import Mode, OnError
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import CONTEXT_KEY
from gateway_kit.pipeline.layer import PolicyLayer
from gateway_kit.storage import Storage

__all__ = ["GatewayLayer"]


class _Section(Protocol):
    @property
    def mode(self) -> Mode: ...

    @property
    def on_error(self) -> OnError: ...


class GatewayLayer(PolicyLayer):
    """A policy layer of the gateway's; see the module docstring."""

    #: The layer's concern: its verdict's key on the request context.
    concern: ClassVar[str]
    #: Whether ``mode = "off"`` sends requests straight through.
    off_passes: ClassVar[bool] = True

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        section: _Section,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
    ) -> None:
        super().__init__(app)
        self.gateway = gateway
        self.mode = Mode(mode or section.mode)
        self.on_error = OnError(on_error or section.on_error)

    @property
    def storage(self) -> Storage:
        return self.gateway.storage

    def passes(self, scope: Scope) -> bool:
        ctx = scope.get(CONTEXT_KEY)
        return (self.off_passes and self.mode is Mode.OFF) or ctx is None or ctx.principal is None
