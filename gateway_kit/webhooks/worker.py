"""``DeliveryWorker``: claims due deliveries from the queue and makes their attempts.

Any number of workers (inside gateway processes, or ``gateway-kit worker``) share the queue:
a claim leases an item to one worker with a fencing token, so two workers never make the same
attempt; a worker that dies mid-attempt lets its lease lapse and the attempt is made again
(at-least-once delivery, the same ``event_id`` every time).

For each delivery: a deleted webhook drops it; a stale or paused one holds it (dead-lettered
and indexed for a replay); a webhook with ``per_webhook_concurrency`` attempts under way parks
it in memory, still leased and taking no slot, until one of them ends (so one slow endpoint
cannot take every slot, and a backlog for one endpoint drains at the speed of its slots, not
of the poll interval); past ``4 x concurrency`` parked deliveries, or a lease too short to make
the attempt under it, the delivery goes back to the queue. Otherwise one attempt:
success acks; a retryable failure is queued again after the next backoff; the last failed
attempt makes the webhook stale (exactly once: a compare-and-set) and publishes
``webhook.stale``; a rejection (4xx but 408/429) ends it. Every attempt updates
``last_fired_at``/``last_status`` and the attempt log.

Time comes from ``clock``: timestamps, the lease arithmetic and the idle wait between polls
(a ``Clock``, such as ``gateway_kit.testing.FakeClock``, drives all three; a plain
``() -> float`` gives the timestamps and the lease, and waits in real time). Due times are the
store's (``storage.now()``), so storage and worker share one clock. The HTTP deadline of an
attempt stays real time: a receiver's slowness is. ``wait_idle()`` lets a test wait until the
worker has nothing left to do at the clock's current time, instead of sleeping.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.lowlevel
import httpx
from anyio.abc import TaskGroup

from gateway_kit._clock import Clock, waitable
from gateway_kit.config import WebhooksConfig
from gateway_kit.events.bus import EventBus
from gateway_kit.events.models import Event, WebhookStaleData
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import ClaimedItem, Storage
from gateway_kit.webhooks import delivery
from gateway_kit.webhooks.emitter import QUEUE, Delivery
from gateway_kit.webhooks.store import Attempt, WebhookStore

logger = logging.getLogger("gateway_kit.webhooks")

_CLAIM_BATCH = 64
#: An attempt's outcome as the metrics name it (``gateway_webhook_attempts_total``).
_REPORTED = {"reject": "rejected"}


class DeliveryWorker:
    """Run with ``await worker.run()`` (in a task group); ``wake()`` ends the idle wait early.

    ``clock`` (Unix seconds; default real time) times everything but the HTTP deadline: a
    ``Clock`` also times the idle wait. ``await worker.wait_idle()`` returns once nothing is
    left to do at the clock's current time.
    """

    def __init__(
        self,
        *,
        storage: Storage,
        store: WebhookStore,
        client: httpx.AsyncClient,
        events: EventBus,
        config: WebhooksConfig,
        clock: Callable[[], float] = time.time,
        on_attempt: Callable[[str], None] | None = None,
    ) -> None:
        self._storage = storage
        #: Told each attempt's outcome (``success``, ``retry``, ``held``, ``rejected``): the
        #: metrics.
        self._on_attempt = on_attempt
        self._store = store
        self._client = client
        self._events = events
        self._config = config
        self._clock: Clock = waitable(clock)
        self._in_flight = 0
        # The idle wait: its cancel scope while it lasts, when it ends by the clock, whether
        # a wake() came (while waiting, or since: the next wait is skipped), and whether the
        # last claim got every due delivery (fewer than it asked for).
        self._nap: anyio.CancelScope | None = None
        self._nap_until = 0.0
        self._woken = False
        self._caught_up = False
        self._napping = anyio.Event()  # set, then replaced, each time an idle wait begins
        self._per_webhook: Counter[str] = Counter()
        self._parked: dict[str, deque[tuple[ClaimedItem, float]]] = {}
        self._parked_count = 0
        self._tasks: TaskGroup | None = None

    def wake(self) -> None:
        """Look for due deliveries now rather than at the next poll (some were queued)."""
        self._woken = True
        if self._nap is not None:
            self._nap.cancel()

    async def wait_idle(self) -> None:
        """Return once the worker has nothing left to do at the clock's current time.

        That is: no delivery in flight or parked, the last claim found no more due ones, no
        ``wake()`` pending, and the clock short of the next poll. A test advances its fake
        clock, then awaits this instead of sleeping for an attempt that should not come.
        """
        while not self._idle():
            await self._napping.wait()

    def _idle(self) -> bool:
        return (
            self._nap is not None
            and not self._woken
            and self._caught_up
            and self._in_flight == 0
            and self._parked_count == 0
            and self._clock() < self._nap_until
        )

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            task_status.started()
            while True:
                room = self._config.concurrency - self._in_flight
                if room <= 0:
                    await self._pause()  # every slot is busy: a finished delivery wakes us
                    continue
                items: list[ClaimedItem] = []
                limit = min(room, _CLAIM_BATCH)
                # Read before the claim, so the lease left is never overestimated, and on the
                # clock the store leases by (they share one), not a monotonic one.
                claimed_at = self._clock()
                try:
                    items = await self._storage.claim(
                        QUEUE, limit=limit, lease=self._config.lease_s
                    )
                    self._caught_up = len(items) < limit
                except StorageError as exc:
                    self._caught_up = False  # it found nothing, but nor did it look
                    logger.error("webhook worker cannot claim deliveries: %s", exc)
                for item in items:
                    self._in_flight += 1
                    tasks.start_soon(self._handle, item, claimed_at)
                if len(items) < limit:
                    await self._pause()
                else:
                    await anyio.lowlevel.checkpoint()  # a full batch: claim again, fairly

    async def _pause(self) -> None:
        """Wait until the next poll (by the clock) or a ``wake()``, whichever comes first."""
        if not self._woken:
            self._nap_until = self._clock() + self._config.poll_interval_s
            self._nap = anyio.CancelScope()  # wake() cancels it
            with self._nap:
                self._napping.set()
                self._napping = anyio.Event()
                await self._clock.sleep_until(self._nap_until)
            self._nap = None
        self._woken = False

    async def _handle(self, item: ClaimedItem, claimed_at: float) -> None:
        try:
            await self._process(item, claimed_at)
        except StorageError as exc:
            # The lease lapses and the delivery comes back: nothing is lost.
            logger.error("webhook delivery %s: storage failed: %s", item.item_id, exc)
        except Exception:
            logger.exception("webhook delivery %s failed unexpectedly", item.item_id)
        finally:
            self._in_flight -= 1
            self.wake()

    async def _process(self, item: ClaimedItem, claimed_at: float) -> None:
        try:
            job = Delivery.from_bytes(item.payload)
        except (ValueError, TypeError):
            logger.error("webhook delivery %s has an unreadable payload", item.item_id)
            await self._storage.dead(QUEUE, item.token, reason="unreadable")
            return
        hook = await self._store.get(job.workspace_id, job.webhook_id)
        if hook is None:
            await self._storage.ack(QUEUE, item.token)  # the webhook was deleted
            return
        if hook.status != "active":
            await self._hold(item, job, hook.status)
            return
        if self._per_webhook[hook.id] >= self._config.per_webhook_concurrency:
            if self._parked_count < 4 * self._config.concurrency:
                self._parked.setdefault(hook.id, deque()).append((item, claimed_at))
                self._parked_count += 1
                return
            due = await self._storage.now() + self._config.poll_interval_s
            await self._storage.retry(QUEUE, item.token, due_at=due)
            return
        # The whole attempt must fit in what is left of the lease, or another worker could
        # claim the delivery while this one still makes it.
        lease_left = self._config.lease_s - (self._clock() - claimed_at)
        if lease_left <= self._config.timeout_s:
            await self._storage.retry(QUEUE, item.token, due_at=await self._storage.now())
            return
        self._per_webhook[hook.id] += 1
        try:
            number = job.attempts + 1
            result = await delivery.attempt(
                self._client,
                url=hook.url,
                body=job.body.encode(),
                secret=hook.secret,
                event_id=job.event_id,
                attempt_number=number,
                deadline_s=self._config.timeout_s,
                clock=self._clock,
            )
        finally:
            self._per_webhook[hook.id] -= 1
            if not self._per_webhook[hook.id]:
                del self._per_webhook[hook.id]
            self._unpark(hook.id)
        await self._store.record_attempt(
            job.workspace_id,
            hook.id,
            Attempt(
                job.event_id,
                job.event,
                number,
                result.started_at,
                result.duration_ms,
                result.status,
                result.error_class,
            ),
        )
        outcome = result.outcome
        if self._on_attempt is not None:
            last = outcome == "retry" and number >= self._config.max_attempts
            self._on_attempt("held" if last else _REPORTED.get(outcome, outcome))
        if outcome != "success":
            # Ids, status and error class only: never the URL (it may carry a token) or body.
            logger.warning(
                "webhook %s of %s: attempt %d of event %s (%s) failed: status %d%s",
                hook.id,
                job.workspace_id,
                number,
                job.event_id,
                job.event,
                result.status,
                f" ({result.error_class})" if result.error_class else "",
            )
        if outcome == "success":
            await self._storage.ack(QUEUE, item.token)
        elif outcome == "retry" and number < self._config.max_attempts:
            due = await self._storage.now() + self._config.retry_backoff_s[number - 1]
            await self._storage.retry(
                QUEUE, item.token, due_at=due, payload=replace(job, attempts=number).to_bytes()
            )
        elif outcome == "retry":
            await self._hold(item, replace(job, attempts=number), "failed")
            stale_at = self._clock()
            if await self._store.mark_stale(job.workspace_id, hook.id, at=stale_at):
                logger.warning("webhook %s is stale after %d failed attempts", hook.id, number)
                data = WebhookStaleData(
                    webhook_id=hook.id,
                    name=hook.name,
                    url_host=httpx.URL(hook.url).host or "unknown",
                    last_status=result.status,
                    failed_event_id=job.event_id,
                    stale_at=datetime.fromtimestamp(stale_at, UTC),
                )
                await self._events.publish(Event.create(data, workspace_id=job.workspace_id))
        else:
            await self._hold(item, replace(job, attempts=number), "rejected")

    def _unpark(self, webhook_id: str) -> None:
        """A slot of ``webhook_id`` is free: start its next parked delivery."""
        queue = self._parked.get(webhook_id)
        if not queue or self._tasks is None:
            return
        item, claimed_at = queue.popleft()
        if not queue:
            del self._parked[webhook_id]
        self._parked_count -= 1
        self._in_flight += 1
        self._tasks.start_soon(self._handle, item, claimed_at)

    async def _hold(self, item: ClaimedItem, job: Delivery, reason: str) -> None:
        """Dead-letter the delivery and index it for a replay (index first: see below)."""
        # Indexed before it is dead-lettered: a crash in between leaves the item leased, so it
        # comes back and is handled again, and the index entry is found harmless at replay.
        await self._store.index_dead(
            job.workspace_id,
            job.webhook_id,
            job.item_id,
            {
                "event_id": job.event_id,
                "event": job.event,
                "timestamp": job.timestamp,
                "reason": reason,
                "delivery": job.fresh().to_bytes().decode(),
            },
        )
        await self._storage.dead(QUEUE, item.token, reason=reason)
