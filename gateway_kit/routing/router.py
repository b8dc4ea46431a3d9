"""The router: one request's way through a model's deployments and its fallback chain.

It is not a layer: the endpoints call it once the layers have admitted the request. For each
candidate of ``ModelTable.plan`` (deployments by weight, then the fallback models'), skipping
those in cooldown and probing half-open ones, it calls the provider, retries retryable failures
with backoff (``retry``), and moves on when the deployment cools down, runs out of retries or
is at fault. A streamed answer counts as served only once its first event has arrived: the
router pulls it before returning, so a stream that breaks before it falls back like any other
failure, while one that breaks after it has begun is the endpoint's to end with an error event
(nothing is ever replayed elsewhere once the client has a byte).

``Routed`` says which deployment served and what was tried before; ``RoutingFailed`` is raised
when no deployment answered at all (all failed without a response, or all cooling down).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import anyio

from gateway_kit.config import RoutingConfig
from gateway_kit.exceptions import ProviderError, UpstreamStreamError
from gateway_kit.providers.base import ChatCall, ChatResponse, EmbeddingsCall, EmbeddingsProvider
from gateway_kit.routing.cooldown import Cooldowns
from gateway_kit.routing.models import Deployment, ModelRoute, ModelTable
from gateway_kit.routing.retry import Failure, backoff, classify
from gateway_kit.sse import SSEEvent

__all__ = ["Attempt", "Routed", "Router", "RoutingFailed"]

Call = TypeVar("Call", ChatCall, EmbeddingsCall)

#: The ``Retry-After`` (seconds) while a skipped deployment's probe is in flight.
_PROBE_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One candidate tried (or skipped) before the one that served."""

    deployment: Deployment
    #: The upstream status (0: no response: timeout, connection, broken stream), or ``-1``
    #: when the deployment was skipped (cooling down).
    status: int
    detail: str = ""

    def label(self) -> str:
        d = self.deployment
        what = "cooldown" if self.status == -1 else str(self.status or "error")
        return f"{d.model}@{d.provider_name}={what}"


@dataclass(slots=True)
class Routed:
    """The answer the router settled on, and how it got there."""

    response: ChatResponse
    deployment: Deployment
    #: The call as sent to that deployment (its upstream model name in ``payload``).
    payload: dict[str, object]
    #: A stream's first event, already pulled from ``response.events``; send it first.
    first: SSEEvent | None = None
    #: Candidates that failed or were skipped before this one, in order.
    attempts: list[Attempt] = field(default_factory=list)
    #: Retries of the same deployment along the way.
    retries: int = 0

    @property
    def fallbacks(self) -> int:
        """How many other deployments were tried or skipped before the one that served."""
        if not self.attempts:
            return 0
        return len({id(a.deployment) for a in self.attempts if a.deployment is not self.deployment})

    def headers(self) -> list[tuple[bytes, bytes]]:
        """``x-gateway-model``, ``x-gateway-provider``, ``x-gateway-fallbacks`` (and the
        failed attempts in ``x-gateway-attempts`` when there were any)."""
        d = self.deployment
        headers = [
            (b"x-gateway-model", d.model.encode()),
            (b"x-gateway-provider", d.provider_name.encode()),
            (b"x-gateway-fallbacks", str(self.fallbacks).encode()),
        ]
        if self.attempts:
            labels = ", ".join(a.label() for a in self.attempts)
            headers.append((b"x-gateway-attempts", labels.encode()))
        return headers


