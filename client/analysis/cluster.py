"""``cluster``: a row per workload from its pods' recorded windows (pure, no I/O).

Each pod's window is replayed alone (``client.analysis.replay``): a limit applies to each pod,
so a workload's replicas are judged per replica and pooled, as if a request arrived at a
random instant at a random replica (each pod weighted by its window's length). A row says:

- the limit and request of the pod template (summed over containers);
- usage p95 (robusta-dev/krr's simple strategy: the 95th percentile of every pod's
  per-second CPU pooled, as its ``calculate_cpu_proposal`` concatenates the pods' samples)
  and VPA's rule (the recommender's 90th percentile of the same samples, + 15 %):
  ``client.analysis.advise_model.USAGE_RULES``;
- what the kernel counted in the windows (periods, periods throttled, throttled time: the
  timelines' ``cpu.stat``) and the added delay p99 now (the record's throttles,
  ``client.data.attribution.throttle_events``, for a random arrival); none of it for a
  workload whose pods have no quota (no limit, or exclusive CPUs under the static CPU manager:
  "no CPU quota: throttling cannot happen here"), and such a row is listed apart;
- the smallest limit whose replay keeps the added delay's p99 (and p90) within the target
  (the search that replays it: ``client.advise.cluster.row_of``) and that replay's figures;
- a note when the pods' windows show the replica count moving (an HPA): predicted per
  replica, each replica's recorded demand at the limit.

Rows are sorted by what throttling costs now: the throttled time the kernel counted, then the
added delay p99.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from client.analysis.advise import floor_millicores
from client.analysis.advise_model import USAGE_RULES
from client.analysis.replay import Demand, Replayed, demand_of
from client.data.attribution import CounterSample, throttle_events
from client.data.timeline import columns_of
from cpuquota.account import CpuStat
from cpuquota.limit import NO_QUOTA

__all__ = ["CEILING_CPUS", "NO_RECOMMENDATION", "NO_WINDOW", "ClusterRow", "PodWindow",
           "WorkloadLimits", "no_quota", "none_advised", "per_period",
           "pod_window", "pooled_replays", "replica_note", "search_span", "sort_rows", "usage_p95",
           "vpa_rule"]

MS = 1_000_000
CEILING_CPUS = 64        # the most a search tries, whatever the pods used
KRR, VPA = (next(r for r in USAGE_RULES if r.key == key) for key in ("p95", "p90+15%"))


@dataclass(frozen=True)
class PodWindow:
    """One pod's recorded window, ready to replay."""

    pod: str
    demand: Demand
    limit_cpus: float | None             # the limit the record shows in force (first)
    recorded: Replayed                   # the record's own throttles, as a replay's figures
    usage_per_s: tuple[float, ...]       # CPUs used in each whole second of the window
    start_epoch_ns: int | None           # the window on the wall clock (None: not known)
    end_epoch_ns: int | None


EXACT = 2.0 ** 52   # below it, an int64 product and a float64 quotient are exact (margin 2x)


def _per_second(samples: Sequence[CounterSample]) -> tuple[float, ...]:
    """CPUs used in each whole second from the first sample (usage interpolated at each
    second's edges). On all edges at once where each interpolation's product is exact in
    int64 and float64 (so its quotient is the one Python's ints give: the same floats);
    else an edge at a time (:func:`_per_second_each`)."""
    columns = columns_of(samples)
    if columns is not None:   # a Rows' own columns
        times, usage = columns[:, 0], columns[:, 1]
    else:
        times = np.fromiter((s.t_ns for s in samples), np.int64, len(samples))
        usage = np.fromiter((s.usage_ns for s in samples), np.int64, len(samples))
    if len(times) < 2 or np.any(np.diff(times) < 0):
        return _per_second_each(samples)
    edges = np.arange(int(times[0]), int(times[-1]) + 1, 1_000_000_000, dtype=np.int64)
    i = np.clip(np.searchsorted(times, edges, side="left"), 1, len(times) - 1)
    a_t, b_t, a_u, b_u = times[i - 1], times[i], usage[i - 1], usage[i]
    span, into, grown = b_t - a_t, edges - a_t, b_u - a_u
    if np.any(np.abs(grown).astype(float) * np.abs(into).astype(float) >= EXACT):
        return _per_second_each(samples)
    same = span == 0
    marks = np.where(same, b_u.astype(float), a_u.astype(float) + (grown * into).astype(float)
                     / np.where(same, 1, span).astype(float))
    return tuple(np.maximum(0.0, np.diff(marks) / 1e9).tolist())


