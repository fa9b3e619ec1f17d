"""A latency target (``--p99``, ``--p90``, ``--max-throttled``) and a run judged against it.

Pure: ``http-timing advise`` (``client.commands.advise``) measures runs, :func:`measured` turns
each one's :class:`~client.analysis.report.Report` into a :class:`Measured` row, and the target
says whether it was met and, when not, by what, and whether narrowly either way (on a busy
machine the verdict of such a run could flip: the search runs that limit once more and judges
the mean of the two runs, :func:`pooled`).

A limit is judged by what its quota did (:func:`judge_requests`). A request over the target
that no throttling delayed (its counters, Server-Timing's ``kernel-throttled`` or the watched
group's ``cpu.stat``, counted no throttled period in it) is *slow without throttling*: it
waited for something that is not the quota (a sleep, a database, the machine's other load).
Such requests are counted apart: each is judged as the run's median unthrottled request,
what it would have taken without its wait, and a run whose requests over the target were
none of them throttled has not missed because of the limit (:meth:`LatencyGoal.judge`): the
search never raises a limit for it. The server's counters see the handler's work only: a stall
before the handler read the request is counted apart too (sequential runs: rare, a period's
quota must run out between two requests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from client.analysis.detect import Detection
from client.analysis.report import Report
from client.data.record import RequestRecord
from cpuquota.limit import Limit

__all__ = ["NARROW", "JudgedRequests", "LatencyGoal", "Measured", "delayed_by_throttling",
           "judge_requests", "judge_run", "measured", "pooled_runs"]

# a miss by at most this factor (latency) or 5 points (throttled share) is narrow
NARROW = 1.15
NARROW_THROTTLED = 0.05


@dataclass(frozen=True)
class LatencyGoal:
    """What must hold for a limit to meet the target. Latencies in ms; ``max_throttled`` is
    a fraction (0.05: at most 5 % of the requests delayed by throttling)."""

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
            out.append(f"delayed by throttling {throttled * 100:.0f} % > "
                       f"{self.max_throttled * 100:g} %")
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

    @property
    def tightest_ms(self) -> float:
        """The lowest latency bound: a request slower than this is over the target."""
        return min(b for b in (self.p99_ms, self.p90_ms) if b is not None)

    def judge(self, p90_ms: float, p99_ms: float, throttled: float | None, errors: int = 0,
              throttled_over: int | None = None) -> tuple[tuple[str, ...], bool]:
        """``(missed, narrow)`` of a limit's figures. ``throttled_over``: how many requests over
        the target throttling delayed; 0 means no latency figure can have missed because of
        the limit (only failed requests and the throttled share still count); None: not
        known per request, every figure counts."""
        if throttled_over == 0:
            p90_ms = p99_ms = 0.0
        return (self.misses(p90_ms, p99_ms, throttled, errors),
                self.narrow(p90_ms, p99_ms, throttled, errors))

    def describe(self) -> str:
        """``p99 <= 30 ms, p90 <= 15 ms, delayed by throttling <= 5 %``."""
        parts = [f"p99 <= {self.p99_ms:g} ms"]
        if self.p90_ms is not None:
            parts.append(f"p90 <= {self.p90_ms:g} ms")
        if self.max_throttled is not None:
            parts.append(f"delayed by throttling <= {self.max_throttled * 100:g} %")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"p99_ms": self.p99_ms, "p90_ms": self.p90_ms,
                "max_throttled": self.max_throttled}


@dataclass(frozen=True)
class JudgedRequests:
    """A run's requests as the limit is judged by them (see the module docstring)."""

    p90_ms: float                       # the slow-without-throttling requests counted apart
    p99_ms: float
    slow_unthrottled: int               # over the target, no throttling in them
    throttled_over: int                 # over the target, delayed by throttling
    unthrottled_p99_ms: float | None    # p99 of the requests no throttling delayed


def judge_requests(latencies_ms: Sequence[float], delayed: Sequence[bool],
                   target: LatencyGoal) -> JudgedRequests:
    """The successful requests' latencies and whether throttling delayed each: each request
    over the target's tightest bound that throttling did not delay is set to the median of the
    undelayed ones (what it takes without its wait), and the p90 and p99 taken again."""
    lat = np.asarray(latencies_ms, dtype=float)
    mask = np.asarray(delayed, dtype=bool)
    if not lat.size:
        return JudgedRequests(math.nan, math.nan, 0, 0, None)
    over = lat > target.tightest_ms
    apart = over & ~mask
    free = lat[~mask]
    typical = float(np.median(free)) if free.size else math.nan
    p90, p99 = (float(v) for v in np.percentile(np.where(apart, typical, lat), [90, 99]))
    return JudgedRequests(p90, p99, int(apart.sum()), int((over & mask).sum()),
                  float(np.percentile(free, 99)) if free.size else None)


