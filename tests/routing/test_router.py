"""The router without ASGI: retries, backoff, fallback, cooldown and half-open probing, against
scripted in-process providers and memory storage on a fake clock."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gateway_kit import GatewayConfig, MemoryStorage
from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.providers.base import ChatCall, ChatResponse
from gateway_kit.routing import Cooldowns, ModelTable, Router, RoutingFailed
from gateway_kit.routing.retry import Failure, backoff, classify
from gateway_kit.sse import DONE, SSEEvent
from gateway_kit.testing import FakeClock

pytestmark = pytest.mark.anyio

OK = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()


class Scripted:
    """A provider answering from a script: ``ok``, ``stream``, a status, ``conn``, ``cut``
    (a stream breaking before its first event), ``error-event``; the last entry repeats."""

    def __init__(self, name: str, *script: Any) -> None:
        self.name = name
        self.script = list(script) or ["ok"]
        self.calls: list[dict[str, Any]] = []
        self.closed = 0

    async def aclose(self) -> None:
        return None

    async def chat(self, call: ChatCall) -> ChatResponse:
        self.calls.append(call.payload)
        step = self.script[min(len(self.calls) - 1, len(self.script) - 1)]
        if step == "ok":
            return ChatResponse(200, body=OK)
        if step == "conn":
            raise UpstreamUnavailableError("refused", provider=self.name)
        if step == "hang":
            await anyio.sleep_forever()
        if step == "cut-body":  # a 200 whose body broke off, or was not the API's
            raise UpstreamUnavailableError("cut", provider=self.name, status=200)
        if isinstance(step, tuple):  # (status, retry_after)
            status, wait = step
            if status >= 500:
                raise UpstreamUnavailableError(
                    "5xx", provider=self.name, status=status, retry_after=wait
                )
            return ChatResponse(status, body=b'{"error":{}}', retry_after=wait)
        if isinstance(step, int):
            if step >= 500:
                raise UpstreamUnavailableError("5xx", provider=self.name, status=step)
            return ChatResponse(step, body=b'{"error":{"message":"no"}}')
        events = self._events(step)

        async def close() -> None:
            self.closed += 1
            await events.aclose()

        return ChatResponse(200, events=events, close=close)

    async def _events(self, step: str) -> AsyncIterator[SSEEvent]:
        if step == "cut":
            raise UpstreamStreamError("broke", provider=self.name, status=200)
        if step == "queued":  # keep-alives while the request waits upstream, for ever
            while True:
                yield SSEEvent.comment("keep-alive")
                await anyio.sleep(0.01)
        if step == "spaced-error":  # an error object, written with a space
            yield SSEEvent('{ "error": {"message": "overloaded"} }')
            return
        if step == "error-event":
            yield SSEEvent.of_json({"error": {"message": "overloaded"}})
            return
        yield SSEEvent.of_json({"choices": [{"delta": {"content": "hi"}}]})
        yield SSEEvent(DONE)


def config(**routing: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "storage": {"url": "memory://"},
            "providers": [{"name": n, "type": "mock"} for n in ("a", "b", "c")],
            "models": [
                {
                    "name": "main",
                    "deployments": [
                        {"provider": "a", "upstream_model": "m-a", "weight": 1},
                        {"provider": "b", "upstream_model": "m-b", "weight": 0},
                    ],
                    "fallbacks": ["backup"],
                },
                {"name": "backup", "provider": "c", "upstream_model": "m-c"},
                {"name": "solo", "provider": "a", "upstream_model": "m-solo"},
            ],
            "routing": {"retries": 1, "allowed_fails": 3, "cooldown_s": 30, **routing},
        }
    )


class Rig:
    def __init__(self, providers: dict[str, Scripted], **routing: Any) -> None:
        self.clock = FakeClock(1_800_000_000.0)
        self.storage = MemoryStorage(clock=self.clock)
        self.config = config(**routing)
        self.providers = providers
        self.slept: list[float] = []
        self.table = ModelTable(self.config, providers, rng=random.Random(7))
        self.cooldowns = Cooldowns(self.storage, self.config.routing, clock=self.clock)
        self.router = self.new_router(self.cooldowns)

    def new_router(self, cooldowns: Cooldowns) -> Router:
        async def sleep(seconds: float) -> None:
            self.slept.append(seconds)

        return Router(
            self.table,
            cooldowns,
            self.config.routing,
            rng=random.Random(1),
            sleep=sleep,
            clock=self.clock,
        )

    async def chat(
        self, model: str = "main", *, stream: bool = False, router: Router | None = None
    ) -> Any:
        route = self.table.resolve(model)
        assert route is not None
        payload = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        return await (router or self.router).chat(route, ChatCall(payload, None, stream=stream))


def rig(a: Any = "ok", b: Any = "ok", c: Any = "ok", **routing: Any) -> Rig:
    script = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
    return Rig(
        {name: Scripted(name, *script(v)) for name, v in (("a", a), ("b", b), ("c", c))},
        **routing,
    )


def test_statuses_are_classified_for_the_router() -> None:
    assert classify(200) is None
    for status in (0, 408, 429, 500, 502, 503, 529):
        assert classify(status) is Failure.RETRYABLE
    for status in (401, 403, 404):
        assert classify(status) is Failure.DEPLOYMENT
    for status in (400, 413, 422):
        assert classify(status) is Failure.CLIENT


def test_backoff_doubles_with_jitter_and_honours_retry_after_up_to_its_bound() -> None:
    cfg = config(backoff_s=1.0, max_backoff_s=3.0, max_retry_after_s=5.0).routing
    rng = random.Random(0)
    for retry, base in ((0, 1.0), (1, 2.0), (2, 3.0), (5, 3.0)):
        waits = [backoff(cfg, retry, None, rng) for _ in range(200)]
        assert all(w is not None and base / 2 <= w <= base for w in waits)
    assert backoff(cfg, 0, 4.0, rng) == 4.0
    assert backoff(cfg, 0, 6.0, rng) is None


async def test_a_healthy_deployment_serves_without_retry_or_storage_writes() -> None:
    r = rig()
    routed = await r.chat("solo")
    assert routed.response.status == 200
    assert routed.deployment.upstream_model == "m-solo"
    assert routed.payload["model"] == "m-solo"
    assert routed.attempts == []
    assert routed.retries == 0
    assert dict(routed.headers())[b"x-gateway-fallbacks"] == b"0"
    assert await r.storage.get("routing:fails:a/m-solo") is None


class Stalled(MemoryStorage):
    """A storage whose every call hangs (a stalled Redis), once ``stalled`` is set."""

    stalled = False

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        if name in ("incr_many", "incr", "get", "set", "delete") and self.stalled:

            async def hang(*args: Any, **kwargs: Any) -> Any:
                await anyio.sleep_forever()

            return hang
        return attribute


async def test_a_stalled_storage_never_holds_a_routed_request() -> None:
    r = rig()
    r.storage = storage = Stalled(clock=r.clock)
    r.cooldowns = Cooldowns(storage, r.config.routing, clock=r.clock)
    r.router = r.new_router(r.cooldowns)
    await r.cooldowns.refresh(r.table.deployment_keys)
    storage.stalled = True
    r.clock.advance(60)  # long past refresh_s: the view is old, and the request does not care
    with anyio.fail_after(5):
        routed = await r.chat("main")
    assert routed.response.status == 200
    # A refresh that cannot read keeps the view it had (here: healthy).
    with anyio.move_on_after(0.05):
        await r.cooldowns.refresh(r.table.deployment_keys)
    assert r.cooldowns.state("a/m-a") == "closed"


async def test_a_5xx_is_retried_on_the_same_deployment_after_a_backoff() -> None:
    r = rig(a=[503, "ok"])
    routed = await r.chat()
    assert routed.deployment.provider_name == "a"
    assert len(r.providers["a"].calls) == 2
    assert routed.retries == 1
    assert len(r.slept) == 1
    assert 0.125 <= r.slept[0] <= 0.25
    assert routed.fallbacks == 0
    assert [a.label() for a in routed.attempts] == ["main@a=503"]


async def test_retry_after_is_honoured_and_a_longer_one_moves_on_at_once() -> None:
    r = rig(a=[(429, 2.0), "ok"])
    routed = await r.chat()
    assert r.slept == [2.0]
    assert routed.deployment.provider_name == "a"

    r = rig(a=[(429, 60.0)], max_retry_after_s=10)
    routed = await r.chat()
    assert r.slept == []
    assert routed.deployment.provider_name == "b"
    assert len(r.providers["a"].calls) == 1


async def test_the_clients_own_4xx_is_answered_as_is_never_retried() -> None:
    r = rig(a=400)
    routed = await r.chat()
    assert routed.response.status == 400
    assert len(r.providers["a"].calls) == 1
    assert r.providers["b"].calls == []
    assert await r.storage.get("routing:fails:a/m-a") is None


async def test_a_deployment_at_fault_is_left_at_once_for_the_next() -> None:
    r = rig(a=401)
    routed = await r.chat()
    assert routed.deployment.provider_name == "b"
    assert len(r.providers["a"].calls) == 1
    assert r.slept == []


async def test_every_deployment_failing_falls_back_to_the_next_model() -> None:
    r = rig(a="conn", b=502)
    routed = await r.chat()
    assert routed.deployment.model == "backup"
    assert routed.payload["model"] == "m-c"
    assert routed.fallbacks == 2
    headers = dict(routed.headers())
    assert headers[b"x-gateway-model"] == b"backup"
    assert headers[b"x-gateway-provider"] == b"c"
    assert headers[b"x-gateway-attempts"] == b"main@a=error, main@a=error, main@b=502, main@b=502"


async def test_a_stream_is_served_only_once_its_first_event_arrived() -> None:
    r = rig(a="cut", b="error-event", c="stream")
    routed = await r.chat(stream=True)
    assert routed.deployment.model == "backup"
    assert routed.first is not None
    assert routed.first.json()["choices"][0]["delta"] == {"content": "hi"}
    assert [e.data async for e in routed.response.events] == [DONE]
    # The broken streams were released.
    assert r.providers["a"].closed == 2
    assert r.providers["b"].closed == 2


async def test_when_everything_fails_the_last_upstream_answer_is_given() -> None:
    r = rig(a=[(429, None)], b=[(429, None)], c=[(429, 3.0)], max_retry_after_s=1)
    routed = await r.chat()
    assert routed.response.status == 429
    assert routed.deployment.provider_name == "c"
    assert len(routed.attempts) == 4  # a twice, b twice; c's own answer is the response


async def test_a_2xx_the_provider_could_not_use_is_retried_then_falls_back() -> None:
    """Once an AssertionError (a 500): the status said success, but there was no answer."""
    r = rig(a="cut-body", b="cut-body", c="ok")
    routed = await r.chat()
    assert routed.deployment.provider_name == "c"
    assert [a.label() for a in routed.attempts] == [
        "main@a=error",
        "main@a=error",
        "main@b=error",
        "main@b=error",
    ]


async def test_when_nothing_answers_routing_fails_with_what_was_tried() -> None:
    r = rig(a="conn", b="conn", c="conn")
    with pytest.raises(RoutingFailed) as failed:
        await r.chat()
    assert not failed.value.cooling
    assert len(failed.value.attempts) == 6
    assert failed.value.retries == 3  # each deployment once again (the request log's count)
    assert "main@a=error" in str(failed.value)


async def test_repeated_failures_cool_a_deployment_down_and_a_probe_brings_it_back() -> None:
    r = rig(a="conn", retries=0)
    for _ in range(3):
        routed = await r.chat("main")
        assert routed.deployment.provider_name == "b"
    assert len(r.providers["a"].calls) == 3
    assert r.cooldowns.state("a/m-a") == "open"
    # Cooling: skipped without a call.
    routed = await r.chat("main")
    assert len(r.providers["a"].calls) == 3
    assert routed.attempts[0].status == -1
    assert routed.attempts[0].label() == "main@a=cooldown"
    # After the cooldown, one request probes it: it still fails, so it opens again.
    r.clock.advance(31)
    await r.chat("main")
    assert len(r.providers["a"].calls) == 4
    assert r.cooldowns.state("a/m-a") == "open"
    # The upstream recovers: the next probe closes the breaker, and traffic returns.
    r.providers["a"].script = ["ok"]
    r.clock.advance(31)
    routed = await r.chat("main")
    assert routed.deployment.provider_name == "a"
    assert r.cooldowns.state("a/m-a") == "closed"
    assert await r.storage.get("routing:trip:a/m-a") is None


async def test_only_one_request_probes_a_half_open_deployment() -> None:
    r = rig(a="conn", retries=0, allowed_fails=1)
    await r.chat("main")
    r.clock.advance(31)
    assert await r.cooldowns.claim_probe("a/m-a") is True  # someone else's probe in flight
    await r.cooldowns.refresh(["a/m-a"])
    assert r.cooldowns.state("a/m-a") == "half_open"
    routed = await r.chat("main")
    assert routed.deployment.provider_name == "b"
    assert len(r.providers["a"].calls) == 1  # not probed twice


async def test_a_probe_answered_with_the_clients_4xx_closes_the_breaker() -> None:
    """The probe's claim stayed: the healthy deployment was out for another cooldown."""
    r = rig(a=["conn", 400, "ok"], retries=0, allowed_fails=1)
    with pytest.raises(RoutingFailed):
        await r.chat("solo")
    r.clock.advance(31)
    await r.cooldowns.refresh(["a/m-solo"])
    routed = await r.chat("solo")  # the probe: the client's own fault
    assert routed.response.status == 400
    assert r.cooldowns.state("a/m-solo") == "closed"
    routed = await r.chat("solo")
    assert routed.response.status == 200
    assert len(r.providers["a"].calls) == 3


