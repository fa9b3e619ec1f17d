"""How far another tool's clock is off the timeline's: the shift that best lines up the
requests' stalls with the timeline's throttled stretches (pure; numpy).

Each request's stall is its latency above the median. On a 1 ms grid, the stall signal
(each request's stall spread over its span) is cross-correlated with the throttled signal (1
inside a throttled stretch) by FFT; the best shift is the peak within the range asked. The
confidence compares that peak with the best one at least half a period (or 50 ms) away:
throttling that repeats every period lines up almost as well one period off, and then the
answer is ambiguous ("low"). The estimate is advice: the caller prints it, never applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ClockEstimate", "estimate_shift"]

GRID_NS = 1_000_000
HIGH_RATIO = 1.5      # the best line-up beats the next one this many times over: "high"


@dataclass(frozen=True)
class ClockEstimate:
    shift_ns: int                  # add this to the requests' times
    score: float                   # the best line-up's stall-ms x throttled-ms
    runner_up_ns: int | None       # the best shift at least ``apart_ns`` away
    ratio: float                   # score / runner-up score (inf when none is positive)
    confidence: str                # "high", "low" or "none"

    def describe(self) -> str:
        if self.confidence == "none":
            return "no shift lines the requests' stalls up with the throttling"
        other = ("" if self.runner_up_ns is None else
                 f"; next best {self.runner_up_ns / 1e9:+.3f} s, "
                 f"{self.ratio:.1f}x weaker" if np.isfinite(self.ratio) else
                 "; no other shift fits")
        return f"{self.shift_ns / 1e9:+.3f} s (confidence {self.confidence}{other})"


def _grid(spans: Sequence[tuple[int, int]], weights: Sequence[float], base: int,
          size: int) -> np.ndarray:
    signal = np.zeros(size + 1)
    for (start, end), weight in zip(spans, weights):
        a = max(0, min(size, (start - base) // GRID_NS))
        b = max(a + 1, min(size, -(-(end - base) // GRID_NS)))
        signal[a] += weight / (b - a)
        signal[b] -= weight / (b - a)
    return np.cumsum(signal)[:size]


def estimate_shift(requests: Sequence[tuple[int, int]], stretches: Sequence[tuple[int, int]],
                   lo_ns: int, hi_ns: int, *, period_ns: int | None = None
                   ) -> ClockEstimate | None:
    """The shift in ``[lo_ns, hi_ns]`` that best lines ``requests`` (``(start, end)`` ns) up
    with the throttled ``stretches`` (same clock); None with too little to go on."""
    if len(requests) < 5 or not stretches or hi_ns < lo_ns:
        return None
    latencies = np.array([end - start for start, end in requests], dtype=float)
    stalls = latencies - np.median(latencies)
    r_base = min(s for s, _ in requests)
    r_size = (max(e for _, e in requests) - r_base) // GRID_NS + 2
    t_base = min(s for s, _ in stretches)
    t_size = (max(e for _, e in stretches) - t_base) // GRID_NS + 2
    if r_size * 1.0 + t_size > 50_000_000:   # a day at 1 ms: too much for one FFT here
        return None
    r = _grid(requests, stalls / 1e6, r_base, r_size)
    t = _grid(stretches, [(e - s) / 1e6 for s, e in stretches], t_base, t_size)
    n = 1 << int(r_size + t_size).bit_length()
    corr = np.fft.irfft(np.fft.rfft(t, n) * np.conj(np.fft.rfft(r, n)), n)
    # corr[m] = sum_k r[k] t[k + m]: the requests moved by m cells onto the throttle grid;
    # a shift s puts request cell k (time r_base + k) at t cell k + (r_base + s - t_base)
    shifts = np.arange(lo_ns, hi_ns + 1, GRID_NS)
    m = (r_base + shifts - t_base) // GRID_NS
    valid = (m > -r_size) & (m < t_size)   # some overlap; n >= r_size + t_size: no wrap
    if not valid.any():
        return None
    scores = np.where(valid, corr[np.mod(m, n)], -np.inf)
    best = int(np.argmax(scores))
    score = float(scores[best])
    if not score > 0:
        return ClockEstimate(int(shifts[best]), score, None, float("inf"), "none")
    apart = max((period_ns or 0) // 2, 50 * GRID_NS)
    far = np.abs(shifts - shifts[best]) >= apart
    runner = int(np.argmax(np.where(far, scores, -np.inf))) if far.any() else None
    runner_score = float(scores[runner]) if runner is not None else 0.0
    ratio = score / runner_score if runner_score > 0 else float("inf")
    return ClockEstimate(int(shifts[best]), score,
                         int(shifts[runner]) if runner is not None else None, ratio,
                         "high" if ratio >= HIGH_RATIO else "low")
