"""What a watched group's counter timeline says about each request: pure functions, no I/O.

The timeline is a list of samples (``t_ns``, ``usage_ns``, ``nr_periods``, ``nr_throttled``,
``throttled_ns``; cumulative counters, ``t_ns`` on the requests' clock). How the kernel moves
the counters (``kernel/sched/fair.c``) decides how they are read here:

- ``nr_periods`` and ``nr_throttled`` grow at **period boundaries** (the period timer), and
  the throttled time grows when a throttle **ends** (at the boundary whose refill lets the
  group run again), by the whole length of that throttle. So a growth of the throttled time
  seen between two samples is a throttle that *ended* there and *began* that long before:
  the time is not spread over the sample interval, it is laid back from its end.
- The boundaries lie on a fixed grid (the timer keeps its phase). :func:`period_phase` finds
  the grid from the intervals in which ``nr_periods`` grew (each one says "a boundary is in
  here"; with jittery 10 ms samples they pin it to well under a millisecond), and a throttle's
  end is put on the boundary inside its interval (the interval's middle when none is known).
- Overlapping requests share the blame: each request gets the part of every throttled
  stretch that overlaps it, so with concurrency the per-request sums may exceed the group's.
- CPU usage flows continuously: between samples it is interpolated linearly.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from service.limit import Limit

__all__ = ["MIN_OVERLAP_NS", "BusyPeriod", "CgroupReport", "CounterSample", "IntervalStats",
           "LatencyGroup", "PeriodUsage", "RequestSpan", "ThrottleEvent", "attribute",
           "cgroup_report", "interval_stats", "period_phase", "request_spans",
           "throttle_events", "throttled_stretches", "usage_per_period"]

MIN_OVERLAP_NS = 1_000_000   # a stretch overlapping a request by less is estimation noise
BUSIEST = 5                  # how many of the busiest periods a report lists
AT_QUOTA = 0.9               # a period that used >= 90 % of its quota hit the limit


class CounterSample(Protocol):
    """One reading of the group's counters (``client.run.cgroup_sampler.CgroupSample``)."""

    @property
    def t_ns(self) -> int: ...
    @property
    def usage_ns(self) -> int: ...
    @property
    def nr_periods(self) -> int: ...
    @property
    def nr_throttled(self) -> int: ...
    @property
    def throttled_ns(self) -> int: ...


@dataclass(frozen=True)
class ThrottleEvent:
    """One throttle: the group could not run from ``start_ns`` to ``end_ns`` (estimated),
    ``throttled_ns`` as the kernel counted it (summed over CPUs), ``nr_throttled`` periods."""

    start_ns: int
    end_ns: int
    throttled_ns: int
    nr_throttled: int


# ---- where the period boundaries are ---------------------------------------------------------

