"""Pi in ``counter`` iterations, timing the gap between consecutive iterations.

The Kubernetes demo this reproduces computed pi in a loop, stored the time of every
iteration and printed the sorted, counted differences: a CPU-limited pod shows gaps of
90,000+ microseconds where the kernel stopped it. Here the loop keeps memory bounded for any
``counter``:

* the gaps go into a histogram of whole microseconds (``{gap_us: times}``). Distinct gaps
  ``0 <= d1 < d2 < ... < dk`` sum to at most the wall time, so ``k(k-1)/2 <= wall_us``:
  a 10 s request has at most ~4,500 buckets, whatever ``counter`` is;
* for the chart, each chunk of ``check_every`` iterations keeps one point (its end time and
  its largest gap) in a preallocated ``array('q')`` of ``ceil(counter / check_every)`` items
  (the standard library's: the service needs no numpy).

Between chunks the loop calls ``checkpoint()`` (like ``service.burn``), so an in-process
throttle can pause it mid-request; the pause shows up as the gap of the next iteration,
exactly where a kernel throttle would put it.

The series is Leibniz's, ``pi = 4 (1 - 1/3 + 1/5 - ...)``: its error after ``n`` terms is
about ``1/n``, so the page can show both the estimate and how far off it is.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

# Iterations between two calls of ``checkpoint``: the burn loop's cadence (256), about 0.1 ms
# of timed pi iterations, so a throttle stops the loop close to where the kernel would.
from service.burn import CHECK_EVERY

__all__ = [
    "CHECK_EVERY",
    "PAUSE_THRESHOLD_US",
    "GapBucket",
    "Overhead",
    "PauseSummary",
    "PiResult",
    "compute_pi",
    "gap_buckets",
    "gap_series",
    "leibniz_pi",
    "measure_overhead",
    "summarize_pauses",
]

# A gap at least this long (1 ms) is a pause: a timed iteration takes well under 10 us, so
# a gap of a millisecond is the thread not running (throttled, preempted or descheduled).
PAUSE_THRESHOLD_US = 1000


@dataclass(frozen=True)
class GapBucket:
    us: int     # gap between two consecutive iterations, whole microseconds (floored)
    count: int  # how many gaps fell in this microsecond


@dataclass(frozen=True)
class PauseSummary:
    count: int       # gaps >= threshold
    total_us: int    # their sum (bucket values, floored to the microsecond)
    longest_us: int  # the largest gap, 0 if there is none
    threshold_us: int


@dataclass(frozen=True)
class PiResult:
    pi: float
    counter: int
    wall_ns: int                 # first to last timestamp of the loop, pauses included
    cpu_ns: int                  # CPU time this thread spent in the loop
    histogram: Mapping[int, int]  # gap_us -> times; the counts sum to ``counter``
    chunk_end_ns: array[int]     # per chunk: ns from the start to the chunk's last iteration
    chunk_max_ns: array[int]     # per chunk: the largest gap in it, ns

    @property
    def error(self) -> float:
        return self.pi - math.pi

    @property
    def gaps_measured(self) -> int:
        return sum(self.histogram.values())


def compute_pi(counter: int, checkpoint: Callable[[], object] | None = None,
               check_every: int = CHECK_EVERY,
               clock: Callable[[], int] = time.perf_counter_ns,
               cpu_clock: Callable[[], int] = time.thread_time_ns) -> PiResult:
    """Pi from ``counter`` Leibniz terms, timing every iteration; ``checkpoint()`` between chunks.

    Every iteration adds one term and reads ``clock``; its gap is the time since the previous
    reading (the first since the start), so there are exactly ``counter`` gaps.
    """
    if counter < 0:
        raise ValueError("counter must be >= 0")
    if check_every < 1:
        raise ValueError("check_every must be >= 1")
    chunks = -(-counter // check_every)
    chunk_end = array("q", bytes(8 * chunks))  # int64 zeros, allocated once
    chunk_max = array("q", bytes(8 * chunks))
    histogram: dict[int, int] = {}
    get = histogram.get

    total, sign, denominator = 0.0, 4.0, 1.0
    cpu0 = cpu_clock()
    start = prev = clock()
    left, chunk = counter, 0
    while left > 0:
        n = check_every if left > check_every else left
        top = 0
        for _ in range(n):
            total += sign / denominator
            sign = -sign
            denominator += 2.0
            now = clock()
            gap = now - prev
            prev = now
            if gap > top:
                top = gap
            us = gap // 1000
            histogram[us] = get(us, 0) + 1
        chunk_end[chunk] = prev - start
        chunk_max[chunk] = top
        chunk += 1
        left -= n
        if checkpoint is not None and left > 0:
            checkpoint()
    cpu_ns = cpu_clock() - cpu0
    return PiResult(pi=total, counter=counter, wall_ns=prev - start, cpu_ns=cpu_ns,
                    histogram=histogram, chunk_end_ns=chunk_end, chunk_max_ns=chunk_max)


def leibniz_pi(counter: int) -> float:
    """The same series without any timing: the baseline for ``measure_overhead``."""
    total, sign, denominator = 0.0, 4.0, 1.0
    for _ in range(counter):
        total += sign / denominator
        sign = -sign
        denominator += 2.0
    return total


def gap_buckets(histogram: Mapping[int, int]) -> list[GapBucket]:
    """The histogram as rows sorted by gap, like the demo's "gap -> times" table."""
    return [GapBucket(us, histogram[us]) for us in sorted(histogram)]