def _per_second_each(samples: Sequence[CounterSample]) -> tuple[float, ...]:
    """:func:`_per_second` an edge at a time, in Python's ints."""
    times = [s.t_ns for s in samples]
    start, end = times[0], times[-1]

    def usage_at(t: int) -> float:
        i = min(max(1, bisect.bisect_left(times, t)), len(times) - 1)
        a, b = samples[i - 1], samples[i]
        if b.t_ns == a.t_ns:
            return float(b.usage_ns)
        return a.usage_ns + (b.usage_ns - a.usage_ns) * (t - a.t_ns) / (b.t_ns - a.t_ns)

    edges = range(start, end + 1, 1_000_000_000)
    marks = [usage_at(t) for t in edges]
    return tuple(max(0.0, (b - a) / 1e9) for a, b in zip(marks, marks[1:]))


def pod_window(pod: str, samples: Sequence[CounterSample], period_ns: int,
               limits: Sequence[float | None], zero_epoch_ns: int | None) -> PodWindow:
    """The pod's window (``ReplayError`` for one too short or idle, as ``demand_of``)."""
    events = throttle_events(samples, period_ns)   # once, for the demand and the record
    demand = demand_of(samples, period_ns, events=events)
    limit = next((c for c in limits if c is not None), None)
    stretches = tuple((e.start_ns, e.end_ns) for e in events if e.end_ns > e.start_ns)
    recorded = Replayed(limit, stretches, demand.recorded, (demand.start_ns, demand.end_ns))
    epoch = (None, None) if zero_epoch_ns is None else (zero_epoch_ns + demand.start_ns,
                                                        zero_epoch_ns + demand.end_ns)
    return PodWindow(pod, demand, limit, recorded, _per_second(samples), *epoch)