class RoutingFailed(Exception):
    """No deployment answered: every candidate failed without a response, or was cooling."""

    def __init__(
        self, message: str, attempts: list[Attempt], retry_after: float | None, retries: int = 0
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        #: Retries of a deployment along the way (as ``Routed.retries``).
        self.retries = retries
        #: Seconds until the first cooling deployment may be probed (when all were cooling).
        self.retry_after = retry_after

    @property
    def cooling(self) -> bool:
        return bool(self.attempts) and all(a.status == -1 for a in self.attempts)


@dataclass(slots=True)
class _Outcome:
    response: ChatResponse | None = None
    first: SSEEvent | None = None
    status: int = 0
    retry_after: float | None = None
    detail: str = ""


class Router:
    """Calls the deployments of a ``ModelTable`` with retries, fallback and cooldown."""

    def __init__(
        self,
        table: ModelTable,
        cooldowns: Cooldowns,
        config: RoutingConfig,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.cooldowns = cooldowns
        self._config = config
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._clock = clock

    async def report(self) -> list[dict[str, Any]]:
        """Every model with its deployments' health, read from the storage now (the
        operator's view: ``GET /api/v1/admin/routes``, ``gateway-kit status --routes``)."""
        routes = list(self.table)
        health = {h.key: h for h in await self.cooldowns.health(self.table.deployment_keys)}
        report = []
        for route in routes:
            deployments = []
            for d in route.deployments:
                state = health[d.key]
                deployments.append(
                    {
                        "provider": d.provider_name,
                        "upstream_model": d.upstream_model,
                        "weight": d.weight,
                        "state": state.state,
                        "cooling_until": state.cooling_until,
                        "recent_failures": state.recent_failures,
                    }
                )
            report.append(
                {
                    "model": route.name,
                    "kind": route.kind,
                    "fallbacks": [f.name for f in route.chain],
                    "deployments": deployments,
                }
            )
        return report

    async def chat(self, route: ModelRoute, call: ChatCall) -> Routed:
        """Serve a chat call; a stream's first event is pulled before returning."""
        return await self._route(route, call, self._chat)

    async def embeddings(self, route: ModelRoute, call: EmbeddingsCall) -> Routed:
        """Serve an embeddings call."""
        return await self._route(route, call, self._embeddings)

    async def _route(
        self,
        route: ModelRoute,
        call: Call,
        send: Callable[[Deployment, Call], Awaitable[_Outcome]],
    ) -> Routed:
        plan = self.table.plan(route)
        cooldowns = self.cooldowns  # its view is refreshed in the background (Cooldowns.run)
        attempts: list[Attempt] = []
        retries = 0
        last: Routed | None = None  # the last failure that came with a response
        last_attempt: Attempt | None = None
        for deployment in plan:
            state = cooldowns.state(deployment.key)
            probing = state == "half_open"
            if state == "open" or (probing and not await cooldowns.claim_probe(deployment.key)):
                attempts.append(Attempt(deployment, -1))
                continue
            own = _for(call, deployment)
            tries = 1 if probing else 1 + self._config.retries
            for attempt in range(tries):
                try:
                    outcome = await send(deployment, own)
                except BaseException:
                    if probing:
                        with anyio.CancelScope(shield=True):
                            await cooldowns.release_probe(deployment.key)
                    raise
                failure = classify(outcome.status)
                if failure is None or failure is Failure.CLIENT:
                    if probing:
                        # A client's 4xx is an answer too: the deployment is up. Left claimed,
                        # the probe would keep it out for another cooldown.
                        await cooldowns.recovered(deployment.key)
                    assert outcome.response is not None
                    return Routed(
                        outcome.response, deployment, own.payload, outcome.first, attempts, retries
                    )
                attempts.append(Attempt(deployment, outcome.status, outcome.detail))
                if outcome.response is not None:
                    last = Routed(outcome.response, deployment, own.payload)
                    last_attempt = attempts[-1]
                tripped = await cooldowns.failed(deployment.key, probing=probing)
                if tripped or failure is Failure.DEPLOYMENT or attempt + 1 == tries:
                    break
                delay = backoff(self._config, attempt, outcome.retry_after, self._rng)
                if delay is None:
                    break  # the upstream asked for longer than we wait: try elsewhere
                retries += 1
                await self._sleep(delay)
        if last is not None:
            # Every candidate failed; the last one answered (a 429, a 401...): the client
            # gets that answer, with what was tried.
            last.attempts = [a for a in attempts if a is not last_attempt]
            last.retries = retries
            return last
        raise self._failed(route, attempts, retries)

    def _failed(self, route: ModelRoute, attempts: list[Attempt], retries: int) -> RoutingFailed:
        now = self._clock()
        waits = []
        for a in attempts:
            if a.status == -1:
                until = self.cooldowns.cooling_until(a.deployment.key)
                # Past its cooldown, a skipped deployment is half-open with another request's
                # probe in flight: its outcome is known soon.
                waits.append(until - now if until is not None and until > now else _PROBE_WAIT_S)
        retry_after = max(1.0, min(waits)) if waits else None
        if attempts and all(a.status == -1 for a in attempts):
            message = (
                f"Every deployment of the model '{route.name}' (and of its fallbacks) is "
                "cooling down after repeated upstream failures; retry later."
            )
        else:
            tried = "; ".join(f"{a.label()} {a.detail}".strip() for a in attempts)
            message = f"No upstream could serve the model '{route.name}' ({tried})."
        return RoutingFailed(message, attempts, retry_after, retries)

    async def _chat(self, deployment: Deployment, call: ChatCall) -> _Outcome:
        try:
            response = await deployment.provider.chat(call)
        except ProviderError as exc:
            return _failure(exc)
        if response.events is None:
            return _outcome(response)
        if response.status >= 400:
            await _release(response)
            return _Outcome(status=response.status, retry_after=response.retry_after)
        try:
            first = await anext(response.events)
            # The first event is the first with data: comments before it (the keep-alives
            # an upstream sends while the request is queued) are not content, and are dropped.
            while first.data is None and not _is_error(first):
                first = await anext(response.events)
        except (UpstreamStreamError, StopAsyncIteration) as exc:
            await _release(response)
            detail = str(exc) or "the stream ended before its first event"
            return _Outcome(status=0, detail=detail)
        except BaseException:
            # Cancelled while waiting (the client left before the first event): the upstream
            # call ends too (it ran on, comments and answer, to its end).
            with anyio.CancelScope(shield=True):
                await _release(response)
            raise
        if _is_error(first):
            await _release(response)
            return _Outcome(status=0, detail=f"the stream began with an error: {first.data}")
        return _Outcome(response, first, response.status)

    async def _embeddings(self, deployment: Deployment, call: EmbeddingsCall) -> _Outcome:
        provider = deployment.provider
        assert isinstance(provider, EmbeddingsProvider)  # checked when the table is built
        try:
            response = await provider.embeddings(call)
        except ProviderError as exc:
            return _failure(exc)
        return _outcome(response)


def _failure(exc: ProviderError) -> _Outcome:
    """A provider's error: no answer to give. One raised over a 2xx (a body cut short, or not
    the API's) is a failure too: as no response at all (status 0), retried and fallen back
    from; taken as a success it had no response to give (once a 500)."""
    status = exc.status if exc.status >= 400 else 0
    return _Outcome(status=status, retry_after=exc.retry_after, detail=str(exc))


def _outcome(response: ChatResponse) -> _Outcome:
    return _Outcome(response, None, response.status, response.retry_after)


def _for(call: Call, deployment: Deployment) -> Call:
    """The call as sent to ``deployment``: the payload names its upstream model, without the
    fields its provider must not receive."""
    payload = call.payload
    drop = deployment.drop
    if payload.get("model") == deployment.upstream_model and not (drop and drop & payload.keys()):
        return call
    payload = {k: v for k, v in payload.items() if k not in drop} if drop else dict(payload)
    payload["model"] = deployment.upstream_model
    return replace(call, payload=payload, body=None)


def _is_error(event: SSEEvent) -> bool:
    """A stream that opens with an error object (vLLM and others do, with status 200)."""
    if event.event == "error":
        return True
    data = event.data
    # Any JSON object naming an error (`{ "error": ...}`, pretty-printed over several lines):
    # only `{"error"` exactly was once read as one.
    if data is None or not data.lstrip().startswith("{") or '"error"' not in data:
        return False
    try:
        parsed = event.json()
    except ValueError:
        return False
    return isinstance(parsed, dict) and "error" in parsed


async def _release(response: ChatResponse) -> None:
    if response.close is not None:
        with anyio.CancelScope(shield=True):
            await response.close()
