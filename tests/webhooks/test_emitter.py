"""The emitter and the events it fans out, with text stored before the API refused it.

A webhook named with a lone surrogate (the API once accepted ``"\\ud800"``) made its own
``webhook.stale`` event fail validation, so the workspace's other webhooks never heard that it
went stale. The API refuses such names now (``tests/api/test_common.py``); a name stored
before still gets its event, with U+FFFD in place of the surrogate.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import anyio
import httpx
import pytest

from gateway_kit import MemoryStorage
from gateway_kit.config import WebhooksConfig
from gateway_kit.events.bus import EventBus
from gateway_kit.events.models import Event, WebhookStaleData, sample_event
from gateway_kit.testing import FakeClock
from gateway_kit.webhooks.emitter import QUEUE, Delivery, WebhookEmitter
from gateway_kit.webhooks.store import WebhookStore
from gateway_kit.webhooks.worker import DeliveryWorker

pytestmark = pytest.mark.anyio

WORKSPACE = "ws_emitter"
SECRET = "whsec_" + "e" * 40


def test_an_event_about_a_name_with_a_lone_surrogate_can_be_serialized() -> None:
    data = WebhookStaleData(
        webhook_id="wh_old",
        name="billing \ud800 hook",
        url_host="hooks.example.com",
        last_status=500,
        failed_event_id="evt_" + "a" * 26,
        stale_at=datetime(2026, 11, 18, tzinfo=UTC),
    )
    assert data.name == "billing \ufffd hook"
    body = Event.create(data, workspace_id=WORKSPACE).to_bytes()
    assert json.loads(body)["data"]["name"] == "billing \ufffd hook"


async def test_a_webhook_stored_with_a_lone_surrogate_in_its_name_still_goes_stale_loudly() -> None:
    clock = FakeClock()
    async with MemoryStorage(clock=clock) as storage:
        store = WebhookStore(storage, max_per_workspace=10, log_size=50)
        doomed = await store.create(
            WORKSPACE,
            name="down \udc00",
            url="https://hooks.example.com/down",
            secret=SECRET,
            events=None,
        )
        await store.create(
            WORKSPACE,
            name="witness",
            url="https://hooks.example.com/witness",
            secret=SECRET,
            events=None,
        )
        witnessed: list[bytes] = []

        async def receiver(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/down":
                return httpx.Response(500)
            witnessed.append(request.content)
            return httpx.Response(200)

        events = EventBus()
        config = WebhooksConfig()
        async with httpx.AsyncClient(transport=httpx.MockTransport(receiver)) as client:
            worker = DeliveryWorker(
                storage=storage,
                store=store,
                client=client,
                events=events,
                config=config,
                clock=clock,
            )
            events.subscribe(WebhookEmitter(store, storage, on_queued=worker.wake))
            async with anyio.create_task_group() as tasks:
                await tasks.start(worker.run)
                await events.publish(sample_event("budget.alert", workspace_id=WORKSPACE))
                for delay in (0.0, *config.retry_backoff_s):
                    clock.advance(delay)
                    with anyio.fail_after(10):
                        await worker.wait_idle()
                tasks.cancel_scope.cancel()
        stale = [json.loads(body) for body in witnessed if b"webhook.stale" in body]
        assert [e["data"]["webhook_id"] for e in stale] == [doomed.id]
        assert stale[0]["data"]["name"] == "down \ufffd"
        assert (await store.get(WORKSPACE, doomed.id)).stale_at is not None  # type: ignore[union-attr]


async def test_queued_deliveries_of_such_an_event_read_back_exactly() -> None:
    async with MemoryStorage() as storage:
        store = WebhookStore(storage, max_per_workspace=10, log_size=50)
        hook = await store.create(
            WORKSPACE, name="other", url="https://hooks.example.com/o", secret=SECRET, events=None
        )
        data = WebhookStaleData(
            webhook_id="wh_gone",
            name="\ud800",
            url_host="hooks.example.com",
            last_status=0,
            failed_event_id="evt_" + "b" * 26,
            stale_at=datetime(2026, 11, 18, tzinfo=UTC),
        )
        event = Event.create(data, workspace_id=WORKSPACE)
        await WebhookEmitter(store, storage)(event)
        [item] = await storage.claim(QUEUE, limit=10, lease=30)
        delivery = Delivery.from_bytes(item.payload)
        assert delivery.webhook_id == hook.id
        assert Event.from_bytes(delivery.body) == event
