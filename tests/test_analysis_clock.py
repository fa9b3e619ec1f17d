"""client/analysis/clock.py: the shift that lines requests' stalls up with throttled stretches,
found when the throttling is irregular (high confidence) and called ambiguous when it repeats
every period (low)."""

from __future__ import annotations

import pytest

from client.analysis.clock import estimate_shift

MS = 1_000_000


def sequential_requests(stretches: list[tuple[int, int]], until_ns: int,
                        work_ns: int = 40 * MS) -> list[tuple[int, int]]:
    """Back-to-back requests of ``work_ns``, each delayed by the throttling inside it."""
    out, t = [], 0
    while t < until_ns:
        end = t + work_ns
        for start, stop in stretches:   # a throttle inside the request pushes its end out
            if start < end and stop > t:
                end += stop - max(start, t)
        out.append((t, end))
        t = end + MS
    return out


@pytest.mark.parametrize("true_shift_ms", [-370, 0, 1234])
def test_irregular_throttling_gives_the_shift(true_shift_ms: int) -> None:
    stretches = [(s * MS, (s + 60) * MS) for s in (1000, 1700, 3100, 4050, 5500, 5800, 7300)]
    requests = sequential_requests(stretches, 8000 * MS)
    shifted = [(s - true_shift_ms * MS, e - true_shift_ms * MS) for s, e in requests]
    estimate = estimate_shift(shifted, stretches, -2000 * MS, 2000 * MS, period_ns=100 * MS)
    assert estimate is not None
    assert estimate.shift_ns == pytest.approx(true_shift_ms * MS, abs=5 * MS)
    assert estimate.confidence == "high" and estimate.ratio >= 1.5
    assert "confidence high" in estimate.describe()


def test_throttling_every_period_is_ambiguous() -> None:
    stretches = [(t * MS + 30 * MS, t * MS + 100 * MS) for t in range(0, 8000, 100)]
    requests = sequential_requests(stretches, 8000 * MS, work_ns=20 * MS)
    estimate = estimate_shift(requests, stretches, -2000 * MS, 2000 * MS, period_ns=100 * MS)
    assert estimate is not None and estimate.confidence == "low"


def test_too_little_to_go_on() -> None:
    assert estimate_shift([(0, MS)] * 3, [(0, MS)], -MS, MS) is None
    assert estimate_shift([(i * MS, (i + 1) * MS) for i in range(10)], [], -MS, MS) is None
    # all requests equally fast: no stall to line up
    flat = estimate_shift([(i * 10 * MS, (i * 10 + 5) * MS) for i in range(10)],
                          [(500 * MS, 600 * MS)], -1000 * MS, 1000 * MS)
    assert flat is not None and flat.confidence == "none"
    # the requests cannot reach the throttling within the range
    assert estimate_shift([(i * MS, (i + 1) * MS) for i in range(10)], [(500 * MS, 600 * MS)],
                          -MS, MS) is None
