"""service.pi: the timed pi loop, its histogram, pause summary and chart series (fake clocks)."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.pi import (
    CHECK_EVERY,
    GapBucket,
    PiResult,
    compute_pi,
    gap_buckets,
    gap_series,
    leibniz_pi,
    measure_overhead,
    summarize_pauses,
)


class FakeClock:
    """A nanosecond clock that moves ``step`` per reading; ``pause(ns)`` jumps ahead."""

    def __init__(self, step: int = 700, start: int = 5_000_000) -> None:
        self.now, self.step, self.readings = start, step, 0

    def __call__(self) -> int:
        value = self.now
        self.now += self.step
        self.readings += 1
        return value

    def pause(self, ns: int) -> None:
        self.now += ns


def scripted_clock(gaps_ns: Iterable[int], start: int = 1_000) -> Iterator[int]:
    """Start, then start + each gap in turn: the loop sees exactly these gaps."""
    t = start
    yield t
    for g in gaps_ns:
        t += g
        yield t


def test_leibniz_estimate_and_error() -> None:
    for n in (1, 10, 1000, 100_000):
        result = compute_pi(n)
        assert result.pi == leibniz_pi(n)
        # the alternating series' error is about 1/n, with the sign of the last term
        assert abs(result.error) == pytest.approx(1 / n, rel=0.3 if n == 1 else 0.01)
    assert compute_pi(1).pi == 4.0
    assert abs(compute_pi(100_000).pi - math.pi) < 2e-5


def test_every_iteration_gives_one_gap_and_the_counts_sum_to_counter() -> None:
    clock = FakeClock(step=700)
    result = compute_pi(1000, clock=clock, cpu_clock=FakeClock(step=1))
    assert clock.readings == 1001  # the start, then one reading per iteration
    assert dict(result.histogram) == {0: 1000}  # 700 ns floors to 0 us
    assert result.gaps_measured == 1000
    assert result.wall_ns == 1000 * 700
    assert result.cpu_ns == 1


def test_checkpoint_pause_lands_in_the_next_gap() -> None:
    clock = FakeClock(step=2_500)
    calls = []

    def checkpoint() -> None:
        calls.append(clock.now)
        clock.pause(90_000_000)  # the throttle holds the loop 90 ms

    result = compute_pi(1000, checkpoint=checkpoint, check_every=256, clock=clock)
    # between chunks only: 1000 = 256 + 256 + 256 + 232 -> 3 checkpoints, none after the last
    assert len(calls) == 3
    assert dict(result.histogram) == {2: 997, 90_002: 3}
    assert result.wall_ns == 1000 * 2_500 + 3 * 90_000_000
    assert len(result.chunk_end_ns) == len(result.chunk_max_ns) == 4
    assert result.chunk_max_ns.tolist() == [2_500, 90_002_500, 90_002_500, 90_002_500]
    assert result.chunk_end_ns[-1] == result.wall_ns
    pauses = summarize_pauses(gap_buckets(result.histogram))
    assert (pauses.count, pauses.total_us, pauses.longest_us) == (3, 3 * 90_002, 90_002)


def test_default_checkpoint_cadence_is_a_few_hundred_iterations() -> None:
    calls = 0

    def checkpoint() -> None:
        nonlocal calls
        calls += 1

    compute_pi(10 * CHECK_EVERY + 1, checkpoint=checkpoint)
    assert 100 <= CHECK_EVERY <= 1000
    assert calls == 10


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3_000_000), min_size=0, max_size=600),
       st.integers(min_value=1, max_value=300))
def test_histogram_is_the_floored_gaps_and_stays_small(gaps: list[int], check_every: int) -> None:
    times = scripted_clock(gaps)
    result = compute_pi(len(gaps), check_every=check_every, clock=lambda: next(times))
    assert dict(result.histogram) == Counter(g // 1000 for g in gaps)
    assert result.gaps_measured == len(gaps)
    assert result.wall_ns == sum(gaps)
    # distinct whole-microsecond gaps d1 < ... < dk sum to at most the wall time
    k = len(result.histogram)
    assert k * (k - 1) // 2 <= result.wall_ns // 1000
    assert len(result.chunk_max_ns) == -(-len(gaps) // check_every)
    assert max(result.chunk_max_ns, default=0) == max(gaps, default=0)


def test_zero_counter_and_bad_arguments() -> None:
    result = compute_pi(0)
    assert result.pi == 0.0 and result.gaps_measured == 0 and result.wall_ns == 0
    assert len(result.chunk_end_ns) == 0
    assert summarize_pauses(gap_buckets(result.histogram)).count == 0
    with pytest.raises(ValueError, match="counter"):
        compute_pi(-1)
    with pytest.raises(ValueError, match="check_every"):
        compute_pi(10, check_every=0)


def test_buckets_are_sorted_and_pauses_use_the_threshold() -> None:
    buckets = gap_buckets({90_000: 2, 0: 10, 999: 1, 1000: 1, 3: 4})
    assert [b.us for b in buckets] == [0, 3, 999, 1000, 90_000]
    pauses = summarize_pauses(buckets)
    assert (pauses.count, pauses.total_us, pauses.longest_us) == (3, 181_000, 90_000)
    assert summarize_pauses(buckets, threshold_us=100_000).count == 0
    assert summarize_pauses([GapBucket(5, 0)]).longest_us == 0


def _result(ends: list[int], tops: list[int]) -> PiResult:
    return PiResult(pi=0.0, counter=len(ends), wall_ns=ends[-1] if ends else 0, cpu_ns=0,
                    histogram={}, chunk_end_ns=array("q", ends), chunk_max_ns=array("q", tops))


def test_gap_series_downsamples_keeping_the_longest_gap() -> None:
    ends = [(i + 1) * 100_000 for i in range(1001)]
    tops = [2_000] * 1001
    tops[517] = 92_000_000
    times, gaps = gap_series(_result(ends, tops), points=100)
    assert len(times) == len(gaps) <= 100
    assert max(gaps) == 92_000_000 and min(gaps) == 2_000
    assert list(times) == sorted(times) and times[-1] == ends[-1]
    # few chunks: returned as they are
    t, g = gap_series(_result(ends[:5], tops[:5]), points=100)
    assert t.tolist() == ends[:5] and g.tolist() == tops[:5]
    with pytest.raises(ValueError):
        gap_series(_result(ends, tops), points=0)


def test_overhead_is_measured_against_the_bare_series() -> None:
    overhead = measure_overhead(iterations=20_000, repeat=3)
    # the timed loop reads a clock and updates a histogram on top of the same series
    assert overhead.timed_ns > overhead.plain_ns > 0
    assert 0 < overhead.per_iteration_ns < 100_000
    assert overhead.plain_per_iteration_ns > 0
