"""A latency target (``--p99``, ``--p90``, ``--max-throttled``) and a run judged against it.

Pure: ``http-timing advise`` (``client.commands.advise``) measures runs, :func:`measured` turns
each one's :class:`~client.analysis.report.Report` into a :class:`Measured` row, and the target
says whether it was met and, when not, by what, and whether narrowly either way (on a busy
machine the verdict of such a run could flip: the search runs that limit once more and judges
the mean of the two runs, :func:`pooled`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.analysis.report import Report
from cpuquota.limit import Limit

__all__ = ["NARROW", "LatencyTarget", "Measured", "measured", "pooled"]

# a miss by at most this factor (latency) or 5 points (throttled share) is narrow
NARROW = 1.15
NARROW_THROTTLED = 0.05


@dataclass(frozen=True)
class LatencyTarget:
    """What must hold for a limit to meet the target. Latencies in ms; ``max_throttled`` is
    a fraction (0.05: at most 5 % of the requests throttled)."""

    p99_ms: float
    p90_ms: float | None = None
    max_throttled: float | None = None

    def problem(self) -> str | None:
        """Why this target is nonsense (one line naming the option), or None."""
        for flag, value in (("--p99", self.p99_ms), ("--p90", self.p90_ms)):
            if value is not None and not (math.isfinite(value) and value > 0):
                return f"{flag} must be a number of ms > 0 (got {value:g})"
        if self.p90_ms is not None and self.p90_ms > self.p99_ms:
            return (f"--p90 {self.p90_ms:g} ms is above --p99 {self.p99_ms:g} ms: a p90 is "
                    "never above the p99 of the same run")
        if self.max_throttled is not None and not 0 <= self.max_throttled <= 1:
            return (f"--max-throttled must be a percentage in [0, 100] "
                    f"(got {self.max_throttled * 100:g})")
        return None

    def misses(self, p90_ms: float, p99_ms: float, throttled: float | None,
               errors: int = 0) -> tuple[str, ...]:
        """What a run with these figures missed, in words (empty: it met the target)."""
        out: list[str] = []
        if errors:
            out.append(f"{errors} failed request(s)")
        if not p99_ms <= self.p99_ms:  # NaN (no answer) misses too
            out.append(f"p99 {p99_ms:.1f} > {self.p99_ms:g} ms")
        if self.p90_ms is not None and not p90_ms <= self.p90_ms:
            out.append(f"p90 {p90_ms:.1f} > {self.p90_ms:g} ms")
        if self.max_throttled is not None and throttled is not None and (
                throttled > self.max_throttled):
            out.append(f"throttled {throttled * 100:.0f} % > {self.max_throttled * 100:g} %")
        return tuple(out)

    def narrow(self, p90_ms: float, p99_ms: float, throttled: float | None,
               errors: int = 0) -> bool:
        """Whether the verdict could flip on a busy machine: a miss where every missed figure
        is within ``NARROW`` of its bound (the throttled share within 5 points), or a met run
        with a figure within ``NARROW`` under its bound. Never with failed requests."""
        if errors:
            return False
        bounds = [(p99_ms, self.p99_ms), (p90_ms, self.p90_ms)]
        latencies = [(value, bound) for value, bound in bounds if bound is not None]
        if self.misses(p90_ms, p99_ms, throttled, errors):
            near = all(value <= NARROW * bound for value, bound in latencies if value > bound)
            return near and not (self.max_throttled is not None and throttled is not None
                                 and throttled > self.max_throttled + NARROW_THROTTLED)
        close = any(value >= bound / NARROW for value, bound in latencies)
        return close or (self.max_throttled is not None and throttled is not None
                         and throttled >= self.max_throttled - NARROW_THROTTLED)

    def describe(self) -> str:
        """``p99 <= 30 ms, p90 <= 15 ms, throttled <= 5 %``."""
        parts = [f"p99 <= {self.p99_ms:g} ms"]
        if self.p90_ms is not None:
            parts.append(f"p90 <= {self.p90_ms:g} ms")
        if self.max_throttled is not None:
            parts.append(f"throttled <= {self.max_throttled * 100:g} %")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"p99_ms": self.p99_ms, "p90_ms": self.p90_ms,
                "max_throttled": self.max_throttled}


@dataclass(frozen=True)
class Measured:
    """One real run of an advice: its limit (None: none), figures and verdict."""

    name: str
    role: str                        # profile, guess, search, repeat, usage, period, burst
    limit: Limit | None
    requests: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    throttled_fraction: float | None
    missed: tuple[str, ...] | None   # None: not judged (the profile)
    narrow: bool = False             # the verdict could flip (see LatencyTarget.narrow)
    runs: int = 1                    # > 1: the mean of that many runs (``pooled``)

    @property
    def met(self) -> bool | None:
        return None if self.missed is None else not self.missed

    @property
    def millicores(self) -> int | None:
        return None if self.limit is None else self.limit.millicores

    def to_dict(self) -> dict[str, Any]:
        limit = self.limit
        return {"name": self.name, "role": self.role,
                "cpus": limit.cpus if limit else None,
                "period_ms": limit.period_ms if limit else None,
                "burst_ms": limit.burst_ms if limit else None,
                "requests": self.requests, "errors": self.errors,
                "p50_ms": _number(self.p50_ms), "p90_ms": _number(self.p90_ms),
                "p99_ms": _number(self.p99_ms), "throttled_fraction": self.throttled_fraction,
                "met": self.met, "missed": list(self.missed or ()), "runs": self.runs}


def measured(report: Report, *, role: str, limit: Limit | None,
             target: LatencyTarget | None) -> Measured:
    """The row of a run's report; judged against ``target`` unless None."""
    s = report.summary
    throttled = report.detection.throttled_fraction
    missed = narrow = None
    if target is not None:
        missed = target.misses(s.p90_ms, s.p99_ms, throttled, s.errors)
        narrow = target.narrow(s.p90_ms, s.p99_ms, throttled, s.errors)
    return Measured(report.name, role, limit, s.count, s.errors, s.p50_ms, s.p90_ms, s.p99_ms,
                    throttled, missed, bool(narrow))


def pooled(runs: Sequence[Measured], target: LatencyTarget) -> Measured:
    """The runs of one limit as one row: the mean of their figures, judged by ``target`` (a
    limit run twice meets the target when the mean of the two runs does)."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    shares = [r.throttled_fraction for r in runs]
    known = [s for s in shares if s is not None]
    throttled = float(np.mean(known)) if len(known) == len(shares) else None
    p50, p90, p99 = (float(np.mean([getattr(r, f) for r in runs]))
                     for f in ("p50_ms", "p90_ms", "p99_ms"))
    errors = sum(r.errors for r in runs)
    return Measured(" + ".join(r.name for r in runs), first.role, first.limit,
                    sum(r.requests for r in runs), errors, p50, p90, p99, throttled,
                    target.misses(p90, p99, throttled, errors),
                    target.narrow(p90, p99, throttled, errors), runs=len(runs))


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None
