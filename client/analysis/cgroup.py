"""What a watched group's counter timeline says about a run: CPU used per period against
the quota, the report's ``cgroup`` section, the per-interval numbers of ``watch`` (pure).

How a throttle is placed in time and which requests it hit is ``client.data.attribution``'s
(in the data layer: the run layer fills the CSV's ``cgroup_*`` columns with it). CPU usage
flows continuously: between samples it is interpolated linearly.

When the timeline holds several quota levels (the watched group's and its ancestors': a
container's and its pod's), each level's throttling is summed apart and the report names the
group that throttled most (of levels with the same quota, the first: the resolver's order). Where the group's ``cpu.pressure`` (PSI) was sampled, the report
gives the time its tasks waited for a CPU, whatever the cause (a quota or a busy machine).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from client.data.jsonsafe import json_ready
from client.data.timeline import CgroupSample, level_timelines
from client.data.attribution import CounterSample, attribute_levels, held, period_phase
from cpuquota.limit import Limit

__all__ = ["AT_QUOTA", "FINE", "BusyPeriod", "CgroupReport", "IntervalStats", "LatencyGroup", "PeriodUsage",
           "QuotaLevelReport", "RequestSpan", "cgroup_report", "coarse_usage", "interval_stats",
           "request_spans", "usage_notes", "usage_per_period"]

BUSIEST = 5                  # how many of the busiest periods a report lists
AT_QUOTA = 0.9               # a period that used >= 90 % of its quota hit the limit
FINE = 0.1                   # per-period figures need a usage counted finer than 10 % of a quota


# ---- CPU usage per period --------------------------------------------------------------------

@dataclass(frozen=True)
class PeriodUsage:
    start_ns: int
    usage_ns: int


def usage_per_period(timeline: Sequence[CounterSample], period_ns: int,
                     phase_ns: int | None = None, *,
                     refills: bool = False) -> list[PeriodUsage]:
    """The group's CPU use in each whole period the timeline covers, periods aligned to the
    kernel's boundaries (``phase_ns``; found from the timeline when None, else from its
    start), usage interpolated linearly between samples.

    ``refills``: the counter is the group's CPU time, which a throttled group gets back only
    at a boundary (the period's refill). In a sample interval that holds a boundary and in
    which the kernel counted throttled time (``throttled_ns``, added when the throttle ends),
    that time lies before the boundary, when the group could not run: the interval's CPU is
    spread over the rest of it. Linear alone gives part of a period's first burst to the
    period before (simulated: 2 CPUs spending a 30 ms quota right after each refill, sampled
    every 12.5 ms, read as 23-27 ms in a sixth of the periods)."""
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
    if refills:
        throttled = np.asarray([s.throttled_ns for s in timeline], dtype=float)
        cumulative = _after_refills(edges, cumulative, t, usage, throttled)
    used = np.diff(cumulative)
    return [PeriodUsage(int(edge), int(round(u))) for edge, u in zip(edges[:-1], used)]


def _after_refills(edges: np.ndarray, cumulative: np.ndarray, t: np.ndarray, usage: np.ndarray,
                   throttled: np.ndarray) -> np.ndarray:
    """``cumulative`` (the counter at each edge) with the CPU of a throttled interval placed
    after its boundary (see :func:`usage_per_period`)."""
    out = cumulative.copy()
    right = np.searchsorted(t, edges, side="left")   # t[right - 1] < edge <= t[right]
    for k, (edge, i) in enumerate(zip(edges, right)):
        if i == 0 or i >= len(t) or t[i] == edge:
            continue
        waited = throttled[i] - throttled[i - 1]
        if waited <= 0:
            continue
        running_before = max(0.0, edge - t[i - 1] - waited)
        running = running_before + (t[i] - edge)
        share = running_before / running if running > 0 else 0.0
        out[k] = usage[i - 1] + share * (usage[i] - usage[i - 1])
    return out


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
class QuotaLevelReport:
    """One group with a quota at or above the watched one, and what its quota did."""

    group: str
    quota_cpus: float
    period_ms: float
    nr_periods: int
    nr_throttled: int
    throttled_ms: float
    throttled_requests: int   # requests it throttled more than any other level did


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
    usage_cpus_mean: float    # the run's average: total CPU / wall time (NaN: not known)
    quota_share_mean: float   # usage_cpus_mean / quota_cpus
    periods: int              # whole periods in the timeline
    periods_at_quota: int | None   # of them, how many used >= 90 % of the quota (None: unknown)
    busiest: tuple[BusyPeriod, ...]
    requests: int
    throttled_requests: int   # requests delayed by throttling (the report's one count)
    throttled_latency: LatencyGroup
    other_latency: LatencyGroup
    # the group whose quota throttled most (None: no quota level known), every quota level
    quota_group: str | None = None
    levels: tuple[QuotaLevelReport, ...] = ()
    # cpu.pressure (PSI) over the run: time some / all of the group's tasks waited for a CPU
    # (None: not sampled: cgroup v1, a kernel without PSI, or a timeline from before)
    pressure_some_ms: float | None = None
    pressure_full_ms: float | None = None
    # where the usage came from, how fine it counts, and why a usage figure is left out
    usage_counter: str | None = None
    usage_resolution_ms: float | None = None
    usage_unknown: str | None = None        # the run's usage (and per period) cannot be known
    per_period_unknown: str | None = None   # the per-period figures cannot be (too coarse)

    @property
    def usage_exact(self) -> bool:
        """Whether the usage figures are the kernel's count, fine enough per period: only
        then may a sentence draw a conclusion from them (a caption's "yet the average...")."""
        return self.usage_unknown is None and self.per_period_unknown is None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json_ready(asdict(self))
        return data


def _latency_group(latencies_ns: list[int]) -> LatencyGroup:
    if not latencies_ns:
        nan = float("nan")
        return LatencyGroup(0, nan, nan, nan)
    p50, p90, p99 = np.percentile(np.asarray(latencies_ns, dtype=float) / 1e6, [50, 90, 99])
    return LatencyGroup(len(latencies_ns), float(p50), float(p90), float(p99))


def cgroup_report(requests: Sequence[Any], timeline: Sequence[CounterSample],
                  limit: Limit | None,
                  levels: Sequence[tuple[str, Limit]] = (),
                  usage: Mapping[str, Any] | None = None,
                  delayed: Sequence[bool] | None = None) -> CgroupReport:
    """The group's throttling over the run and what it did to the requests (see
    :func:`request_spans` for what ``requests`` may be). ``levels``: (group, quota) of each
    quota level the timeline holds, in its order (the run's metadata ``cgroup.levels``).
    ``usage``: the metadata's ``cgroup.usage`` (its source, resolution and what could not be
    known: :func:`usage_notes`). ``delayed``: per request, whether it was delayed by
    throttling, when the run's detection has said (the report's one count); else from the
    timeline."""
    spans = request_spans(requests)
    nan = float("nan")
    first, last = (timeline[0], timeline[-1]) if timeline else (None, None)
    duration_ns = last.t_ns - first.t_ns if first is not None and last is not None else 0
    d = _delta(first, last)
    period_ns = limit.period_ns if limit else None
    per_period = usage_per_period(timeline, period_ns or 100_000_000, refills=True)
    quota_ns = limit.quota_ns if limit else None
    busiest = sorted(per_period, key=lambda p: p.usage_ns, reverse=True)[:BUSIEST]
    timelines: list[Sequence[CounterSample]] = [timeline]
    if levels and timeline and isinstance(timeline[0], CgroupSample):
        timelines = list(level_timelines(list(timeline)))   # type: ignore[arg-type]
    periods: list[int | None] = [period_ns] + [lv[1].period_ns for lv in levels[1:]]
    intervals = [(s.start_ns, s.end_ns) for s in spans]
    marks = attribute_levels(intervals, timelines, periods[:len(timelines)])
    # delayed: held by the throttling for some wall time (the run's detection when it said)
    hit = ([bool(d) for d in delayed] if delayed is not None and len(delayed) == len(spans)
           else [wall > 0 and s.ok for wall, s in
                 zip(held(intervals, timelines, periods[:len(timelines)]), spans)])
    level_reports = tuple(_level_report(name, quota, view, [m for m in marks if m[2] == k
                                                            and (m[0] or m[1])])
                          for k, ((name, quota), view) in enumerate(zip(levels, timelines)))
    some, full = _pressure(first, last)
    counter, resolution_ms, unknown = usage_notes(usage)
    coarse = None if unknown is not None else coarse_usage(resolution_ms, quota_ns)
    usage_cpus = d[0] / duration_ns if duration_ns > 0 and unknown is None else nan
    if unknown is not None or coarse is not None:
        busiest = []
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
        periods_at_quota=(None if unknown or coarse else
                          sum(1 for p in per_period if quota_ns and p.usage_ns >= AT_QUOTA
                              * quota_ns)),
        busiest=tuple(BusyPeriod(p.start_ns / 1e9, p.usage_ns / 1e6,
                                 p.usage_ns / quota_ns if quota_ns else nan) for p in busiest),
        requests=len(spans), throttled_requests=sum(hit),
        throttled_latency=_latency_group([s.latency_ns for s, h in zip(spans, hit)
                                          if h and s.ok]),
        other_latency=_latency_group([s.latency_ns for s, h in zip(spans, hit)
                                      if not h and s.ok]),
        quota_group=_quota_group(level_reports),
        levels=level_reports, pressure_some_ms=some, pressure_full_ms=full,
        usage_counter=counter, usage_resolution_ms=resolution_ms, usage_unknown=unknown,
        per_period_unknown=unknown or coarse)


OLD_SCHEDSTAT = ("read from the live threads' schedstat (a run of an earlier version): every "
                 "thread or process that ended between two samples is missing from it")


def usage_notes(usage: Mapping[str, Any] | None) -> tuple[str | None, float | None, str | None]:
    """(where the usage came from, its resolution in ms, why it cannot be known) from the
    metadata's ``cgroup`` section's ``usage`` (or, for a run that has none, its
    ``usage_source``: pass the whole ``cgroup`` section)."""
    if not usage:
        return None, None, None
    if "usage" in usage and isinstance(usage["usage"], Mapping):
        usage = usage["usage"]
    elif "source" not in usage:
        source = usage.get("usage_source")
        return (source, None, OLD_SCHEDSTAT if source == "schedstat" else None)
    resolution = usage.get("resolution_ns")
    unknown = usage.get("unknown")
    if usage.get("source") == "schedstat" and not unknown:
        unknown = OLD_SCHEDSTAT
    return (str(usage.get("counter") or usage.get("source") or "") or None,
            resolution / 1e6 if isinstance(resolution, (int, float)) else None,
            str(unknown) if unknown else None)


def coarse_usage(resolution_ms: float | None, quota_ns: int | None) -> str | None:
    """Why the per-period figures cannot be told (a usage counted in steps coarser than
    ``FINE`` of one period's quota: reaped children's clock ticks), or None: fine enough.
    The one rule for the report, the picture's caption and the live page."""
    if resolution_ms is None or not quota_ns or resolution_ms * 1e6 <= FINE * quota_ns:
        return None
    return (f"usage counted in {resolution_ms:g} ms steps (clock ticks of reaped processes), "
            f"too coarse for one period's {quota_ns / 1e6:g} ms quota")


def _quota_group(levels: Sequence[QuotaLevelReport]) -> str | None:
    """The group the report names: the level that throttled most, or, where that level's
    quota is the first level's (the same limit on two groups: a pod-level one the kubelet
    writes on the container too), the first, as the resolver ordered them (the pod's where
    the pod's spec says the limit is pod-level)."""
    if not levels:
        return None
    most = max(levels, key=lambda lv: lv.throttled_ms)
    first = levels[0]
    same = (most.quota_cpus, most.period_ms) == (first.quota_cpus, first.period_ms)
    return first.group if same else most.group


def _level_report(group: str, quota: Limit, timeline: Sequence[CounterSample],
                  marked: list[tuple[int, int, int]]) -> QuotaLevelReport:
    d = _delta(timeline[0], timeline[-1]) if timeline else (0, 0, 0, 0)
    return QuotaLevelReport(group, round(quota.cpus, 6), quota.period_ms, d[1], d[2], d[3] / 1e6,
                            len(marked))


def _pressure(first: CounterSample | None,
              last: CounterSample | None) -> tuple[float | None, float | None]:
    """The PSI stall (ms) from first to last sample, some and full (None where not sampled)."""
    def change(name: str) -> float | None:
        a, b = getattr(first, name, None), getattr(last, name, None)
        return (b - a) / 1e6 if a is not None and b is not None else None
    return change("pressure_some_ns"), change("pressure_full_ns")


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
        """The JSON: with no quota (``quota_cpus`` None) the throttling figures are null, not
        0: the counters stand still there, and none is claimed from them."""
        out = {**json_ready(asdict(self)), "throttled_share": self.throttled_share}
        if self.quota_cpus is None:
            out.update(nr_periods=None, nr_throttled=None, throttled_ms=None,
                       throttled_share=None)
        return out


def interval_stats(before: CounterSample, after: CounterSample,
                   limit: Limit | None) -> IntervalStats:
    usage, periods, throttled, throttled_ns = _delta(before, after)
    seconds = max(1e-9, (after.t_ns - before.t_ns) / 1e9)
    cpus = usage / 1e9 / seconds
    return IntervalStats(seconds, periods, throttled, throttled_ns / 1e6, cpus,
                         round(limit.cpus, 6) if limit else None,
                         cpus / limit.cpus if limit else None)