def delayed_by_throttling(record: RequestRecord, detection: Detection) -> bool:
    """Whether throttling delayed this request: its own counters when it has them (the
    server's Server-Timing, the watched group's), else the run's marks (``detect``)."""
    counted = record.counters_throttled
    return detection.is_throttled(record) if counted is None else counted


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
    narrow: bool = False             # the verdict could flip (see LatencyGoal.narrow)
    runs: int = 1                    # > 1: the mean of that many runs (``pooled``)
    # judged by what the quota did (``judge_requests``); None: by the figures above alone
    slow_unthrottled: int = 0        # requests over the target no throttling delayed
    throttled_over: int | None = None   # requests over the target throttling delayed
    judged_p90_ms: float | None = None  # the slow-without-throttling counted apart
    judged_p99_ms: float | None = None
    unthrottled_p99_ms: float | None = None   # p99 of the requests no throttling delayed

    @property
    def judged_p90(self) -> float:
        """The p90 the limit is judged by (the measured one when not judged per request)."""
        return self.p90_ms if self.judged_p90_ms is None else self.judged_p90_ms

    @property
    def judged_p99(self) -> float:
        """The p99 the limit is judged by (the measured one when not judged per request)."""
        return self.p99_ms if self.judged_p99_ms is None else self.judged_p99_ms

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
                "met": self.met, "missed": list(self.missed or ()), "runs": self.runs,
                "slow_unthrottled": self.slow_unthrottled,
                "throttled_over_target": self.throttled_over,
                "judged_p90_ms": _maybe(self.judged_p90_ms),
                "judged_p99_ms": _maybe(self.judged_p99_ms),
                "unthrottled_p99_ms": _maybe(self.unthrottled_p99_ms)}


def measured(report: Report, *, role: str, limit: Limit | None,
             target: LatencyGoal | None,
             records: Sequence[RequestRecord] | None = None) -> Measured:
    """The row of a run's report; judged against ``target`` unless None. With the run's
    ``records`` the limit is judged by the requests throttling delayed (:func:`judge_run`)."""
    s = report.summary
    row = Measured(report.name, role, limit, s.count, s.errors, s.p50_ms, s.p90_ms, s.p99_ms,
                   report.detection.throttled_fraction, None)
    if target is None:
        return row
    if records is None:
        return judge_run(row, None, target)
    ok = [r for r in records if r.ok]
    return judge_run(row, ([r.latency_ms for r in ok],
                           [delayed_by_throttling(r, report.detection) for r in ok]), target)


def judge_run(row: Measured, requests: tuple[Sequence[float], Sequence[bool]] | None,
              target: LatencyGoal) -> Measured:
    """``row`` judged against ``target``: by its successful ``requests`` (their latencies in
    ms, and whether throttling delayed each: :func:`judge_requests`), or, None, by its
    figures alone. The one judge of every run of ``advise`` (burn-service, ``--cgroup``,
    ``--k8s``, a Deployment's pods)."""
    if requests is not None:
        judged = judge_requests(*requests, target)
        row = replace(row, slow_unthrottled=judged.slow_unthrottled,
                      throttled_over=judged.throttled_over, judged_p90_ms=judged.p90_ms,
                      judged_p99_ms=judged.p99_ms, unthrottled_p99_ms=judged.unthrottled_p99_ms)
    missed, narrow = target.judge(row.judged_p90, row.judged_p99, row.throttled_fraction,
                                  row.errors, row.throttled_over)
    return replace(row, missed=missed, narrow=narrow)


def pooled_runs(runs: Sequence[Measured], target: LatencyGoal) -> Measured:
    """The runs of one limit as one row: the mean of their figures, judged by ``target`` (a
    limit run twice meets the target when the mean of the two runs does; the requests over the
    target throttling delayed, summed, say whether the latencies count)."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    shares = [r.throttled_fraction for r in runs]
    known = [s for s in shares if s is not None]
    throttled = float(np.mean(known)) if len(known) == len(shares) else None
    p50, p90, p99, judged_p90, judged_p99 = (
        float(np.mean([getattr(r, f) for r in runs]))
        for f in ("p50_ms", "p90_ms", "p99_ms", "judged_p90", "judged_p99"))
    errors = sum(r.errors for r in runs)
    counted = [r.throttled_over for r in runs]
    over = None if None in counted else sum(c or 0 for c in counted)
    free = [r.unthrottled_p99_ms for r in runs if r.unthrottled_p99_ms is not None]
    per_request = all(r.judged_p99_ms is not None for r in runs)
    missed, narrow = target.judge(judged_p90, judged_p99, throttled, errors, over)
    return Measured(" + ".join(r.name for r in runs), first.role, first.limit,
                    sum(r.requests for r in runs), errors, p50, p90, p99, throttled,
                    missed, narrow, runs=len(runs),
                    slow_unthrottled=sum(r.slow_unthrottled for r in runs), throttled_over=over,
                    judged_p90_ms=judged_p90 if per_request else None,
                    judged_p99_ms=judged_p99 if per_request else None,
                    unthrottled_p99_ms=float(np.mean(free)) if free else None)


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _maybe(value: float | None) -> float | None:
    return None if value is None else _number(value)
