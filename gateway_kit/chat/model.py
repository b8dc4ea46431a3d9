"""Model resolution: the one place that decides which model serves a request, or that there is
no such model.

The first piece that needs the model (Budget Control, or the endpoint when no layer did) calls
``resolve_model``; it is answered from the request context after that. An ``auto`` model of
smart routing becomes the model it picks here (``x-gateway-auto`` says which, and why). A
model that does not exist, or not for this route, is refused here, before the request's
admission is committed: it holds no quota and no budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway_kit.chat.request import RequestKind
from gateway_kit.gateway import Gateway
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, Verdict
from gateway_kit.routing import ModelRoute

__all__ = ["AutoVerdict", "RouteVerdict", "resolve_model"]

_ROUTES = {"chat": "/v1/chat/completions", "embedding": "/v1/embeddings"}


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoVerdict(Verdict):
    """Smart routing's choice for one request."""

    auto: str
    model: str | None
    reason: str

    def details(self) -> dict[str, Any]:
        return {"auto": self.auto, "model": self.model, "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteVerdict(Verdict):
    """Where the router sent the request: ``served``, ``fallback`` (served after other
    deployments failed or were skipped) or ``failed``."""

    model: str | None = None
    provider: str | None = None
    fallbacks: int = 0
    retries: int = 0
    #: The failed or skipped attempts, as ``model@provider=status``.
    attempts: tuple[str, ...] = ()


def resolve_model(
    ctx: RequestContext, gateway: Gateway, payload: dict[str, Any], kind: RequestKind
) -> ModelRoute | Refusal:
    """The route of the request's model (``ctx.model`` once a layer set it)."""
    name = ctx.model or payload["model"]
    route = ctx.route
    if route is not None and route.name == name:
        return route
    selector = gateway.auto.get(name) if kind == "chat" else None
    if selector is not None:
        choice = selector.choose(payload)
        ctx.verdicts["auto"] = AutoVerdict(
            action="chosen" if choice.model else "none",
            auto=name,
            model=choice.model,
            reason=choice.reason,
        )
        if choice.model is None:
            return Refusal(
                400,
                f"The model '{name}' found no model for this request: {choice.reason}.",
                code="no_model_fits",
                param="model",
            )
        ctx.headers += [
            (b"x-gateway-auto", choice.model.encode()),
            (b"x-gateway-auto-reason", choice.reason.encode()),
        ]
        name = choice.model
    route = gateway.route(name)
    if route is None:
        return Refusal(
            404,
            f"The model '{name}' does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    if route.kind != kind:
        return Refusal(
            400,
            f"The model '{name}' is served on {_ROUTES[route.kind]}, not on this route.",
            code="model_not_supported",
            param="model",
        )
    ctx.route = route
    ctx.model = route.name
    return route