def period_phase(timeline: Sequence[CounterSample], period_ns: int) -> int | None:
    """The boundaries' phase ``φ`` in ``[0, period_ns)``: boundaries are at ``φ + k·period``.

    Every sample interval in which ``nr_periods`` grew holds a boundary; the phase most of
    them agree on (the middle of the widest such arc) wins. None when under half agree
    (the quota was rewritten mid-run, so the timer restarted) or nothing grew."""
    if period_ns <= 0:
        return None
    events: list[tuple[int, int]] = []
    observations = 0
    for before, after in zip(timeline, timeline[1:]):
        if after.nr_periods == before.nr_periods or after.t_ns - before.t_ns >= period_ns / 2:
            continue
        observations += 1
        lo, hi = before.t_ns % period_ns, after.t_ns % period_ns
        if lo <= hi:
            events += [(lo, 1), (hi, -1)]
        else:
            events += [(lo, 1), (period_ns, -1), (0, 1), (hi, -1)]
    if not observations:
        return None
    events.sort(key=lambda e: (e[0], e[1]))
    best, best_arcs, coverage = 0, [], 0
    for (position, change), (next_position, _) in zip(events, events[1:]):
        coverage += change
        if next_position <= position:
            continue
        if coverage > best:
            best, best_arcs = coverage, [(position, next_position)]
        elif coverage == best:
            best_arcs.append((position, next_position))
    if best * 2 < observations or not best_arcs:
        return None
    lo, hi = _widest(best_arcs, period_ns)
    return int((lo + hi) // 2) % period_ns


def _widest(arcs: list[tuple[int, int]], period_ns: int) -> tuple[int, int]:
    """The widest of the arcs, joining touching ones (also across the wrap at ``period``)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(arcs):
        if merged and merged[-1][1] >= lo:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if len(merged) > 1 and merged[0][0] == 0 and merged[-1][1] == period_ns:
        first = merged.pop(0)
        merged[-1][1] = period_ns + first[1]
    lo, hi = max(merged, key=lambda arc: arc[1] - arc[0])
    return lo, hi


def _boundary_in(lo: int, hi: int, period_ns: int | None, phase: int | None) -> int:
    """The period boundary in the sample interval ``(lo, hi]``; its middle if none is known."""
    if period_ns and phase is not None:
        k = math.ceil((lo - phase) / period_ns)
        boundary = phase + k * period_ns
        if lo <= boundary <= hi:
            return boundary
    return (lo + hi) // 2


# ---- throttles and what they did to each request ---------------------------------------------

def throttle_events(timeline: Sequence[CounterSample],
                    period_ns: int | None = None) -> list[ThrottleEvent]:
    """The throttles the timeline shows, in time order. Each growth of the throttled time
    ends a throttle on the boundary in its sample interval; the throttle began
    ``throttled_ns`` earlier, but not before the previous one ended (several CPUs throttled
    at once count their times together). ``nr_throttled`` grown at boundaries with no
    throttled time yet (a throttle spanning periods) goes to the throttle that ends next."""
    phase = period_phase(timeline, period_ns) if period_ns else None
    events: list[ThrottleEvent] = []
    previous_end = timeline[0].t_ns if timeline else 0
    pending_nr, pending_from = 0, 0
    for before, after in zip(timeline, timeline[1:]):
        grown_ns = after.throttled_ns - before.throttled_ns
        grown_nr = after.nr_throttled - before.nr_throttled
        if grown_ns <= 0:
            if grown_nr > 0:
                pending_from = pending_from if pending_nr else before.t_ns
                pending_nr += grown_nr
            continue
        end = _boundary_in(before.t_ns, after.t_ns, period_ns, phase)
        length = max(1, min(grown_ns, end - previous_end))
        events.append(ThrottleEvent(end - length, end, grown_ns, grown_nr + pending_nr))
        previous_end, pending_nr = end, 0
    if pending_nr and timeline:   # still throttled when the timeline ended
        events.append(ThrottleEvent(max(previous_end, pending_from), timeline[-1].t_ns, 0,
                                    pending_nr))
    return events


def throttled_stretches(timeline: Sequence[CounterSample],
                        period_ns: int | None = None) -> list[tuple[int, int]]:
    """``(start_ns, end_ns)`` of each throttle, for the picture's shaded bands."""
    return [(e.start_ns, e.end_ns) for e in throttle_events(timeline, period_ns)]


def attribute(intervals: Sequence[tuple[int, int]], timeline: Sequence[CounterSample], *,
              period_ns: int | None = None,
              min_overlap_ns: int = MIN_OVERLAP_NS) -> list[tuple[int, int]]:
    """``(throttled_ns, nr_throttled)`` per request interval ``(start_ns, end_ns)``: the part
    of each throttle's time that overlaps the request (all of it when the throttle lies
    inside), and the periods of every throttle that overlaps it. An overlap shorter than
    ``min_overlap_ns`` (and than the throttle) is taken as the estimate's noise."""
    events = throttle_events(timeline, period_ns)
    ends = [e.end_ns for e in events]
    out: list[tuple[int, int]] = []
    for start, end in intervals:
        throttled, periods = 0.0, 0
        i = bisect.bisect_left(ends, start)
        while i < len(events) and events[i].start_ns <= end:
            event = events[i]
            i += 1
            overlap = min(end, event.end_ns) - max(start, event.start_ns)
            length = event.end_ns - event.start_ns
            if length == 0 and not start <= event.end_ns <= end:
                continue
            if length > 0 and (overlap <= 0 or (overlap < min_overlap_ns and overlap < length)):
                continue
            throttled += event.throttled_ns * (overlap / length if length else 1.0)
            periods += event.nr_throttled
        out.append((round(throttled), periods))
    return out


# ---- CPU usage per period --------------------------------------------------------------------

@dataclass(frozen=True)
class PeriodUsage:
    start_ns: int
    usage_ns: int


def usage_per_period(timeline: Sequence[CounterSample], period_ns: int,
                     phase_ns: int | None = None) -> list[PeriodUsage]:
    """The group's CPU use in each whole period the timeline covers, periods aligned to the
    kernel's boundaries (``phase_ns``; found from the timeline when None, else from its
    start), usage interpolated linearly between samples."""
    if len(timeline) < 2 or period_ns <= 0:
        return []
    if phase_ns is None:
        phase_ns = period_phase(timeline, period_ns)
    t = np.asarray([s.t_ns for s in timeline], dtype=float)
    usage = np.asarray([s.usage_ns for s in timeline], dtype=float)
    first = t[0] if phase_ns is None else phase_ns + math.ceil((t[0] - phase_ns) / period_ns) \
        * period_ns
    edges = np.arange(first, t[-1] + 1, period_ns)
    if len(edges) < 2:
        return []
    cumulative = np.interp(edges, t, usage)
    used = np.diff(cumulative)
    return [PeriodUsage(int(edge), int(round(u))) for edge, u in zip(edges[:-1], used)]


# ---- the report --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestSpan:
    """A request on the run's clock: sent at ``start_ns``, answered at ``end_ns``."""

    start_ns: int
    end_ns: int
    latency_ns: int
    ok: bool = True


def request_spans(requests: Sequence[Any]) -> list[RequestSpan]:
    """Spans from records (``start_ns``, ``latency_ns``, optional ``origin_ns`` and ``ok``:
    the run's ``RequestRecord``), ``(start_ns, end_ns)`` pairs or spans."""
    spans: list[RequestSpan] = []
    for r in requests:
        if isinstance(r, RequestSpan):
            spans.append(r)
        elif isinstance(r, tuple):
            spans.append(RequestSpan(int(r[0]), int(r[1]), int(r[1]) - int(r[0])))
        else:
            origin = getattr(r, "origin_ns", r.start_ns)
            spans.append(RequestSpan(r.start_ns, origin + r.latency_ns, r.latency_ns,
                                     bool(getattr(r, "ok", True))))
    return spans


@dataclass(frozen=True)
class LatencyGroup:
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float


@dataclass(frozen=True)
class BusyPeriod:
    start_s: float            # since the run's start
    usage_ms: float
    quota_share: float        # usage / quota (NaN without a quota)


@dataclass(frozen=True)
class CgroupReport:
    """The ``cgroup`` section of ``http-timing report``."""

    samples: int
    duration_s: float
    samples_per_s: float
    nr_periods: int
    nr_throttled: int
    throttled_ms: float
    throttled_share: float    # nr_throttled / nr_periods
    quota_cpus: float | None
    period_ms: float | None
    usage_cpus_mean: float    # the run's average: total CPU / wall time
    quota_share_mean: float   # usage_cpus_mean / quota_cpus
    periods: int              # whole periods in the timeline
    periods_at_quota: int     # of them, how many used >= 90 % of the quota
    busiest: tuple[BusyPeriod, ...]
    requests: int
    throttled_requests: int   # requests that overlapped a throttle
    throttled_latency: LatencyGroup
    other_latency: LatencyGroup

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _json_ready(asdict(self))
        return data


def _json_ready(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value


def _latency_group(latencies_ns: list[int]) -> LatencyGroup:
    if not latencies_ns:
        nan = float("nan")
        return LatencyGroup(0, nan, nan, nan)
    p50, p90, p99 = np.percentile(np.asarray(latencies_ns, dtype=float) / 1e6, [50, 90, 99])
    return LatencyGroup(len(latencies_ns), float(p50), float(p90), float(p99))


def cgroup_report(requests: Sequence[Any], timeline: Sequence[CounterSample],
                  limit: Limit | None) -> CgroupReport:
    """The group's throttling over the run and what it did to the requests (see
    :func:`request_spans` for what ``requests`` may be)."""
    spans = request_spans(requests)
    nan = float("nan")
    first, last = (timeline[0], timeline[-1]) if timeline else (None, None)
    duration_ns = last.t_ns - first.t_ns if first is not None and last is not None else 0
    d = _delta(first, last)
    period_ns = limit.period_ns if limit else None
    per_period = usage_per_period(timeline, period_ns or 100_000_000)
    quota_ns = limit.quota_ns if limit else None
    busiest = sorted(per_period, key=lambda p: p.usage_ns, reverse=True)[:BUSIEST]
    marks = attribute([(s.start_ns, s.end_ns) for s in spans], timeline, period_ns=period_ns)
    hit = [m[0] > 0 or m[1] > 0 for m in marks]
    usage_cpus = d[0] / duration_ns if duration_ns > 0 else nan
    return CgroupReport(
        samples=len(timeline), duration_s=duration_ns / 1e9,
        samples_per_s=(len(timeline) - 1) / (duration_ns / 1e9) if duration_ns > 0 else nan,
        nr_periods=d[1], nr_throttled=d[2], throttled_ms=d[3] / 1e6,
        throttled_share=d[2] / d[1] if d[1] else nan,
        quota_cpus=round(limit.cpus, 6) if limit else None,
        period_ms=limit.period_ms if limit else None,
        usage_cpus_mean=usage_cpus,
        quota_share_mean=usage_cpus / limit.cpus if limit else nan,
        periods=len(per_period),
        periods_at_quota=sum(1 for p in per_period if quota_ns and p.usage_ns >= AT_QUOTA
                             * quota_ns),
        busiest=tuple(BusyPeriod(p.start_ns / 1e9, p.usage_ns / 1e6,
                                 p.usage_ns / quota_ns if quota_ns else nan) for p in busiest),
        requests=len(spans), throttled_requests=sum(hit),
        throttled_latency=_latency_group([s.latency_ns for s, h in zip(spans, hit)
                                          if h and s.ok]),
        other_latency=_latency_group([s.latency_ns for s, h in zip(spans, hit)
                                      if not h and s.ok]))


def _delta(first: CounterSample | None, last: CounterSample | None) -> tuple[int, int, int, int]:
    """(usage_ns, nr_periods, nr_throttled, throttled_ns) from first to last."""
    if first is None or last is None:
        return 0, 0, 0, 0
    return (last.usage_ns - first.usage_ns, last.nr_periods - first.nr_periods,
            last.nr_throttled - first.nr_throttled, last.throttled_ns - first.throttled_ns)


# ---- one interval (http-timing watch) --------------------------------------------------------

@dataclass(frozen=True)
class IntervalStats:
    """The group's throttling between two readings."""

    interval_s: float
    nr_periods: int
    nr_throttled: int
    throttled_ms: float
    usage_cpus: float           # CPUs used on average in the interval
    quota_cpus: float | None
    quota_share: float | None   # usage_cpus / quota_cpus

    @property
    def throttled_share(self) -> float | None:
        return self.nr_throttled / self.nr_periods if self.nr_periods else None

    def to_dict(self) -> dict[str, Any]:
        return {**_json_ready(asdict(self)), "throttled_share": self.throttled_share}


def interval_stats(before: CounterSample, after: CounterSample,
                   limit: Limit | None) -> IntervalStats:
    usage, periods, throttled, throttled_ns = _delta(before, after)
    seconds = max(1e-9, (after.t_ns - before.t_ns) / 1e9)
    cpus = usage / 1e9 / seconds
    return IntervalStats(seconds, periods, throttled, throttled_ns / 1e6, cpus,
                         round(limit.cpus, 6) if limit else None,
                         cpus / limit.cpus if limit else None)
