"""Deliveries survive the process: kill -9 mid-retry, restart, everything arrives; two worker
processes share the queue without making the same attempt twice.

The events are published by a Gateway in the test process (``run_worker=False``), so they sit in
the durable queue; real ``gateway-kit serve`` / ``gateway-kit worker`` processes deliver them to a
real receiver on loopback.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest

from gateway_kit import Gateway, load_config, sample_event
from gateway_kit.testing import run_server
from tests.servers import free_port, launched
from tests.webhooks.receiver import Hit, Receiver

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "whsec_" + "d" * 40
EVENTS = 20


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    with run_server(endpoint) as base_url:
        endpoint.base_url = base_url
        yield endpoint


def write_config(path: Path, storage: str) -> Path:
    path.write_text(
        f"[storage]\n{storage}\n\n"
        "[webhooks]\n"
        'allow = ["127.0.0.0/8"]\n'
        "allow_http = true\n"
        "retry_backoff_s = [0.3, 0.6, 0.9, 1.2]\n"
        "poll_interval_s = 0.05\n"
        "timeout_s = 1.0\n"
        "lease_s = 1.5\n"
    )
    return path


async def publish_events(config_file: Path, url: str, count: int) -> set[str]:
    """A workspace, a webhook to ``url``, and ``count`` events queued for it; their ids."""
    async with Gateway(load_config(config_file), run_worker=False) as gateway:
        workspace = await gateway.workspaces.create("ops@example.com")
        await gateway.webhooks.create(
            workspace.id, name="durable", url=url, secret=SECRET, events=None
        )
        ids = set()
        for _ in range(count):
            event = sample_event("budget.alert", workspace_id=workspace.id)
            await gateway.events.publish(event)
            ids.add(event.event_id)
        return ids


def delivered(hits: list[Hit]) -> set[str]:
    return {hit.headers["x-service-event-id"] for hit in hits if hit.status < 300}


async def test_a_killed_gateway_loses_nothing_after_a_restart(
    receiver: Receiver, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "gateway.toml", f'url = "sqlite:///{tmp_path}/gk.db"')
    # The first 12 hits fail (so deliveries are retrying when the kill comes), then slow
    # successes (so some attempts are in flight when it comes).
    url = receiver.script("/durable", [503] * 12 + [(200, 0.2)])
    ids = await publish_events(config, url, EVENTS)
    serve = ["serve", "--config", str(config), "--port", str(free_port())]

    with launched(*serve, ready="Uvicorn running on", cwd=tmp_path) as (first, _):
        await receiver.wait_for("/durable", 16)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    before_restart = delivered(receiver.hits_for("/durable"))
    assert before_restart < ids  # killed with work still to do

    with launched(*serve, ready="Uvicorn running on", cwd=tmp_path):
        with anyio.fail_after(30):
            while delivered(receiver.hits_for("/durable")) != ids:
                await receiver.wait_for("/durable", len(receiver.hits_for("/durable")) + 1)
    hits = receiver.hits_for("/durable")
    assert {hit.headers["x-service-event-id"] for hit in hits} == ids  # nothing foreign
    # At least once: an attempt in flight at the kill may arrive twice, with the same event id.
    assert all(hit.headers["webhook-id"] == hit.headers["x-service-event-id"] for hit in hits)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def test_two_worker_processes_never_make_the_same_attempt(
    receiver: Receiver, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "redis":
        redis_url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        storage = f'url = "{redis_url}"\nredis_prefix = "{prefix}"'
    else:
        storage = f'url = "sqlite:///{tmp_path}/gk.db"'
    config = write_config(tmp_path / "gateway.toml", storage)
    count = 100
    # Every delivery fails once, so each event is attempted twice: two claims per event.
    url = receiver.script("/shared", [503] * count + [200])
    ids = await publish_events(config, url, count)

    with ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(
                launched("worker", "--config", str(config), ready="delivering", cwd=tmp_path)
            )
        with anyio.fail_after(60):
            while delivered(receiver.hits_for("/shared")) != ids:
                await receiver.wait_for("/shared", len(receiver.hits_for("/shared")) + 1)

    # Counted once both workers have exited (the block's end waits for them): they make no
    # more attempts, so there is no wait for a duplicate that might still show up.
    hits = receiver.hits_for("/shared")
    attempts = Counter(
        (hit.headers["x-service-event-id"], hit.headers["x-service-delivery-attempt"])
        for hit in hits
    )
    assert [pair for pair, seen in attempts.items() if seen > 1] == []
    assert len(hits) == 2 * count
