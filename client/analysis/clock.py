"""How far another tool's clock is off the timeline's: the shift that best lines up the
requests' stalls with the timeline's throttled stretches (pure; numpy).

Each request's stall is its latency above the median. On a 1 ms grid, the stall signal
(each request's stall spread over its span) is cross-correlated with the throttled signal (1
inside a throttled stretch) by FFT; the best shift is the peak within the range asked. The
confidence compares that peak with the best one at least half a period (or 50 ms) away:
throttling that repeats every period lines up almost as well one period off, and then the
answer is ambiguous ("low").

:func:`align` decides whether to move the stated clock (a relative file's ``--start``, taken
a few ms before the tool sent its first request; another host's clock). The candidate is the
line-up above when it is unambiguous ("high"), else the shift near the stated clock (the
tool's start-up moves it by ms, not by periods; Unix times, :data:`UNIX_NEAR_NS` either
way) whose holds fit the latencies best
(:class:`Fit`: no hold longer than a latency allows, then the least mismatch). It is applied
when it fits clearly better than the stated clock (:attr:`Alignment.applied`), and how much
better is said; ``--offset`` and ``--no-align`` keep the caller's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import math

import numpy as np

from client.data.attribution import CounterSample, throttled_stretches
from client.data.record import RequestRecord

__all__ = ["ALIGN_RATIO", "CHECK_WINDOW_NS", "UNIX_NEAR_NS", "Alignment", "ClockEstimate", "Fit",
           "align", "align_records", "estimate_shift"]

CHECK_WINDOW_NS = 2_000_000_000   # the clock check looks this far either way

GRID_NS = 1_000_000
HIGH_RATIO = 1.5      # the best line-up beats the next one this many times over: "high"
ALIGN_RATIO = 1.5     # a shift's line-up beats the stated clock's this many times over: applied
TIED = 0.02           # shifts whose mismatch is within 2 % of the least fit as well
# a shift is never applied that holds the requests, within what their latencies allow, less
# than this share of what the stated clock holds them: the group runs, and so is throttled,
# while it serves; a line-up that puts its throttling between the requests fits the median
# of a load throttled in every request, and is wrong
HOLD_KEPT = 0.9
# Unix times (the host's clock, or another's kept by NTP: off by ms) are searched this far
# either way of their own clock; further off, a line-up a period away fits almost as well
UNIX_NEAR_NS = 25_000_000


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


def _scores(requests: Sequence[tuple[int, int]], stretches: Sequence[tuple[int, int]],
            lo_ns: int, hi_ns: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Each shift in ``[lo_ns, hi_ns]`` (1 ms apart) and its line-up (-inf where the requests
    would not meet the stretches at all); None with too little to go on."""
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
    return shifts, np.where(valid, corr[np.mod(m, n)], -np.inf)


def estimate_shift(requests: Sequence[tuple[int, int]], stretches: Sequence[tuple[int, int]],
                   lo_ns: int, hi_ns: int, *, period_ns: int | None = None
                   ) -> ClockEstimate | None:
    """The shift in ``[lo_ns, hi_ns]`` that best lines ``requests`` (``(start, end)`` ns) up
    with the throttled ``stretches`` (same clock); None with too little to go on."""
    scored = _scores(requests, stretches, lo_ns, hi_ns)
    if scored is None:
        return None
    shifts, scores = scored
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


