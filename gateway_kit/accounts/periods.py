"""Quota periods: which period a moment falls in, when it resets, and its storage key part.

A period is a calendar month (the default), an ISO week (Monday to Sunday) or a day, in UTC.
Counters are keyed by the period's id (``2026-11``, ``2026-W47``, ``2026-11-22``), so a new
period starts from zero without anyone resetting anything, and old counters expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gateway_kit.config.base import PeriodUnit


@dataclass(frozen=True, slots=True)
class Period:
    """One quota period: ``[start, end)`` in UTC."""

    id: str
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.end.timestamp() - now)

    @property
    def reset_at(self) -> str:
        """The next period's start, ISO 8601 with a trailing ``Z``."""
        return iso_utc(self.end)


def iso_utc(moment: datetime) -> str:
    """``2026-12-01T00:00:00Z``: UTC, second precision, trailing ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def period_at(now: float, unit: PeriodUnit = "month") -> Period:
    """The period containing the Unix time ``now``."""
    moment = datetime.fromtimestamp(now, UTC)
    if unit == "month":
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=32)).replace(day=1)
        return Period(f"{start:%Y-%m}", start, end)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "week":
        start = day - timedelta(days=day.weekday())
        year, week, _ = start.isocalendar()
        return Period(f"{year}-W{week:02d}", start, start + timedelta(days=7))
    if unit == "day":
        return Period(f"{day:%Y-%m-%d}", day, day + timedelta(days=1))
    raise ValueError(f"unknown period unit {unit!r}")


class CurrentPeriod:
    """The period containing ``now``, recomputed only when ``now`` leaves it (for hot paths)."""

    def __init__(self, unit: PeriodUnit) -> None:
        self._unit = unit
        self._period: Period | None = None
        self._start = self._end = 0.0

    def at(self, now: float) -> Period:
        if self._period is None or not self._start <= now < self._end:
            self._period = period_at(now, self._unit)
            self._start, self._end = self._period.start.timestamp(), self._period.end.timestamp()
        return self._period