def per_period(window: PodWindow) -> tuple[list[float], list[float], list[bool]]:
    """The window period by period on the record's grid: each period's start (s from the
    window's start), the CPUs used in it (the record's usage), and whether the record was
    throttled in it."""
    demand = window.demand
    period = demand.period_ns
    first = demand.origin_ns
    count = max(1, -(-(demand.end_ns - first) // period))
    used = [0.0] * count
    ends = (*demand.starts_ns[1:], demand.end_ns)
    for s, e, u in zip(demand.starts_ns, ends, demand.used_ns):
        if e > s:   # an interval's usage shared by the periods it overlaps
            for k in range((s - first) // period, min(count, (e - 1 - first) // period + 1)):
                lo, hi = max(s, first + k * period), min(e, first + (k + 1) * period)
                used[k] += u * max(0, hi - lo) / (e - s)
    throttled = [False] * count
    for s, e in window.recorded.stretches:
        for k in range(max(0, (s - first) // period), min(count, (e - 1 - first) // period + 1)):
            throttled[k] = True
    starts = [(first + k * period - demand.start_ns) / 1e9 for k in range(count)]
    return starts, [u / period for u in used], throttled


def pooled_replays(replays: Sequence[Replayed]) -> Replayed:
    """The replays of several pods' windows as one, end to end: a random instant of it is a
    random replica at a random instant of its window. One is its own (its window where it
    was: its readers take each time from the window's start)."""
    if len(replays) == 1:
        return replays[0]
    stretches: list[tuple[int, int]] = []
    offset = 0
    stats = CpuStat()
    for r in replays:
        lo, hi = r.window
        stretches += [(s - lo + offset, e - lo + offset) for s, e in r.stretches]
        offset += hi - lo
        stats = CpuStat(stats.nr_periods + r.stats.nr_periods,
                        stats.nr_throttled + r.stats.nr_throttled,
                        stats.throttled_ns + r.stats.throttled_ns)
    cpus = replays[0].cpus if replays else None
    return Replayed(cpus, tuple(stretches), stats, (0, offset))


def usage_p95(pods: Sequence[PodWindow]) -> float | None:
    """krr's simple strategy: p95 of every pod's per-second CPU pooled."""
    return KRR.cpus([u for p in pods for u in p.usage_per_s])


def vpa_rule(pods: Sequence[PodWindow]) -> float | None:
    """VPA's recommender: p90 of every pod's per-second CPU pooled, + 15 %."""
    return VPA.cpus([u for p in pods for u in p.usage_per_s])


def search_span(limit_cpus: float | None, pods: Sequence[PodWindow]) -> tuple[int, int, int]:
    """(start, floor, ceiling) millicores of the search: from the limit in force (else the
    most CPU a pod used at once), up to 4 times the limit or the CPUs a pod used at once."""
    period_ms = max(p.demand.period_ns for p in pods) / MS
    floor = floor_millicores(period_ms)
    cores = max(p.demand.cores for p in pods)
    limit = None if limit_cpus is None else round(limit_cpus * 1000)
    ceiling = min(CEILING_CPUS * 1000, max(cores * 1000, 4 * (limit or 0), 1000))
    start = min(ceiling, max(floor, limit if limit else cores * 1000))
    return start, floor, ceiling


def replica_note(pods: Sequence[PodWindow], slack_ns: int = 2_000_000_000) -> str | None:
    """"replicas moved" when the pods' windows do not all cover the same span (one started
    or ended more than ``slack_ns`` inside the others'); None when they do, or when the
    windows are not on the wall clock."""
    spans = [(p.start_epoch_ns, p.end_epoch_ns) for p in pods]
    known = [(s, e) for s, e in spans if s is not None and e is not None]
    if len(known) < 2 or len(known) != len(spans):
        return None
    lo, hi = min(s for s, _ in known), max(e for _, e in known)
    if all(s - lo <= slack_ns and hi - e <= slack_ns for s, e in known):
        return None
    instants = sorted({t for s, e in known for t in (s, e - 1)})
    counts = [sum(1 for s, e in known if s <= t < e) for t in instants]
    return (f"replicas moved in the window ({min(counts)} to {max(counts)} pods recorded at "
            "once): predicted per replica, each replica's own recorded demand at the limit")


def no_quota(limit_cpus: float | None) -> str:
    """Why a workload's pods have no quota, as its row says (``limit_cpus``: the template's)."""
    if limit_cpus is None:
        return f"{NO_QUOTA} (no limit: a container has no limits.cpu)"
    return (f"{NO_QUOTA} (limits.cpu {limit_cpus:g}, but its pods' groups have no quota: "
            "exclusive CPUs under the static CPU manager get none)")


@dataclass(frozen=True)
class WorkloadLimits:
    """What the pod template asks: the limit and the request (None: not every container
    has one)."""

    workload: str          # NS/kind/NAME
    limit_cpus: float | None
    request_cpus: float | None
    replicas: int | None = None


@dataclass(frozen=True)
class ClusterRow:
    """A workload's row (see the module's docstring)."""

    workload: str
    limit_cpus: float | None
    request_cpus: float | None
    pods: int                        # pods whose window was replayed
    window_s: float                  # their windows summed
    usage_p95_cpus: float | None
    vpa_cpus: float | None
    periods: int | None              # None: no limit (no throttling claim)
    periods_throttled: int | None
    throttled_ms: float | None
    delay_p99_now_ms: float | None
    recommended_cpus: float | None
    predicted_delay_p99_ms: float | None
    predicted_periods_throttled: int | None
    notes: tuple[str, ...] = ()
    missing: tuple[str, ...] = field(default=())   # pods with no window, one line each
    wait_p99_ms: float | None = None     # a throttled period's wait, p99 (the agent's histogram)
    sources: tuple[tuple[str, str], ...] = ()     # figure -> its source, beyond the defaults
    # the limits that meet the target under what the windows hid (high None: none up to the
    # search's ceiling), whether within ±25 % of the recommendation, what widened it
    recommended_range: tuple[float, float | None] | None = None
    sure: bool | None = None
    widened_by: tuple[str, ...] = ()
    # why its pods have no quota on them or above (:func:`no_quota`; None: they have one):
    # then no figure of throttling, and the row is listed apart
    no_quota: str | None = None
    vpa_mode: str | None = None    # the updateMode of a VPA that targets it (None: none)
    # the HPA that scales it: its target, min and max, the highest target that keeps the goal
    # at the limit (``client.advise.hpa.cluster_hpa``; None: no HPA)
    hpa: dict[str, Any] | None = None

    @property
    def cost(self) -> tuple[float, float]:
        return (self.throttled_ms or 0.0, self.delay_p99_now_ms or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "limit_cpus": self.limit_cpus,
            "request_cpus": self.request_cpus, "pods": self.pods, "window_s": self.window_s,
            "usage_p95_cpus": self.usage_p95_cpus, "vpa_cpus": self.vpa_cpus,
            "periods": self.periods, "periods_throttled": self.periods_throttled,
            "throttled_ms": self.throttled_ms, "added_delay_p99_now_ms": self.delay_p99_now_ms,
            "recommended_cpus": self.recommended_cpus,
            "predicted_added_delay_p99_ms": self.predicted_delay_p99_ms,
            "predicted_periods_throttled": self.predicted_periods_throttled,
            "recommended_range_cpus": None if self.recommended_range is None else {
                "low": self.recommended_range[0], "high": self.recommended_range[1]},
            "recommended_sure": self.sure, "recommended_widened_by": list(self.widened_by),
            "throttled_period_wait_p99_ms": self.wait_p99_ms, "no_quota": self.no_quota,
            "vpa_mode": self.vpa_mode, "hpa": self.hpa,
            "notes": list(self.notes), "missing": list(self.missing),
            "sources": {"periods": "the pods' cpu.stat, as the node agent recorded it",
                        "added_delay": "for a request arriving at a random instant at a "
                        "random replica", "usage_p95_cpus": KRR.words, "vpa_cpus": VPA.words,
                        "recommended_cpus": "the smallest limit whose replay of the windows "
                        "meets the target (cpuquota.account)", **dict(self.sources)}}


def sort_rows(rows: Sequence[ClusterRow]) -> list[ClusterRow]:
    """By what throttling costs now, the most first (throttled time, then the added delay
    p99); workloads with no quota last; then by name."""
    return sorted(rows, key=lambda r: (r.no_quota is not None, -r.cost[0], -r.cost[1],
                                       r.workload))


NO_WINDOW = "no window to replay"       # a row's note: none of its pods' windows came
NO_RECOMMENDATION = "no recommendation: "  # ... its replay gave none, and why


def none_advised(rows: Sequence[ClusterRow]) -> bool:
    """Whether no workload could be advised though each was replayed (``cluster`` exits 3,
    as ``advise`` does): rows with a quota, none of them with a recommended limit, each
    saying why (no window to replay, or its replay's reason). Rows without a quota carry
    no claim; rows that were not replayed (Prometheus's longer windows) are not a failure."""
    quota = [r for r in rows if r.no_quota is None]
    return bool(quota) and all(
        r.recommended_cpus is None
        and any(n == NO_WINDOW or n.startswith(NO_RECOMMENDATION) for n in r.notes)
        for r in quota)