async def test_a_probe_whose_request_is_cancelled_lets_the_next_request_probe() -> None:
    """The claim stayed: every request was refused for another cooldown."""
    r = rig(a=["conn", "hang", "ok"], retries=0, allowed_fails=1)
    with pytest.raises(RoutingFailed):
        await r.chat("solo")
    r.clock.advance(31)
    await r.cooldowns.refresh(["a/m-solo"])
    with anyio.move_on_after(0.05):
        await r.chat("solo")  # the probe hangs; its client leaves
    routed = await r.chat("solo")  # probes again at once
    assert routed.response.status == 200
    assert r.cooldowns.state("a/m-solo") == "closed"


async def test_a_client_leaving_before_the_first_event_ends_the_upstream_call() -> None:
    """The upstream ran on (its keep-alives, then its answer) after the client had left."""
    r = rig(a="queued", retries=0)
    with anyio.move_on_after(0.1):
        await r.chat("solo", stream=True)
    assert r.providers["a"].closed == 1


async def test_a_stream_opening_with_an_error_written_another_way_falls_back() -> None:
    """Only `{"error"` exactly was read as an error: `{ "error"` went to the client, billed."""
    r = rig(a="spaced-error", b="stream", retries=0)
    routed = await r.chat("main", stream=True)
    assert routed.deployment.provider_name == "b"


