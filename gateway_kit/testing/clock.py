"""``FakeClock``: time that stands still until a test moves it.

Pass it as ``clock=`` to storage, the ``Gateway`` and the webhook worker: it reads as Unix
seconds, and ``await clock.sleep_until(t)`` (the waits of the ``Clock`` protocol) returns once
``advance`` (or setting ``time``) has brought the clock to ``t``, so a test lets a backoff or
a poll interval pass in no real time.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["FakeClock"]


class FakeClock:
    """A clock to pass as ``clock=``: it stands still until ``advance`` moves it."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._time = start
        self._sleepers: list[tuple[float, anyio.Event]] = []

    def __call__(self) -> float:
        return self._time

    @property
    def time(self) -> float:
        return self._time

    @time.setter
    def time(self, value: float) -> None:
        self._time = value
        due = [event for deadline, event in self._sleepers if deadline <= value]
        self._sleepers = [entry for entry in self._sleepers if entry[0] > value]
        for event in due:
            event.set()

    def advance(self, seconds: float) -> None:
        """Move the clock on, waking every ``sleep_until`` whose time has come."""
        self.time = self._time + seconds

    async def sleep_until(self, deadline: float) -> None:
        """Return once the clock reads ``deadline`` or later."""
        if deadline <= self._time:
            await anyio.lowlevel.checkpoint()
            return
        entry = (deadline, anyio.Event())
        self._sleepers.append(entry)
        try:
            await entry[1].wait()
        finally:
            # Cancelled before its time: forget it (identity, not equality, finds it).
            self._sleepers = [other for other in self._sleepers if other is not entry]
