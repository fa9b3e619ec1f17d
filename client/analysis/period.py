"""When stalls recur, and how much of a run had nothing in flight.

The **period** is inferred from when stalls end: a throttled request resumes at a period
boundary, so the end times of throttled requests line up on a grid whose spacing is the
period. The spacing with the best alignment (a circular mean, largest spacing of those nearly
as good, so that half the period does not win) is the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from client.data.record import RequestRecord

__all__ = ["DEFAULT_PERIOD_MS", "MAX_PERIOD_MS", "MIN_PERIOD_MS", "idle_fraction", "infer_period"]

DEFAULT_PERIOD_MS = 100.0
MIN_PERIOD_MS, MAX_PERIOD_MS = 1.0, 1000.0
GAP_RESOLUTION_NS = 1_000_000  # the original's text captures give send times in whole ms


def infer_period(resume_ms: Sequence[float], *, min_period_ms: float = MIN_PERIOD_MS,
                 min_events: int = 4) -> float | None:
    """The spacing of the grid that the times ``resume_ms`` (ends of stalls) line up on.

    Spacings from ``min_period_ms`` (a stall is shorter than its period, so the shortest
    stall is a good lower bound) to 1000 ms are tried; the alignment of a spacing is the
    length of the mean of the times as phases on a circle (1: all on the grid). Multiples of
    the period align badly (half the events fall half-way), its fractions as well as the
    period itself: the largest spacing whose alignment is nearly the best wins, refined to
    0.01 ms. None with fewer than ``min_events`` times, or when the best alignment could come
    from chance: random times reach a length ``r`` with probability ``exp(-n r²)`` per
    independent spacing (Rayleigh), so ``r`` must beat that at 5 % over all spacings tried.
    """
    t = np.asarray(resume_ms, dtype=float)
    t = t[np.isfinite(t)]
    if t.size < min_events:
        return None
    if t.size > 500:  # evenly spaced subset: enough to align, bounded cost
        t = np.sort(t)[np.linspace(0, t.size - 1, 500).astype(int)]
    t = t - t.min()
    span = float(np.ptp(t))
    lo = max(MIN_PERIOD_MS, float(min_period_ms))
    hi = min(MAX_PERIOD_MS, span)  # a period longer than the run cannot be seen
    if hi <= lo:
        return None

    def alignment(frequencies: np.ndarray) -> np.ndarray:
        phases = np.exp(2j * np.pi * np.outer(frequencies, t))
        return np.abs(phases.mean(axis=1))

    independent = span * (1 / lo - 1 / hi) + 1
    needed = max(0.6, math.sqrt(math.log(independent / 0.05) / t.size))
    if needed >= 1:
        return None
    # A peak in frequency (1 / period) is about 1 / span wide, whatever the period: scan the
    # frequencies at a quarter of that, from the longest period to the shortest.
    step = 1 / (4 * span)
    grid = np.arange(1 / hi, 1 / lo + step, step)
    r = np.concatenate([alignment(chunk) for chunk in np.array_split(grid, grid.size // 256 + 1)])
    best = float(r.max())
    if best < needed:
        return None
    good = np.flatnonzero(r >= max(needed, 0.9 * best))
    # the first run of consecutive good frequencies: the largest aligning period
    first = last = int(good[0])
    while last + 1 < grid.size and r[last + 1] >= max(needed, 0.9 * best):
        last += 1
    peak = grid[first + int(np.argmax(r[first:last + 1]))]
    fine = np.linspace(max(peak - step, 1 / MAX_PERIOD_MS), peak + step, 101)
    return float(round(1 / fine[int(np.argmax(alignment(fine)))], 2))


def idle_fraction(records: Sequence[RequestRecord]) -> float | None:
    """The share of the run's span (first send to last answer) when no request was in flight:
    0 for requests sent back to back; large for a capture with gaps (an excerpt). Gaps up to
    1 ms count as busy: the original's text captures give send times in whole ms, and the
    client's own time between two requests is that short."""
    spans = sorted((r.origin_ns, r.origin_ns + r.latency_ns) for r in records)
    if not spans:
        return None
    total = max(end for _, end in spans) - spans[0][0]
    if total <= 0:
        return None
    busy, cur_start, cur_end = 0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start > cur_end + GAP_RESOLUTION_NS:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    return max(0.0, 1 - busy / total)
