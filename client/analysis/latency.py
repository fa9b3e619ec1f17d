"""The shape of a run's latencies: the fast mode and the gap above it.

Throttling makes a sequential run's latencies bimodal: the fast mode (the request's own time)
and a slow mode one stall later (~70 ms at 0.3 CPU, ~90 or ~190 ms at 0.1 CPU). The fast mode
is the lower cluster below the widest gap in the sorted latencies (measured on a log scale)
that is wider than the noise of that cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_GAP_MS", "LatencySplit", "split_latencies"]

MIN_GAP_MS = 2.0          # a gap narrower than this is noise, not a stall


@dataclass(frozen=True)
class LatencySplit:
    """The sorted latencies cut in two at a gap: ``threshold_ms`` (None: no gap, one mode)."""

    baseline_ms: float            # median of the lower cluster (of all, without a gap)
    threshold_ms: float | None    # a latency >= this is above the gap
    fast_count: int               # requests in the lower cluster


def split_latencies(latencies_ms: Sequence[float] | np.ndarray) -> LatencySplit | None:
    """Find the fast mode and the gap above it; None for fewer than 2 latencies.

    A candidate gap between sorted neighbours ``a < b`` (lower cluster = everything <= a)
    counts when ``b - a`` is at least ``MIN_GAP_MS``, half the lower cluster's median and four
    times its interquartile range, and ``b`` is at least 1.5 times that median. Of those the
    widest on a log scale wins.
    """
    s = np.sort(np.asarray(latencies_ms, dtype=float))
    s = s[np.isfinite(s)]
    n = s.size
    if n < 2:
        return None
    i = np.arange(1, n)                       # split before s[i]: lower = s[:i]
    lower_median = s[(i - 1) // 2]
    iqr = s[(3 * (i - 1)) // 4] - s[(i - 1) // 4]
    gap = s[1:] - s[:-1]
    ok = ((gap >= np.maximum.reduce([np.full(n - 1, MIN_GAP_MS), 0.5 * lower_median, 4 * iqr]))
          & (s[1:] >= 1.5 * lower_median) & (s[:-1] > 0))
    if not ok.any():
        return LatencySplit(float(np.median(s)), None, n)
    with np.errstate(divide="ignore"):
        score = np.where(ok, np.log(s[1:] / np.where(s[:-1] > 0, s[:-1], 1)), -np.inf)
    best = int(np.argmax(score)) + 1
    return LatencySplit(float(np.median(s[:best])), float(s[best]), best)
