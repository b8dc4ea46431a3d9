from __future__ import annotations

import re

from gateway_kit.bench.cache import _ceiling


def _figures(line: str) -> tuple[float, int, int]:
    ratio = re.search(r"answer ([\d.]+)x", line)
    room = re.search(r"leaves all of that (-?\d+) us together \(now (\d+) us\)", line)
    assert ratio is not None, line
    assert room is not None, line
    return float(ratio[1]), int(room[1]), int(room[2])


def test_the_ceiling_is_the_ratio_with_all_a_hit_does_above_the_floor_free() -> None:
    # A miss 0.588 ms, a hit 0.263, a health check 0.056: the upstream call is 0.325 above a
    # hit; were the hit's work free, 0.056 against 0.381 (6.80x); 5x leaves (0.325 - 4 x
    # 0.056) / 4 = 25 us for it, against 207 now.
    assert _figures(_ceiling(0.588, 0.263, 0.056)) == (6.80, 25, 207)


def test_a_floor_too_high_for_the_target_leaves_nothing() -> None:
    ratio, room, _ = _figures(_ceiling(0.5, 0.3, 0.1))
    assert ratio == 3.0
    assert room < 0
