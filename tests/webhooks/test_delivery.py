"""Webhook delivery end to end: real receivers on loopback (uvicorn), the spec's schedule.

The gateway runs on a fake clock, its delivery worker too: a test lets the backoff pass by
advancing the clock, then awaits the worker having nothing left to do (``settle``) before it
counts attempts, so "no further attempt" is checked without sleeping. Only the receivers'
slowness and the HTTP deadline are real time.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gateway_kit import Event, sample_event
from gateway_kit.config import WebhooksConfig
from gateway_kit.testing import run_server
from tests.fakes import Env, provisioned
from tests.webhooks.receiver import Receiver

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "whsec_" + "k" * 40
LOOPBACK = {"allow_http": True, "allow": ["127.0.0.0/8"]}
#: DESIGN.md 5: attempt 1 at once, then retries after these gaps (the defaults), 5 in all.
SCHEDULE = (1.0, 5.0, 30.0, 300.0)
DEFAULTS = WebhooksConfig()
POLL = DEFAULTS.poll_interval_s


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    with run_server(endpoint) as base_url:
        endpoint.base_url = base_url
        yield endpoint


class AttemptWatch:
    """Counts the attempts the gateway records, per webhook; tests wait on it (no polling)."""

    def __init__(self, env: Env) -> None:
        self.counts: Counter[str] = Counter()
        self._changed = anyio.Event()
        store = env.gateway.webhooks
        record = store.record_attempt

        async def counted(workspace_id: str, webhook_id: str, attempt: Any) -> None:
            await record(workspace_id, webhook_id, attempt)
            self.counts[webhook_id] += 1
            self._changed.set()
            self._changed = anyio.Event()

        store.record_attempt = counted  # type: ignore[method-assign]

    async def wait(self, webhook_id: str, count: int, *, within: float = 20.0) -> None:
        with anyio.fail_after(within):
            while self.counts[webhook_id] < count:
                await self._changed.wait()


@asynccontextmanager
async def hub(**webhooks: Any) -> AsyncIterator[tuple[Env, AttemptWatch]]:
    """A gateway on a fake clock, its worker's schedule the default one."""
    async with provisioned("scale", webhooks={**LOOPBACK, **webhooks}) as env:
        yield env, AttemptWatch(env)


async def settle(env: Env, seconds: float = 0.0) -> None:
    """Let ``seconds`` pass on the fake clock, then wait until the worker has made every
    attempt due by then (it has nothing left to do at the clock's time)."""
    env.clock.advance(seconds)
    worker = env.gateway.webhook_worker
    assert worker is not None
    with anyio.fail_after(20):  # a guard: a hang fails the test, it never passes one
        await worker.wait_idle()


async def outlast_the_schedule(env: Env) -> None:
    """Let every backoff of the schedule pass, one after the other: whatever could still be
    retried has been, so a count taken now is final."""
    await settle(env)
    for delay in DEFAULTS.retry_backoff_s:
        await settle(env, delay)


async def create(env: Env, url: str, **fields: Any) -> dict[str, Any]:
    response = await env.recorder.request(
        "POST",
        f"/api/v1/workspaces/{env.workspace_id}/webhooks",
        json={"name": "hook", "url": url, "secret": SECRET, **fields},
        headers=env.auth(),
    )
    assert response.status == 201, response.body
    hook: dict[str, Any] = response.json()
    return hook


async def read(env: Env, hook_id: str, suffix: str = "") -> Any:
    path = f"/api/v1/workspaces/{env.workspace_id}/webhooks/{hook_id}{suffix}"
    return (await env.recorder.request("GET", path, headers=env.auth())).json()


async def publish(env: Env, event_type: str = "budget.alert") -> Event:
    event = sample_event(event_type, workspace_id=env.workspace_id)
    await env.gateway.events.publish(event)
    return event


def independent_signature(body: bytes) -> str:
    return hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