async def test_all_skipped_while_a_probe_is_in_flight_says_when_to_come_back() -> None:
    """Past the cooldown, with another request probing, the 503 had no Retry-After."""
    r = rig(a="conn", retries=0, allowed_fails=1)
    with pytest.raises(RoutingFailed):
        await r.chat("solo")
    r.clock.advance(31)
    assert await r.cooldowns.claim_probe("a/m-solo") is True  # someone else's probe
    await r.cooldowns.refresh(["a/m-solo"])  # the cooldown's key has expired
    assert r.cooldowns.cooling_until("a/m-solo") is None
    with pytest.raises(RoutingFailed) as failed:
        await r.chat("solo")
    assert failed.value.cooling
    assert failed.value.retry_after == 1.0


async def test_all_cooling_answers_with_when_to_come_back() -> None:
    r = rig(a="conn", retries=0, allowed_fails=1)
    with pytest.raises(RoutingFailed):
        await r.chat("solo")
    with pytest.raises(RoutingFailed) as failed:
        await r.chat("solo")
    assert failed.value.cooling
    assert failed.value.retry_after == pytest.approx(30, abs=1)
    assert "cooling down" in str(failed.value)


async def test_two_instances_agree_on_a_cooldown_through_the_storage() -> None:
    r = rig(a="conn", retries=0, refresh_s=1.0)
    other = Cooldowns(r.storage, r.config.routing, clock=r.clock)
    other_router = r.new_router(other)
    async with anyio.create_task_group() as tasks:
        # The other instance's background refresh (the Gateway runs it), on the fake clock.
        await tasks.start(other.run, r.table.deployment_keys)
        for _ in range(3):
            await r.chat("main")
        assert other.state("a/m-a") == "closed"  # its view is up to refresh_s old
        r.clock.advance(1.5)
        for _ in range(100):  # the refresh the clock woke
            if other.state("a/m-a") == "open":
                break
            await anyio.lowlevel.checkpoint()
        routed = await r.chat("main", router=other_router)
        tasks.cancel_scope.cancel()
    assert routed.attempts[0].label() == "main@a=cooldown"
    assert len(r.providers["a"].calls) == 3
    # Failures seen by different instances add up to one window's count.
    r2 = rig(a="conn", retries=0)
    second = r2.new_router(Cooldowns(r2.storage, r2.config.routing, clock=r2.clock))
    await r2.chat("main")
    await r2.chat("main", router=second)
    await r2.chat("main")
    assert r2.cooldowns.state("a/m-a") == "open"


