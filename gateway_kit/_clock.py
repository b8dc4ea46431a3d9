"""Clocks that can be waited on: what background loops (the webhook worker, the routing health
refresh) time their waits with.

A plain ``() -> float`` clock gives timestamps and waits in real time; a ``Clock`` (a test's
``gateway_kit.testing.FakeClock``) also times the waits, so a test lets an interval pass in no
real time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "waitable"]


@runtime_checkable
class Clock(Protocol):
    """Unix seconds when called; ``sleep_until`` returns once the clock reads ``deadline``."""

    def __call__(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class _RealWaits:
    """A plain clock function, its waits made in real time (anyio's monotonic clock)."""

    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read

    def __call__(self) -> float:
        return self._read()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - self._read()))


def waitable(clock: Callable[[], float]) -> Clock:
    """``clock`` itself when it is a ``Clock``, else the same readings with real-time waits."""
    return clock if isinstance(clock, Clock) else _RealWaits(clock)
