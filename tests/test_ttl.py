"""TTLMap: entries expire by the injected clock, jittered when asked, bounded in number."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_kit._ttl import TTLMap
from gateway_kit.testing import FakeClock


def test_an_entry_expires_after_its_ttl() -> None:
    clock = FakeClock()
    cache: TTLMap[str, int] = TTLMap(10.0, clock=clock)
    cache.set("a", 1)
    clock.advance(9.9)
    assert cache.get("a") == 1
    clock.advance(0.1)
    assert cache.get("a") is None


def test_jitter_shortens_each_entry_by_its_own_draw() -> None:
    clock = FakeClock()
    draws = iter([0.0, 0.5, 1.0])
    cache: TTLMap[str, int] = TTLMap(100.0, clock=clock, jitter=0.2, rand=lambda: next(draws))
    for key in ("full", "ninety", "eighty"):
        cache.set(key, 1)
    clock.advance(80)
    assert [cache.get(k) for k in ("full", "ninety", "eighty")] == [1, 1, None]
    clock.advance(10)
    assert [cache.get(k) for k in ("full", "ninety")] == [1, None]
    clock.advance(10)
    assert cache.get("full") is None


def test_the_oldest_entry_goes_when_full_and_clear_empties() -> None:
    cache: TTLMap[str, int] = TTLMap(10.0, maxsize=2, clock=FakeClock())
    for n, key in enumerate("abc"):
        cache.set(key, n)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (None, 1, 2, 2)
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize("options", [{"maxsize": 0}, {"jitter": 1.5}, {"jitter": -0.1}])
def test_bad_bounds_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        TTLMap(1.0, **options)
