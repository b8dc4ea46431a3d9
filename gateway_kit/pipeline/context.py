"""``RequestContext``: the per-request state the layers share, and nothing else does.

It lives under ``scope["gateway_kit.context"]``, created by whichever layer runs first
(``get_context``). Nothing per-request is kept on a middleware instance. Besides who is calling
and what they asked for, it collects what the layers decided (``verdicts``), the events they
raised, the headers they add to the response, the transforms they want run over the answer,
and their part of the one storage step (``admission``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway_kit._asgi.types import Header, Scope
from gateway_kit.accounts.keys import Principal
from gateway_kit.pipeline.admission import Admission
from gateway_kit.pipeline.transforms import ResponseTransform
from gateway_kit.pipeline.verdicts import Verdict

if TYPE_CHECKING:
    from gateway_kit.accounts.workspaces import Workspace
    from gateway_kit.cost.costs import RequestCost
    from gateway_kit.events.models import Event
    from gateway_kit.routing.models import ModelRoute

__all__ = ["CONTEXT_KEY", "RequestContext", "get_context", "new_request_id"]

CONTEXT_KEY = "gateway_kit.context"


@dataclass(slots=True)
class RequestContext:
    """Per-request state shared by the layers; the only channel between them."""

    request_id: str = ""
    started_at: float = field(default_factory=time.perf_counter)
    principal: Principal | None = None
    #: The principal's workspace record as Auth read it (later layers need its plan).
    workspace: Workspace | None = None
    #: The raw request body once read; ``None`` until a layer (or the endpoint) reads it.
    body: bytes | None = None
    #: The model a request's parsed body names, valid or not (the record's model when the
    #: request is refused for its body: it once recorded none).
    asked_model: str | None = None
    #: The parsed chat request, once parsed. Layers that change it call ``replace_json``.
    json: dict[str, Any] | None = None
    #: The model the request will be sent as (after smart routing and downgrades).
    model: str | None = None
    #: Where ``model`` is served, once resolved (``chat.model.resolve_model``).
    route: ModelRoute | None = None
    #: Named durations in seconds for ``Server-Timing`` (``upstream`` is set by the endpoint).
    timings: dict[str, float] = field(default_factory=dict)
    #: What the request cost (usage, micro-USD, flagship baseline), set by metering once
    #: upstream may bill: reported usage, or an estimate (flagged) when none arrived.
    cost: RequestCost | None = None
    #: Each layer's decision, by concern (``limits``, ``budget``...).
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    #: Events the layers published for this request, in order.
    events: list[Event] = field(default_factory=list)
    #: Headers the layers add to the response, written when it starts (whatever answers).
    headers: list[Header] = field(default_factory=list)
    #: Headers computed when the response starts (``Server-Timing``).
    header_sources: list[Callable[[RequestContext], Iterable[Header]]] = field(default_factory=list)
    #: Transforms of the answer, in the order registered (outermost layer first).
    transforms: list[ResponseTransform] = field(default_factory=list)
    #: The layers' storage operations for this request (see ``pipeline.admission``).
    admission: Admission = field(default_factory=Admission)
    #: The response's status once started; 0 before.
    status: int = 0
    #: Whether the response's last body message went out.
    responded: bool = False
    #: ``perf_counter`` when the response's first body bytes went out; 0 before.
    first_byte_at: float = 0.0
    #: The error code the client was answered with (an error body's ``error.code``, or an
    #: error event that broke a stream off), for the request log.
    error_code: str | None = None
    #: Whether the one response wrapper is in place (``pipeline.entry``).
    entered: bool = False
    #: The gateway's ``Tracing`` while spans are on (``ObserveMiddleware`` sets it): the
    #: layers, the admission and the endpoint open their spans through it. ``None``: off.
    tracing: Any = None
    #: Free-form values layers hand to each other (documented by the layer that sets them).
    extras: dict[str, Any] = field(default_factory=dict)


def get_context(scope: Scope) -> RequestContext:
    """The request's context, created on first use."""
    ctx: RequestContext | None = scope.get(CONTEXT_KEY)
    if ctx is None:
        ctx = RequestContext(request_id=new_request_id())
        scope[CONTEXT_KEY] = ctx
    return ctx


def new_request_id() -> str:
    """``req_`` and 32 random hex digits (a quarter of ``uuid4``'s cost, same entropy)."""
    return "req_" + os.urandom(16).hex()