def summarize_pauses(buckets: Iterable[GapBucket],
                     threshold_us: int = PAUSE_THRESHOLD_US) -> PauseSummary:
    """Count and sum the gaps of at least ``threshold_us``: "8 pauses, 712 ms of 797 ms"."""
    count = total = longest = 0
    for b in buckets:
        if b.count > 0:
            longest = max(longest, b.us)
        if b.us >= threshold_us:
            count += b.count
            total += b.us * b.count
    return PauseSummary(count=count, total_us=total, longest_us=longest,
                        threshold_us=threshold_us)


def gap_series(result: PiResult, points: int = 400) -> tuple[array[int], array[int]]:
    """At most ``points`` (time into the request ns, largest gap ns) pairs for a chart.

    Neighbouring chunks are merged keeping the largest gap and the latest time, so a single
    long pause is never averaged away.
    """
    if points < 1:
        raise ValueError("points must be >= 1")
    ends, tops = result.chunk_end_ns, result.chunk_max_ns
    if len(ends) <= points:
        return array("q", ends), array("q", tops)
    group = -(-len(ends) // points)
    # each group of ``group`` chunks (the last may be shorter) -> its largest value
    starts = range(0, len(ends), group)
    return (array("q", [max(ends[i:i + group]) for i in starts]),
            array("q", [max(tops[i:i + group]) for i in starts]))


@dataclass(frozen=True)
class Overhead:
    iterations: int
    plain_ns: int   # the series alone
    timed_ns: int   # compute_pi: the series plus a clock read and a histogram update

    @property
    def per_iteration_ns(self) -> float:
        """What the timing adds to each iteration."""
        return (self.timed_ns - self.plain_ns) / self.iterations if self.iterations else 0.0

    @property
    def plain_per_iteration_ns(self) -> float:
        return self.plain_ns / self.iterations if self.iterations else 0.0


def measure_overhead(iterations: int = 200_000, repeat: int = 5) -> Overhead:
    """The per-iteration cost of the timing: best of ``repeat`` runs of each loop (CPU time)."""
    if iterations < 1 or repeat < 1:
        raise ValueError("iterations and repeat must be >= 1")
    plain = timed = None
    for _ in range(repeat):
        t0 = time.thread_time_ns()
        leibniz_pi(iterations)
        t1 = time.thread_time_ns()
        compute_pi(iterations)
        t2 = time.thread_time_ns()
        plain = t1 - t0 if plain is None else min(plain, t1 - t0)
        timed = t2 - t1 if timed is None else min(timed, t2 - t1)
    assert plain is not None and timed is not None
    return Overhead(iterations=iterations, plain_ns=plain, timed_ns=timed)
