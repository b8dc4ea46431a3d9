"""The delivery worker on a fake clock: its idle wait, retries and leases follow the clock.

In process: memory storage, a ``MockTransport`` receiver, no real time but the HTTP deadline.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from gateway_kit import MemoryStorage, sample_event
from gateway_kit.config import WebhooksConfig
from gateway_kit.events.bus import EventBus
from gateway_kit.storage import ClaimedItem
from gateway_kit.testing import FakeClock
from gateway_kit.webhooks.emitter import WebhookEmitter
from gateway_kit.webhooks.store import WebhookStore
from gateway_kit.webhooks.worker import Clock, DeliveryWorker

pytestmark = pytest.mark.anyio

WORKSPACE = "ws_worker"
POLL = WebhooksConfig().poll_interval_s


class SpyStorage(MemoryStorage):
    """Memory storage that counts the worker's claims and the items each one got."""

    def __init__(self, *, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.claims = 0
        self.claimed: list[str] = []

    async def claim(self, queue: str, *, limit: int, lease: float) -> list[ClaimedItem]:
        items = await super().claim(queue, limit=limit, lease=lease)
        self.claims += 1
        self.claimed.extend(item.item_id for item in items)
        return items


async def answer_200(number: int) -> int:
    return 200


@dataclass
class Rig:
    clock: FakeClock
    storage: SpyStorage
    worker: DeliveryWorker
    events: EventBus
    hook_id: str
    requests: list[httpx.Request]

    async def publish(self) -> str:
        """One event for the workspace's webhooks; the id of its delivery."""
        event = sample_event("budget.alert", workspace_id=WORKSPACE)
        await self.events.publish(event)
        return f"{event.event_id}.{self.hook_id}"

    async def settle(self, seconds: float = 0.0) -> None:
        """Let ``seconds`` pass on the clock, then wait until the worker has nothing to do."""
        self.clock.advance(seconds)
        with anyio.fail_after(10):  # a guard: a hang fails the test, it never passes one
            await self.worker.wait_idle()


@asynccontextmanager
async def rig(
    answer: Callable[[int], Awaitable[int]] = answer_200,
    *,
    on_attempt: Callable[[str], None] | None = None,
    **config: Any,
) -> AsyncIterator[Rig]:
    """A running worker, its emitter and one webhook, to a ``MockTransport`` that answers
    request number N (from 1) with ``await answer(N)``."""
    clock = FakeClock()
    async with SpyStorage(clock=clock) as storage:
        requests: list[httpx.Request] = []

        async def receiver(request: httpx.Request) -> httpx.Response:
            requests.append(request)
            return httpx.Response(await answer(len(requests)))

        store = WebhookStore(storage, max_per_workspace=10, log_size=50)
        hook = await store.create(
            WORKSPACE,
            name="hook",
            url="https://hooks.example.com/in",
            secret="whsec_" + "w" * 40,
            events=None,
        )
        events = EventBus()
        async with httpx.AsyncClient(transport=httpx.MockTransport(receiver)) as client:
            worker = DeliveryWorker(
                storage=storage,
                store=store,
                client=client,
                events=events,
                config=WebhooksConfig(**config),
                clock=clock,
                on_attempt=on_attempt,
            )
            events.subscribe(WebhookEmitter(store, storage, on_queued=worker.wake))
            async with anyio.create_task_group() as tasks:
                await tasks.start(worker.run)
                yield Rig(clock, storage, worker, events, hook.id, requests)
                tasks.cancel_scope.cancel()


async def test_the_fake_clock_is_a_clock_and_a_plain_function_is_not() -> None:
    assert isinstance(FakeClock(), Clock)
    assert not isinstance(time.time, Clock)


async def test_the_fake_clock_wakes_a_sleeper_once_it_reaches_the_deadline() -> None:
    clock = FakeClock(100.0)
    woke = anyio.Event()

    async def sleeper() -> None:
        await clock.sleep_until(101.0)
        woke.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sleeper)
        await anyio.wait_all_tasks_blocked()
        clock.advance(0.5)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()
        clock.time = 101.0  # setting the time wakes sleepers as advancing does
        with anyio.fail_after(5):
            await woke.wait()
        with anyio.fail_after(5):
            await clock.sleep_until(100.0)  # already past: returns at once