def _union(stretches: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The throttled wall time before each instant, as breakpoints for ``np.interp``."""
    xs: list[float] = []
    ys: list[float] = []
    total = 0.0
    last_hi = -math.inf
    for a, b in sorted((a, b) for a, b in stretches if b > a):
        lo, hi = max(float(a), last_hi), float(b)
        if hi <= lo:
            continue
        xs += [lo, hi]
        ys += [total, total + hi - lo]
        total += hi - lo
        last_hi = hi
    return np.array(xs, dtype=float), np.array(ys, dtype=float)


@dataclass(frozen=True)
class Fit:
    """How the throttled stretches, moved by a shift, fit the requests' latencies: the
    ``mismatch`` (each request's hold against its latency above the median, summed over the
    requests a stretch can reach) and the ``impossible`` hold (held longer than its latency
    less the fastest answer: no request can be), and ``held_ns``: the hold within what the
    latencies allow, summed."""

    shift_ns: int
    mismatch_ns: float
    impossible_ns: float
    held_ns: float


def _fits(requests: Sequence[tuple[int, int]], stretches: Sequence[tuple[int, int]],
          shifts: Sequence[int]) -> list[Fit]:
    xs, ys = _union(stretches)
    starts = np.array([s for s, _ in requests], dtype=float)
    ends = np.array([e for _, e in requests], dtype=float)
    latency = ends - starts
    excess = np.maximum(0.0, latency - np.median(latency))
    room = latency - latency.min()
    holds = [np.minimum(latency, np.interp(ends + d, xs, ys) - np.interp(starts + d, xs, ys))
             for d in shifts]
    reach = np.zeros(len(requests), dtype=bool)
    for held in holds:
        reach |= held > 0
    return [Fit(int(d), float(np.abs(held[reach] - excess[reach]).sum()),
                float(np.maximum(0.0, held - room).sum()), float(np.minimum(held, room).sum()))
            for d, held in zip(shifts, holds)]


@dataclass(frozen=True)
class Alignment:
    """The shift :func:`align` chose and how it fits, against the stated clock's fit."""

    chosen: Fit
    stated: Fit
    where: str        # "over the whole range" (unambiguous) or "within N ms of the stated clock"
    set_aside: str = ""   # the unambiguous line-up passed over for a shift near the clock, why

    @property
    def shift_ns(self) -> int:
        return self.chosen.shift_ns

    @property
    def better(self) -> float:
        """How many times smaller the mismatch is at the shift than at the stated clock."""
        return (self.stated.mismatch_ns / self.chosen.mismatch_ns if self.chosen.mismatch_ns > 0
                else float("inf"))

    @property
    def applied(self) -> bool:
        """Clearly better than the stated clock: it takes away the hold no latency could hold
        there (at least 1 ms of it) without fitting worse, or fits :data:`ALIGN_RATIO` times
        better."""
        if abs(self.shift_ns) < GRID_NS or self.loses_holds:   # the stated clock
            return False
        removes = (self.stated.impossible_ns >= GRID_NS and
                   self.chosen.impossible_ns * ALIGN_RATIO <= self.stated.impossible_ns)
        return (removes and self.better >= 1.0) or self.better >= ALIGN_RATIO

    @property
    def loses_holds(self) -> bool:
        """The shift holds the requests less than :data:`HOLD_KEPT` of the stated clock's
        hold (within what their latencies allow): it moves the throttling off them."""
        return self.chosen.held_ns < HOLD_KEPT * self.stated.held_ns

    def refused(self) -> str:
        """The shift, and why it is not applied (for a shift of at least a ms that is not)."""
        best = "the best shift" if self.loses_holds else "the best shift near it"
        return f"{best}, {self.describe()}, {self.why_not()}{self.aside}"

    def why_not(self) -> str:
        if self.loses_holds:
            kept = self.chosen.held_ns / self.stated.held_ns
            return (f"is not applied: it holds the requests {kept:.0%} as long as the stated "
                    f"clock does (it moves the throttling off them; {HOLD_KEPT:.0%} is "
                    "needed)")
        return f"is not clearly better: {ALIGN_RATIO:g}x is needed"

    def describe(self) -> str:
        times = "inf" if not np.isfinite(self.better) else f"{self.better:.1f}"
        return (f"{self.shift_ns / 1e9:+.3f} s ({self.where}): the holds miss the latencies "
                f"by {self.chosen.mismatch_ns / 1e6:.0f} ms in all against "
                f"{self.stated.mismatch_ns / 1e6:.0f} ms at the stated clock ({times}x "
                f"better), and hold {self.chosen.impossible_ns / 1e6:.0f} ms more than the "
                f"latencies can against {self.stated.impossible_ns / 1e6:.0f} ms")

    @property
    def aside(self) -> str:
        """``; `` and the line-up passed over, why (empty when none was)."""
        return f"; {self.set_aside}" if self.set_aside else ""


def align(requests: Sequence[tuple[int, int]], stretches: Sequence[tuple[int, int]],
          lo_ns: int, hi_ns: int, *, period_ns: int | None = None,
          near_ns: tuple[int, int] | None = None) -> Alignment | None:
    """The shift to apply to ``requests`` (see the module's docstring; :attr:`Alignment.applied`
    says whether it is clearly better than the stated clock); None with too little to go on
    or no shift in ``[lo_ns, hi_ns]`` (those that keep the requests inside the timeline) to
    try; shift 0, the stated clock, is judged in any case. ``near_ns``: the shifts the stated clock
    can be off by, less than a period apart (default: half a period either way; a tool's
    relative times started after the ``date`` taken before it: ``(-10 ms, 0.9 period)``)."""
    if hi_ns < lo_ns or len(requests) < 5 or not stretches:
        return None
    reach = max((period_ns or 0) // 2, 50 * GRID_NS)
    below, above = near_ns if near_ns is not None else (-reach + GRID_NS, reach - GRID_NS)
    lo, hi = max(lo_ns, below), min(hi_ns, above)
    near = [d for d in range(lo - lo % GRID_NS, hi + 1, GRID_NS // 2) if lo <= d <= hi]
    wide = estimate_shift(requests, stretches, lo_ns, hi_ns, period_ns=period_ns)
    # throttling that comes and goes lines up at one shift only: that one, to the ms
    sure = wide.shift_ns if wide is not None and wide.confidence == "high" else None
    if not near and sure is None:
        return None
    # the stated clock is judged even where it leaves requests outside the timeline
    stated, *fits = _fits(requests, stretches, [0, *near, *([] if sure is None else [sure])])
    if sure is not None:
        lined_up = Alignment(fits[-1], stated, "the one line-up of the stalls with the throttling")
        if lined_up.applied or not near:
            return lined_up
        fits = fits[:-1]   # it is no better than the stated clock: a shift near it may be
        set_aside = f"the line-up at {sure / 1e9:+.3f} s {lined_up.why_not()}"
    else:
        set_aside = ""
    least = min(round(f.impossible_ns / GRID_NS) for f in fits)
    fitting = [f for f in fits if round(f.impossible_ns / GRID_NS) == least]
    floor = min(f.mismatch_ns for f in fitting)
    # the shifts that fit as well (a 10 ms row blurs a few ms): the middle of them
    tied = sorted((f for f in fitting if f.mismatch_ns <= floor * (1 + TIED)),
                  key=lambda f: f.shift_ns)
    return Alignment(tied[len(tied) // 2], stated,
                     f"searched {below / 1e6:+g} to {above / 1e6:+g} ms of the stated clock",
                     set_aside)


def align_records(records: Sequence[RequestRecord], timeline: Sequence[CounterSample],
                  period_ns: int | None, relative: bool) -> Alignment | None:
    """:func:`align` over the shifts within the check's reach (:data:`CHECK_WINDOW_NS`) that
    keep every request inside the timeline. A relative file's ``--start`` is ``date`` just
    before the tool, whose zero comes after it (its start-up: ms, tens of ms on a busy
    machine): the shifts searched near it run from -10 ms to 0.9 period. Unix times (the
    host's clock, or another's a few ms off it) by :data:`UNIX_NEAR_NS` either way (at most
    half a period), or by an unambiguous line-up: a clock 10 ms off marks the requests
    beside each throttle, and throttling that repeats every period never lines up
    unambiguously (issue 57). ``import`` and ``advise --passive`` align their requests
    through it."""
    period = period_ns or 100_000_000
    reach = min(UNIX_NEAR_NS, period // 2 - GRID_NS)
    near = (-10_000_000, period * 9 // 10) if relative else (-reach, reach)
    lo = max(-CHECK_WINDOW_NS, timeline[0].t_ns - min(r.start_ns for r in records))
    hi = min(CHECK_WINDOW_NS, timeline[-1].t_ns - max(r.end_ns for r in records))
    stretches = throttled_stretches(timeline, period_ns)
    return align([(r.start_ns, r.end_ns) for r in records], stretches, lo, hi,
                 period_ns=period_ns, near_ns=near)
