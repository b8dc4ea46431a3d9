"""``EventBus``: where layers publish events and the webhook emitter (or a test) listens.

Publishing awaits every subscriber in turn, so an event is handed over (for the emitter: in
the durable queue) before ``publish`` returns. A subscriber that fails is logged and skipped:
one broken listener never fails the request that published.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("gateway_kit.bus")

Subscriber = Callable[[Any], Awaitable[None]]


class EventBus:
    """A small in-process publish/subscribe hub for gateway events."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber(event)`` for every event published; returns an unsubscribe."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    async def publish(self, event: Any) -> None:
        """Hand ``event`` to every subscriber (in subscription order)."""
        for subscriber in tuple(self._subscribers):
            try:
                await subscriber(event)
            except Exception:
                logger.exception("event subscriber %r failed", subscriber)


class EventRecorder:
    """A subscriber that keeps what it receives: ``gateway.events.subscribe(recorder)``."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def __call__(self, event: Any) -> None:
        self.events.append(event)