async def test_the_idle_wait_polls_when_the_clock_reaches_the_poll_interval() -> None:
    async with rig() as r:
        await r.settle()
        assert r.storage.claims == 1  # the first look, at start
        await r.settle(POLL / 2)
        await anyio.wait_all_tasks_blocked()  # a poll, if one (wrongly) began, would show
        assert r.storage.claims == 1  # short of the poll interval: no poll
        await r.settle(POLL / 2)
        assert r.storage.claims == 2  # the poll interval: one poll
        await r.settle(POLL * 3)
        assert r.storage.claims == 3  # far past it: one poll, not one per interval missed


async def test_a_wake_ends_the_idle_wait_without_the_clock_moving() -> None:
    async with rig() as r:
        await r.settle()
        delivery = await r.publish()  # the emitter wakes the worker
        await r.settle()
        assert r.storage.claimed == [delivery]
        assert len(r.requests) == 1
        # The first look, the wake's, and the one a finished delivery makes (a slot is free).
        assert r.storage.claims == 3


async def test_wait_idle_waits_for_the_delivery_in_flight() -> None:
    release, idle = anyio.Event(), anyio.Event()

    async def held(number: int) -> int:
        await release.wait()
        return 200

    async def wait_idle(worker: DeliveryWorker) -> None:
        await worker.wait_idle()
        idle.set()

    async with rig(held) as r, anyio.create_task_group() as tasks:
        await r.publish()
        tasks.start_soon(wait_idle, r.worker)
        await anyio.wait_all_tasks_blocked()
        assert len(r.requests) == 1
        assert not idle.is_set()  # the attempt is still under way
        release.set()
        with anyio.fail_after(10):
            await idle.wait()


async def test_a_retry_is_made_when_the_clock_reaches_its_backoff() -> None:
    async def flaky(number: int) -> int:
        return 503 if number == 1 else 200

    async with rig(flaky) as r:
        await r.publish()
        await r.settle()
        assert len(r.requests) == 1
        first_backoff = WebhooksConfig().retry_backoff_s[0]
        await r.settle(first_backoff - POLL)  # polls, finds nothing due yet
        assert len(r.requests) == 1
        await r.settle(POLL)
        assert [q.headers["x-service-delivery-attempt"] for q in r.requests] == ["1", "2"]
        await r.settle(24 * 3600.0)
        assert len(r.requests) == 2  # delivered: nothing more, however long we wait


@pytest.mark.parametrize(
    ("status", "reported"),
    [(200, ["success"]), (404, ["rejected"]), (503, ["retry"] * 4 + ["held"])],
)
async def test_each_attempt_is_reported_as_the_metrics_name_it(
    status: int, reported: list[str]
) -> None:
    """The README's labels: a 4xx was reported as ``reject``, and the last of five failed
    attempts, after which nothing is retried, as ``retry``."""
    outcomes: list[str] = []

    async def answer(number: int) -> int:
        return status

    async with rig(answer, on_attempt=outcomes.append) as r:
        await r.publish()
        await r.settle()
        for _ in range(5):
            await r.settle(3600.0)
    assert outcomes == reported


@pytest.mark.parametrize(("elapsed", "claims"), [(24.5, 1), (25.0, 2)])
async def test_a_parked_delivery_measures_its_lease_on_the_clock(
    elapsed: float, claims: int
) -> None:
    """Parked behind an attempt, a delivery whose lease no longer covers a whole attempt
    (lease 30 s, deadline 5 s: 25 s gone) goes back to the queue and is claimed again."""
    release = anyio.Event()

    async def first_held(number: int) -> int:
        if number == 1:
            await release.wait()
        return 200

    async with rig(first_held, per_webhook_concurrency=1) as r:
        first = await r.publish()
        second = await r.publish()
        await anyio.wait_all_tasks_blocked()  # the first in flight, the second parked
        assert len(r.requests) == 1
        r.clock.advance(elapsed)
        release.set()
        await r.settle()
        assert len(r.requests) == 2
        assert Counter(r.storage.claimed) == {first: 1, second: claims}
