"""``cluster``'s row of a workload and ``advise --passive --k8s``'s answer: each pod's window
replayed at each limit the one search (:mod:`client.advise.passive`) asks for, pooled as if a
request arrived at a random instant at a random replica (``client.analysis.cluster``)."""

from __future__ import annotations

from collections.abc import Sequence

from client.advise.passive import search
from client.analysis.advise_target import LatencyTarget
from client.analysis.cluster import (MS, ClusterRow, PodWindow, WorkloadLimits, pooled,
                                     replica_note, search_span, usage_p95, vpa_rule)
from client.analysis.passive import PassiveAdvice
from client.analysis.replay import LimitRow, added_delay, replay

__all__ = ["advise_pods", "row_of"]


def advise_pods(pods: Sequence[PodWindow], limit_cpus: float | None,
                target: LatencyTarget) -> PassiveAdvice:
    """The smallest per-pod limit whose replay of every pod's window, pooled, meets
    ``target`` by the added delay."""
    cache: dict[int | None, LimitRow] = {}

    def replay_at(millicores: int | None) -> LimitRow:
        if millicores not in cache:
            cpus = None if millicores is None else millicores / 1000
            cache[millicores] = LimitRow(pooled([replay(p.demand, cpus) for p in pods]), None)
        return cache[millicores]

    start, floor, ceiling = search_span(limit_cpus, pods)
    return search(replay_at, target, start=start, floor=floor, ceiling=ceiling)


def row_of(workload: WorkloadLimits, pods: Sequence[PodWindow], target: LatencyTarget,
           missing: Sequence[str] = ()) -> ClusterRow:
    """The workload's row from its pods' windows (at least one)."""
    notes: list[str] = []
    limited = workload.limit_cpus is not None
    now = pooled([p.recorded for p in pods])
    if not limited:
        notes.append("no limit: no throttling to count (the recommendation is the limit "
                     "the windows would have met)")
    if any(p.demand.throttled_wall_ns > 0 for p in pods):
        share = sum(p.demand.throttled_wall_ns for p in pods) / sum(p.demand.window_ns
                                                                    for p in pods)
        notes.append(f"estimated: {100 * share:.0f} % of the windows was throttled "
                     "(the demand the quota hid is taken from the throttled time)")
    if (moved := replica_note(pods)) is not None:
        notes.append(moved)
    advice = advise_pods(pods, workload.limit_cpus, target)
    at = advice.at
    if at is None:
        notes.append(f"no recommendation: {advice.reason}")
    return ClusterRow(
        workload.workload, workload.limit_cpus, workload.request_cpus, len(pods),
        sum(p.demand.window_ns for p in pods) / 1e9, usage_p95(pods), vpa_rule(pods),
        now.stats.nr_periods if limited else None,
        now.stats.nr_throttled if limited else None,
        now.stats.throttled_ns / MS if limited else None,
        added_delay(now, 99) / MS if limited else None,
        None if at is None or at.millicores is None else at.millicores / 1000,
        None if at is None else at.row.delay_ms(99),
        None if at is None else at.row.replayed.stats.nr_throttled,
        tuple(notes), tuple(missing))
