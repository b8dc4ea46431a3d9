"""Quota periods roll over at calendar boundaries in UTC."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway_kit.accounts.periods import period_at


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("now", "unit", "period_id", "reset_at"),
    [
        ("2026-11-22T13:45:00", "month", "2026-11", "2026-12-01T00:00:00Z"),
        ("2026-12-31T23:59:59", "month", "2026-12", "2027-01-01T00:00:00Z"),
        ("2028-02-29T00:00:00", "month", "2028-02", "2028-03-01T00:00:00Z"),
        ("2026-11-22T13:45:00", "week", "2026-W47", "2026-11-23T00:00:00Z"),
        ("2026-12-31T10:00:00", "week", "2026-W53", "2027-01-04T00:00:00Z"),
        ("2026-11-22T13:45:00", "day", "2026-11-22", "2026-11-23T00:00:00Z"),
    ],
)
def test_period_ids_and_reset_times(now: str, unit: str, period_id: str, reset_at: str) -> None:
    period = period_at(ts(now), unit)  # type: ignore[arg-type]
    assert period.id == period_id
    assert period.reset_at == reset_at
    assert period.start.timestamp() <= ts(now) < period.end.timestamp()


def test_the_last_instant_of_a_period_and_the_first_of_the_next() -> None:
    end = ts("2026-12-01T00:00:00")
    assert period_at(end - 0.001).id == "2026-11"
    assert period_at(end).id == "2026-12"
    assert period_at(end - 1).seconds_left(end - 1) == pytest.approx(1)