async def test_a_delivery_succeeds_at_the_first_try(receiver: Receiver) -> None:
    async with hub() as (env, watch):
        hook = await create(env, receiver.script("/ok", [200]))
        event = await publish(env)
        [hit] = await receiver.wait_for("/ok", 1)
        assert hit.body == event.to_bytes()
        assert hit.headers["content-type"] == "application/json"
        assert hit.headers["x-service-event-id"] == event.event_id
        assert hit.headers["x-service-signature"] == independent_signature(hit.body)
        assert hit.headers["webhook-id"] == event.event_id
        assert hit.headers["webhook-signature"].startswith("v1,")
        assert json.loads(hit.body)["event_id"] == event.event_id
        await watch.wait(hook["id"], 1)
        view = await read(env, hook["id"])
        assert (view["status"], view["last_status"]) == ("active", 200)
        assert view["last_fired_at"].endswith("Z")
        [attempt] = (await read(env, hook["id"], "/deliveries"))["data"]
        assert attempt["event_id"] == event.event_id
        assert (attempt["attempt"], attempt["status"], attempt["error_class"]) == (1, 200, None)


async def test_503_four_times_then_200_is_five_attempts_with_growing_gaps(
    receiver: Receiver,
) -> None:
    async with hub() as (env, watch):
        hook = await create(env, receiver.script("/flaky", [503, 503, 503, 503, 200]))
        event = await publish(env)
        await settle(env)
        assert len(receiver.hits_for("/flaky")) == 1  # attempt 1 is immediate
        for made, planned in enumerate(SCHEDULE, start=1):
            await settle(env, planned - POLL)  # the worker polls, and finds nothing due yet
            assert len(receiver.hits_for("/flaky")) == made, f"retry {made} came early"
            await settle(env, POLL)
            assert len(receiver.hits_for("/flaky")) == made + 1, f"retry {made} is late"
        hits = await receiver.wait_for("/flaky", 5)
        await outlast_the_schedule(env)  # room for a (wrong) sixth attempt to show up
        assert len(receiver.hits_for("/flaky")) == 5
        assert {hit.headers["x-service-event-id"] for hit in hits} == {event.event_id}
        assert [hit.headers["x-service-delivery-attempt"] for hit in hits] == list("12345")
        # The gaps on the gateway's clock, as each attempt's signed timestamp tells them.
        sent_at = [int(hit.headers["webhook-timestamp"]) for hit in hits]
        gaps = [later - earlier for earlier, later in itertools.pairwise(sent_at)]
        for gap, planned in zip(gaps, SCHEDULE, strict=True):
            assert planned * 0.9 <= gap < planned + 1.0, gaps
        assert gaps == sorted(gaps)
        assert tuple(gaps) == SCHEDULE == DEFAULTS.retry_backoff_s[:4]
        await watch.wait(hook["id"], 5)
        view = await read(env, hook["id"])
        assert (view["status"], view["last_status"]) == ("active", 200)