async def test_weights_share_first_picks_and_standbys_come_last() -> None:
    cfg = GatewayConfig.model_validate(
        {
            "storage": {"url": "memory://"},
            "providers": [{"name": n, "type": "mock"} for n in ("a", "b", "c")],
            "models": [
                {
                    "name": "m",
                    "deployments": [
                        {"provider": "a", "weight": 3},
                        {"provider": "b", "weight": 1},
                        {"provider": "c", "weight": 0},
                    ],
                }
            ],
        }
    )
    providers = {n: Scripted(n) for n in "abc"}
    table = ModelTable(cfg, providers, rng=random.Random(3))
    route = table.resolve("m")
    assert route is not None
    firsts = [table.plan(route)[0].provider_name for _ in range(4000)]
    assert 0.7 < firsts.count("a") / 4000 < 0.8
    assert "c" not in firsts
    assert all(table.plan(route)[-1].provider_name == "c" for _ in range(50))


async def test_a_provider_never_receives_the_fields_it_drops() -> None:
    cfg = GatewayConfig.model_validate(
        {
            "storage": {"url": "memory://"},
            "providers": [{"name": "a", "type": "mock", "drop_params": ["temperature", "top_p"]}],
            "models": [{"name": "m", "provider": "a"}],
        }
    )
    provider = Scripted("a")
    table = ModelTable(cfg, {"a": provider})
    storage = MemoryStorage()
    router = Router(table, Cooldowns(storage, cfg.routing), cfg.routing)
    route = table.resolve("m")
    assert route is not None
    payload = {"model": "m", "messages": [], "temperature": 0.2, "top_p": 1, "seed": 3}
    await router.chat(route, ChatCall(payload, b"{}", stream=False))
    assert provider.calls == [{"model": "m", "messages": [], "seed": 3}]
    assert payload["temperature"] == 0.2  # the client's request is left as it was
