"""The webhook receiver example under uvicorn, fed by a real gateway and by hand-made posts."""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.testclient import TestClient

from examples.webhook_receiver import create_app
from gateway_kit import sample_event
from gateway_kit.testing import run_server
from tests.fakes import provisioned

pytestmark = pytest.mark.slow

SECRET = "whsec_" + "r" * 40
FAST = {
    "allow_http": True,
    "allow": ["127.0.0.0/8"],
    "poll_interval_s": 0.02,
    "retry_backoff_s": [0.2, 0.4, 0.6, 0.8],
}


class Handled:
    """The events the example handed to its handler.

    The handler runs on the server's thread and event loop, so arrivals are signalled with a
    ``threading.Condition``; a test waits for them in a worker thread (a condition, no timer).
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()

    async def __call__(self, event: dict[str, Any]) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def of(self, event_id: str) -> list[dict[str, Any]]:
        with self._changed:
            return [event for event in self.events if event["event_id"] == event_id]

    async def wait_for(self, *event_ids: str, within: float = 20.0) -> None:
        def arrived() -> bool:
            return set(event_ids) <= {event["event_id"] for event in self.events}

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(arrived, within)

        if not await anyio.to_thread.run_sync(wait):
            raise AssertionError(f"not handled within {within} s: {event_ids}")


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, Handled]]:
    handled = Handled()
    with run_server(create_app(SECRET, handled)) as base_url:
        yield f"{base_url}/webhooks", handled


def signed(body: bytes, secret: str = SECRET) -> dict[str, str]:
    """The headers of a delivery, signed independently of gateway_kit."""
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"content-type": "application/json", "x-service-signature": signature}


async def flush(client: httpx.AsyncClient, url: str, handled: Handled) -> None:
    """Post a fresh event and wait until it is handled: the queue is FIFO with one consumer,
    so everything accepted before it has been handled too."""
    marker = sample_event("key.rotated").to_bytes()
    response = await client.post(url, content=marker, headers=signed(marker))
    assert response.status_code == 200
    await handled.wait_for(json.loads(marker)["event_id"])


@pytest.mark.anyio
async def test_gateway_deliveries_are_handled_once_each(receiver: tuple[str, Handled]) -> None:
    url, handled = receiver
    async with provisioned("scale", real_clock=True, webhooks=FAST) as env:
        created = await env.recorder.request(
            "POST",
            f"/api/v1/workspaces/{env.workspace_id}/webhooks",
            json={"name": "receiver example", "url": url, "secret": SECRET},
            headers=env.auth(),
        )
        assert created.status == 201, created.body
        events = [
            sample_event(event_type, workspace_id=env.workspace_id)
            for event_type in ("budget.alert", "payment.succeeded", "guardian.block")
        ]
        for event in events:
            await env.gateway.events.publish(event)

        await handled.wait_for(*(event.event_id for event in events))
        async with httpx.AsyncClient() as client:
            await flush(client, url, handled)
        for event in events:
            assert handled.of(event.event_id) == [json.loads(event.to_bytes())]


@pytest.mark.anyio
async def test_forged_bodies_get_401_and_redeliveries_are_acknowledged_but_handled_once(
    receiver: tuple[str, Handled],
) -> None:
    url, handled = receiver
    event = sample_event("payment.failed")
    body = event.to_bytes()
    forged = body.replace(b'"attempt_count":1', b'"attempt_count":9')
    assert forged != body
    async with httpx.AsyncClient() as client:
        refusals = [
            (forged, signed(body)),  # altered after signing
            (body, signed(body, "whsec_" + "x" * 40)),  # signed with another secret
            (body, {"content-type": "application/json"}),  # not signed at all
            (b"not json", signed(body)),  # verified before parsing: 401, not 400
        ]
        for content, headers in refusals:
            refused = await client.post(url, content=content, headers=headers)
            assert refused.status_code == 401
            assert refused.json() == {"error": "invalid signature"}

        first = await client.post(url, content=body, headers=signed(body))
        assert first.status_code == 200
        assert first.json() == {"received": True, "duplicate": False}
        # The same signed bytes again, once as is and once under another (unsigned) header id.
        for extra in ({}, {"x-service-event-id": "evt_" + "1" * 32}):
            again = await client.post(url, content=body, headers={**signed(body), **extra})
            assert again.status_code == 200
            assert again.json() == {"received": True, "duplicate": True}

        await flush(client, url, handled)
    assert handled.of(event.event_id) == [json.loads(body)]


def test_the_module_app_takes_its_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    module = importlib.reload(importlib.import_module("examples.webhook_receiver"))
    # Without a secret it would refuse every delivery, so it refuses to start instead.
    with pytest.raises(RuntimeError, match="WEBHOOK_SECRET"), TestClient(module.app):
        pass

    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    module = importlib.reload(module)
    body = sample_event("account.low_balance").to_bytes()
    with run_server(module.app) as base_url:
        response = httpx.post(f"{base_url}/webhooks", content=body, headers=signed(body))
        assert response.json() == {"received": True, "duplicate": False}


def test_the_answer_does_not_wait_for_the_work() -> None:
    release, started, finished = threading.Event(), threading.Event(), threading.Event()

    async def slow(event: dict[str, Any]) -> None:
        started.set()
        await anyio.to_thread.run_sync(release.wait)
        finished.set()

    body = sample_event("security.event").to_bytes()
    with run_server(create_app(SECRET, slow)) as base_url:
        try:
            # Handled inline, this post would hang until the release and time out.
            response = httpx.post(
                f"{base_url}/webhooks", content=body, headers=signed(body), timeout=5
            )
            assert response.json() == {"received": True, "duplicate": False}
            assert started.wait(5)
            assert not finished.is_set()
        finally:
            release.set()
        assert finished.wait(5)