async def test_500_always_makes_the_webhook_stale_and_tells_only_the_others(
    receiver: Receiver,
) -> None:
    # One attempt at a time per webhook, so the two replayed deliveries arrive in replay order
    # (due at the same instant of the fake clock, with more slots they would race on the wire).
    async with hub(per_webhook_concurrency=1) as (env, _):
        doomed = await create(env, receiver.script("/down", [500]), name="down")
        other = await create(env, receiver.script("/witness", [200]), name="witness")
        event = await publish(env)
        await settle(env)
        for delay in SCHEDULE:
            await settle(env, delay)
        await receiver.wait_for("/down", 5)
        witnessed = await receiver.wait_for("/witness", 2)  # the event, then webhook.stale
        stale_events = [json.loads(h.body) for h in witnessed if b"webhook.stale" in h.body]
        [stale] = stale_events
        assert stale["data"]["webhook_id"] == doomed["id"]
        assert stale["data"]["failed_event_id"] == event.event_id
        assert stale["data"]["last_status"] == 500
        assert stale["data"]["url_host"] == "127.0.0.1"
        assert (await read(env, doomed["id"]))["status"] == "stale"
        assert (await read(env, other["id"]))["status"] == "active"

        # A stale webhook receives nothing new: its events are held, not lost.
        held = await publish(env, "key.rotated")
        await receiver.wait_for("/witness", 3)
        await outlast_the_schedule(env)
        assert len(receiver.hits_for("/down")) == 5
        assert all(b"webhook.stale" not in hit.body for hit in receiver.hits_for("/down"))

        # Re-activated and replayed: both events arrive, with their own event ids.
        receiver.script("/down", [500] * 5 + [200])
        path = f"/api/v1/workspaces/{env.workspace_id}/webhooks/{doomed['id']}"
        refused = await env.recorder.request(
            "POST", path + "/replay", json={"since": "2026-01-01T00:00:00Z"}, headers=env.auth()
        )
        assert refused.status == 409  # stale: replaying now would only hold them again
        patched = await env.recorder.request(
            "PATCH", path, json={"status": "active"}, headers=env.auth()
        )
        assert patched.json()["status"] == "active"
        replayed = await env.recorder.request(
            "POST", path + "/replay", json={"since": "2026-01-01T00:00:00Z"}, headers=env.auth()
        )
        assert replayed.json() == {"requeued": 2, "event_ids": [event.event_id, held.event_id]}
        await settle(env, POLL)  # a replay wakes no worker: the next poll finds it
        hits = await receiver.wait_for("/down", 7)
        assert [h.headers["x-service-event-id"] for h in hits[5:]] == [
            event.event_id,
            held.event_id,
        ]


async def test_a_4xx_is_one_attempt_and_not_stale(receiver: Receiver) -> None:
    async with hub() as (env, watch):
        hook = await create(env, receiver.script("/bad-request", [400]))
        await publish(env)
        await receiver.wait_for("/bad-request", 1)
        await watch.wait(hook["id"], 1)
        await outlast_the_schedule(env)
        assert len(receiver.hits_for("/bad-request")) == 1
        view = await read(env, hook["id"])
        assert (view["status"], view["last_status"]) == ("active", 400)


@pytest.mark.parametrize("status", [408, 429])
async def test_408_and_429_are_retried(receiver: Receiver, status: int) -> None:
    async with hub() as (env, _):
        path = f"/slow-down-{status}"
        await create(env, receiver.script(path, [status, 200]))
        await publish(env)
        await settle(env)
        await settle(env, SCHEDULE[0])
        assert len(await receiver.wait_for(path, 2)) == 2


async def test_a_302_counts_as_success_and_is_not_followed(receiver: Receiver) -> None:
    async with hub() as (env, watch):
        hook = await create(env, receiver.script("/moved", [302]))
        await publish(env)
        await receiver.wait_for("/moved", 1)
        await watch.wait(hook["id"], 1)
        await outlast_the_schedule(env)
        assert receiver.hits_for("/redirected") == []
        assert len(receiver.hits_for("/moved")) == 1
        view = await read(env, hook["id"])
        assert (view["status"], view["last_status"]) == ("active", 302)


async def test_a_receiver_slower_than_the_deadline_gets_last_status_0(receiver: Receiver) -> None:
    async with hub() as (env, watch):  # the spec's 5 s deadline, a receiver taking 6 s
        hook = await create(env, receiver.script("/sleepy", [(200, 6.0)]))
        await publish(env)
        await watch.wait(hook["id"], 1, within=15)
        [attempt] = (await read(env, hook["id"], "/deliveries"))["data"][-1:]
        assert (attempt["status"], attempt["error_class"]) == (0, "timeout")
        assert 4900 <= attempt["duration_ms"] < 6000
        assert (await read(env, hook["id"]))["last_status"] == 0


async def test_a_refused_connection_gets_last_status_0() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with hub() as (env, watch):
        hook = await create(env, f"http://127.0.0.1:{port}/nobody")
        await publish(env)
        await watch.wait(hook["id"], 1)
        [attempt] = (await read(env, hook["id"], "/deliveries"))["data"][-1:]
        assert (attempt["status"], attempt["error_class"]) == (0, "connection_error")
        assert (await read(env, hook["id"]))["last_status"] == 0


async def test_filters_omitted_a_list_and_empty_on_create_and_update(receiver: Receiver) -> None:
    async with hub() as (env, _):
        every = await create(env, receiver.script("/f-all", [200]))
        some = await create(env, receiver.script("/f-some", [200]), events=["budget.alert"])
        paused = await create(env, receiver.script("/f-paused", [200]), events=[])
        assert (every["events"], some["events"], paused["events"]) == (None, ["budget.alert"], [])
        assert paused["status"] == "paused"
        await publish(env, "budget.alert")
        await publish(env, "key.rotated")
        await receiver.wait_for("/f-all", 2)
        await receiver.wait_for("/f-some", 1)
        await settle(env)  # every delivery queued by the two events has been made
        assert len(receiver.hits_for("/f-some")) == 1
        assert receiver.hits_for("/f-paused") == []

        base = f"/api/v1/workspaces/{env.workspace_id}/webhooks"
        for hook_id, events in ((some["id"], ["key.rotated"]), (paused["id"], None)):
            response = await env.recorder.request(
                "PATCH", f"{base}/{hook_id}", json={"events": events}, headers=env.auth()
            )
            assert response.json()["events"] == events
        await publish(env, "key.rotated")
        await receiver.wait_for("/f-some", 2)
        await receiver.wait_for("/f-paused", 1)
        assert json.loads(receiver.hits_for("/f-some")[-1].body)["event"] == "key.rotated"


async def test_one_slow_endpoint_does_not_starve_the_others(receiver: Receiver) -> None:
    async with hub(concurrency=8, per_webhook_concurrency=2) as (env, _):
        await create(env, receiver.script("/treacle", [(200, 1.0)]), events=["budget.alert"])
        await create(env, receiver.script("/brisk", [200]), events=["key.rotated"])
        for _ in range(12):
            await publish(env, "budget.alert")
        await receiver.wait_for("/treacle", 2)  # the slow one is busy
        started = anyio.current_time()
        await publish(env, "key.rotated")
        await receiver.wait_for("/brisk", 1)
        assert anyio.current_time() - started < 0.9  # not behind the slow one's queue
        assert len(receiver.hits_for("/treacle")) < 12


async def test_a_deleted_webhook_gets_nothing_more(receiver: Receiver) -> None:
    async with hub() as (env, _):
        hook = await create(env, receiver.script("/gone", [503]))
        await publish(env)
        await receiver.wait_for("/gone", 1)
        deleted = await env.recorder.request(
            "DELETE",
            f"/api/v1/workspaces/{env.workspace_id}/webhooks/{hook['id']}",
            headers=env.auth(),
        )
        assert deleted.json()["deleted"] is True
        await outlast_the_schedule(env)
        assert len(receiver.hits_for("/gone")) == 1


async def test_the_test_endpoint_reports_status_latency_and_error_class_only(
    receiver: Receiver,
) -> None:
    async with hub() as (env, _):
        hook = await create(env, receiver.script("/probe", [418]))
        response = await env.recorder.request(
            "POST",
            f"/api/v1/workspaces/{env.workspace_id}/webhooks/{hook['id']}/test",
            json={"event": "payment.failed"},
            headers=env.auth(),
        )
        result = response.json()
        assert set(result) == {"event_id", "event", "status_code", "latency_ms", "error_class"}
        assert (result["status_code"], result["error_class"]) == (418, "http_status")
        assert b"private body" not in response.body
        [hit] = await receiver.wait_for("/probe", 1)
        assert json.loads(hit.body)["event"] == "payment.failed"
        assert hit.headers["x-service-signature"] == independent_signature(hit.body)
        # A sample, said so: a signed test payment.succeeded was read as a payment.
        assert hit.headers["x-service-test"] == "true"


async def test_a_real_delivery_carries_no_test_marker(receiver: Receiver) -> None:
    async with hub() as (env, _):
        await create(env, receiver.script("/real", [200]))
        await publish(env)
        [hit] = await receiver.wait_for("/real", 1)
        assert "x-service-test" not in hit.headers
