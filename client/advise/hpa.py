"""``advise --passive --hpa-target PCT``: the HPA's rule (``client.analysis.hpa``) run over a
recorded window at a limit and request, the replicas it would have run per minute and the
p99 that gives; and the highest target that keeps the goal at that limit.

The window's demand is the whole load: a timeline is one group, a workload's one recorded pod
its only one; a workload's several recorded pods are pooled (``client.advise.pooled``: the CPU
each used, summed on the wall clock), as an HPA that scaled it ran them. Each instant the load is spread over the
replicas then ready, as a Service spreads it over its ready endpoints:

- with the requests, each one goes to a ready replica picked at random (the seed's) at the
  time it was sent, as recorded (an open loop: a new replica gets new connections, so a
  request is taken as one); each replica runs the group's own work (the load's background)
  while it exists, and is replayed at the limit alone; the predicted latencies pooled;
- without them, every ready replica has the same share of the demand (1/ready) in every
  interval: one such replica's replay gives the added delay.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client.advise import AdviseError
from client.advise.cluster import pod_windows, recorded_workload
from client.advise.passive import Window
from client.advise.pooled import PooledLoad, pooled_load
from client.advise.replay import ReplayInputs, load_replay, replay_answer
from client.analysis.goal import LatencyGoal
from client.analysis.hpa import HpaError, HpaRule, HpaRun, Replica, rule_of, run_hpa
from client.analysis.passive import JudgedReplay, judge
from client.analysis.replay import Demand, LimitRow, Load, load_of, replay, replay_load
from client.analysis.spread import SEED, pooled_rows
from client.run.k8s_workloads import WorkloadRef

__all__ = ["MIN_WINDOW_S", "HpaAnswer", "HpaAsked", "HpaGiven", "cluster_hpa", "hpa_answer",
           "hpa_latency", "hpa_over", "rates_of"]

MIN_WINDOW_S = 60.0   # under a minute, four syncs say nothing of the HPA


@dataclass(frozen=True)
class HpaAsked:
    """The HPA replayed, and at which limit and request (CPUs per replica)."""

    rule: HpaRule
    limit_cpus: float
    request_cpus: float
    ready_after_s: float = 30.0
    start_replicas: int | None = None   # None: min
    seed: int = SEED
    source: str = "--hpa-target"        # where the rule came from


def rates_of(demand: Demand) -> list[tuple[float, float, float]]:
    """The demand's rows as ``(start s, end s, CPUs)`` from the window's start."""
    ends = (*demand.starts_ns[1:], demand.end_ns)
    return [((s - demand.start_ns) / 1e9, (e - demand.start_ns) / 1e9, w / (e - s))
            for s, e, w in zip(demand.starts_ns, ends, demand.wanted_ns) if e > s]


def _mid_s(demand: Demand, k: int) -> float:
    ends = (*demand.starts_ns[1:], demand.end_ns)
    return ((demand.starts_ns[k] + ends[k]) / 2 - demand.start_ns) / 1e9


def hpa_latency(replayed: ReplayInputs, run: HpaRun, limit_cpus: float, burst_ns: int = 0,
                seed: int = SEED) -> LimitRow:
    """The window replayed at ``limit_cpus`` with the replicas ``run`` had ready at each
    instant (see the module docstring)."""
    demand, period = replayed.demand, replayed.period_ns
    if replayed.requests is None:
        shares = [1 / max(1, run.ready_at(_mid_s(demand, k)))
                  for k in range(len(demand.starts_ns))]
        part = replace(demand, wanted_ns=tuple(w * s for w, s in zip(demand.wanted_ns, shares)),
                       used_ns=tuple(u * s for u, s in zip(demand.used_ns, shares)))
        return LimitRow(replay(part, limit_cpus, burst_ns, period), None)
    load = load_of(demand, replayed.requests, False)
    picks = random.Random(seed)
    mine: list[list[int]] = [[] for _ in run.replicas]
    for i, job in enumerate(load.jobs):
        at = (job.arrival_ns - demand.start_ns) / 1e9
        ready = [r for r, rep in enumerate(run.replicas) if rep.serves(at)]
        if not ready:   # none ready (cannot be with min >= 1): the first one made
            ready = [0]
        mine[picks.choice(ready)].append(i)
    rows = []
    for r, rep in enumerate(run.replicas):
        alive = [rep.made_s <= _mid_s(demand, k) and (rep.removed_s is None
                                                      or _mid_s(demand, k) < rep.removed_s)
                 for k in range(len(demand.starts_ns))]
        background = tuple(b if a else 0.0 for b, a in zip(load.background_ns, alive))
        jobs = tuple(load.jobs[i] for i in mine[r])
        if not jobs:
            continue
        rows.append(LimitRow(*replay_load(demand, Load(jobs, 0, background), limit_cpus,
                                          burst_ns, period)))
    return pooled_rows(rows)


@dataclass(frozen=True)
class HpaAnswer:
    """What the HPA would have done over the window, the goal there, the highest target that
    keeps it."""

    asked: HpaAsked
    target: LatencyGoal
    run: HpaRun
    judged: JudgedReplay
    highest: int | None          # the highest target (whole percent) that meets the goal
    highest_says: str
    replay: dict[str, Any]
    by_requests: bool
    pooled: PooledLoad | None = None

    @property
    def met(self) -> bool:
        return self.judged.met

    def to_dict(self) -> dict[str, Any]:
        a, row = self.asked, self.judged.row
        figures = ({"p99_ms": row.latency_ms(99), "p90_ms": row.latency_ms(90)}
                   if row.latencies_ns is not None else
                   {"added_delay_p99_ms": row.delay_ms(99), "added_delay_p90_ms": row.delay_ms(90)})
        out = {key: value for key, value in self.replay.items() if key != "limits"}
        out.update({
            "passive": True, "target": self.target.to_dict(),
            "hpa": {**a.rule.to_dict(), "source": a.source, "limit_cpus": a.limit_cpus,
                    "request_cpus": a.request_cpus, "ready_after_s": a.ready_after_s,
                    "start_replicas": a.start_replicas or a.rule.min_replicas,
                    "says": "the controller's rule (kubernetes pkg/controller/podautoscaler) "
                            "each 15 s on each ready replica's share of the recorded demand, "
                            "at most the limit"},
            "judged_by": ("the requests' predicted latency (p99, p90), each sent to a ready "
                          "replica at random" if self.by_requests else
                          "the added delay of a request arriving at a random instant (p99, "
                          "p90): no requests given"),
            "per_minute": self.run.per_minute(),
            "syncs": [{"t_s": t, "replicas": n, "ready": ready, "utilization_pct": u}
                      for t, n, ready, u in self.run.syncs],
            "predicted": {**figures, "met": self.judged.met, "missed": list(self.judged.missed),
                          "periods_throttled": row.replayed.stats.nr_throttled,
                          "periods": row.replayed.stats.nr_periods},
            "highest_target_pct": self.highest, "highest_target_says": self.highest_says,
            "pooled": None if self.pooled is None else self.pooled.to_dict(),
        })
        if self.pooled is not None:
            out["timeline"] = (f"{self.pooled.to_dict()['count']} pods' windows pooled "
                               f"({out['timeline']} and the others)")
        return out


def _judge(replayed: ReplayInputs, asked: HpaAsked, rule: HpaRule, target: LatencyGoal,
           burst_ns: int, rows: dict[tuple[Replica, ...], LimitRow]
           ) -> tuple[HpaRun, JudgedReplay]:
    """The HPA's run and its replay judged (``rows``: the replays so far, by the replicas a
    run had: two targets that run the same replicas are replayed once)."""
    window_s = replayed.demand.window_ns / 1e9
    try:
        run = run_hpa(rule, rates_of(replayed.demand), window_s, asked.limit_cpus,
                      asked.request_cpus, start_replicas=asked.start_replicas,
                      ready_after_s=asked.ready_after_s)
    except HpaError as exc:
        raise AdviseError(str(exc)) from None
    if run.replicas not in rows:
        rows[run.replicas] = hpa_latency(replayed, run, asked.limit_cpus, burst_ns, asked.seed)
    return run, judge(round(asked.limit_cpus * 1000), rows[run.replicas], target)


def hpa_answer(replayed: ReplayInputs, target: LatencyGoal, asked: HpaAsked,
               burst_ns: int = 0, requests_from: Path | None = None,
               pooled: PooledLoad | None = None) -> HpaAnswer:
    """The HPA over the window, and the highest target that meets ``target`` (searched by
    halves over whole percents, lower targets running more replicas); ``pooled``: the window
    is several pods' pooled (``replayed`` is its ``replayed``)."""
    window_s = replayed.demand.window_ns / 1e9
    if window_s < MIN_WINDOW_S:
        raise AdviseError(f"{replayed.recording.path}: the window is {window_s:.0f} s; the HPA "
                          f"syncs every {asked.rule.sync_s:g} s, so its replay needs at least "
                          f"{MIN_WINDOW_S:g} s")
    if (problem := asked.rule.problem()) is not None:
        raise AdviseError(problem)
    rows: dict[tuple[Replica, ...], LimitRow] = {}
    run, judged = _judge(replayed, asked, asked.rule, target, burst_ns, rows)
    # a utilization above 100 x limit / request cannot be read: a target past it (and its
    # tolerance) never scales up, so the targets that differ lie below
    top = max(1, math.ceil(100 * asked.limit_cpus / asked.request_cpus * 1.1) + 1)
    cache: dict[int, bool] = {}

    def met(pct: int) -> bool:
        if pct not in cache:
            cache[pct] = _judge(replayed, asked, replace(asked.rule, target_pct=pct), target,
                                burst_ns, rows)[1].met
        return cache[pct]

    if not met(1):
        highest, says = None, ("no target meets the goal at this limit: even at 1 % the "
                               "replicas it runs (at most max) miss it")
    elif met(top):
        highest, says = top, (f"every target meets the goal at this limit, up to {top} %, "
                              f"past which the utilization (at most 100 × limit / request) "
                              "never asks for more replicas")
    else:
        low, high = 1, top   # met, missed
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if met(middle) else (low, middle)
        highest, says = low, (f"{low} % is the highest target that meets the goal at "
                              f"{asked.limit_cpus:g} CPU each ({high} % misses it)")
    base = replay_answer(replayed.recording, replayed.demand, [], replayed.placed,
                         requests_from)
    return HpaAnswer(asked, target, run, judged, highest, says, base,
                     replayed.requests is not None, pooled)


@dataclass(frozen=True)
class HpaGiven:
    """The HPA as the options say it (None: the default, or the cluster HPA's): a target, or
    ``own``, the workload's own HPA."""

    target_pct: int | None = None
    own: bool = False
    min_replicas: int | None = None
    max_replicas: int | None = None
    limit_cpus: float | None = None
    request_cpus: float | None = None
    ready_after_s: float | None = None


def _own_rule(ref: WorkloadRef, given: HpaGiven) -> tuple[HpaRule, str]:
    """The rule of the HPA that scales the workload ``ref``, and where it came from."""
    from client.run.k8s_hpa import read_hpa
    from client.run.k8s_workloads import WorkloadError

    try:
        found = read_hpa(ref)
    except WorkloadError as exc:
        raise AdviseError(str(exc)) from None
    if found is None:
        raise AdviseError(f"no HorizontalPodAutoscaler scales {ref}: say one "
                          "with --hpa-target PCT [--min N --max M]")
    try:
        rule = rule_of(found[1])
    except HpaError as exc:
        raise AdviseError(str(exc)) from None
    return HpaRule(rule.target_pct, given.min_replicas or rule.min_replicas,
                   given.max_replicas or rule.max_replicas, behavior=rule.behavior), \
        f"HPA {found[0]}"


def _check_given(given: HpaGiven, timeline: Path | None, k8s: str | None) -> None:
    if given.own and given.target_pct is not None:
        raise AdviseError("--hpa reads the workload's HPA; --hpa-target says one: give one of "
                          "them")
    if given.own and k8s is None:
        raise AdviseError("--hpa reads the HPA of a workload: it goes with --k8s NS/KIND/NAME")
    if timeline is None and k8s is None:
        raise AdviseError("the HPA replay reads a recorded window: --timeline FILE or --k8s "
                          "NS/KIND/NAME")


def hpa_over(given: HpaGiven, target: LatencyGoal, window: Window, *, timeline: Path | None,
             k8s: str | None, since_s: float, until: float | None) -> HpaAnswer:
    """``advise --passive --hpa-target PCT`` (or ``--hpa``): the HPA's rule over the window of
    ``timeline``, or of the workload ``k8s``'s recorded pods (the ``since_s`` seconds to
    ``until``; several pooled: ``client.advise.pooled``), at the limit and request given or the record's and workload's."""
    _check_given(given, timeline, k8s)
    limit, request = given.limit_cpus, given.request_cpus
    source = "--hpa-target"
    rule = HpaRule(given.target_pct or 1, given.min_replicas or 1, given.max_replicas or 10)
    path = timeline
    pooled = None
    if k8s is not None:
        workload = recorded_workload(k8s)
        if given.own:
            rule, source = _own_rule(workload.ref, given)
        limit = limit or workload.limit_cpus
        request = request or workload.request_cpus
        got = pod_windows(workload, since_s, window.data_dir, until=until)
        if not got.windows:
            raise AdviseError("; ".join(got.missing))
        if len(got.windows) > 1 and window.requests_from is not None:
            raise AdviseError(f"--requests-from with {workload.ref}: its {len(got.windows)} "
                              "recorded pods are pooled and the requests' file is not "
                              "spread over them; the pooled replay judges the added delay")
        if len(got.windows) > 1:
            pooled = pooled_load([r.path for r in got.recordings], window.period_ms)
        path = got.recordings[0].path
    assert path is not None
    replayed = (pooled.replayed if pooled is not None else
                load_replay(path, window.requests_from, window.period_ms))
    if limit is None:
        limit = next((c for c in replayed.recording.limits if c is not None), None)
    if limit is None:
        raise AdviseError(f"{path}: the record shows no limit: give each replica's with "
                          "--hpa-limit CPUS")
    if request is None:
        raise AdviseError("--hpa-request CPUS: the HPA's utilization is of each replica's CPU "
                          "request, and the record does not say it")
    if (problem := rule.problem()) is not None:
        raise AdviseError(problem)
    asked = HpaAsked(rule, limit, request, 30.0 if given.ready_after_s is None else
                     given.ready_after_s, source=source)
    return hpa_answer(replayed, target, asked, round((window.burst_ms or 0.0) * 1e6),
                      window.requests_from, pooled)


def cluster_hpa(hpa: dict[str, Any], limit_cpus: float | None, request_cpus: float | None,
                timelines: Sequence[Path], target: LatencyGoal) -> dict[str, Any]:
    """``cluster``'s words for the HPA that scales a workload: its target, min and max, and,
    where the record allows (a window of a minute or more, several recorded pods' pooled, a
    limit and a request), the highest target that keeps ``target`` at the current limit
    (:func:`hpa_answer`, the added delay judged); else why not."""
    meta, spec = hpa.get("metadata") or {}, hpa.get("spec") or {}
    out: dict[str, Any] = {
        "name": f"{meta.get('namespace')}/{meta.get('name')}",
        "min": int(spec.get("minReplicas") or 1), "max": spec.get("maxReplicas"),
        "target_cpu_utilization_pct": None, "highest_target_pct": None, "predicted_met": None}
    try:
        rule = rule_of(hpa)
    except HpaError as exc:
        return {**out, "says": str(exc)}
    out["target_cpu_utilization_pct"] = rule.target_pct
    why = None
    if not timelines:
        why = "no window to replay"
    elif limit_cpus is None:
        why = "no CPU limit: the replay runs each replica at the limit"
    elif request_cpus is None:
        why = "no CPU request: the HPA's utilization is of the request"
    if why is not None:
        return {**out, "says": f"highest target not replayed: {why}"}
    assert limit_cpus is not None and request_cpus is not None
    try:
        pooled = pooled_load(timelines) if len(timelines) > 1 else None
        answer = hpa_answer(load_replay(timelines[0], None, None) if pooled is None
                            else pooled.replayed, target,
                            HpaAsked(rule, limit_cpus, request_cpus, source=f"HPA {out['name']}"),
                            pooled=pooled)
    except AdviseError as exc:
        return {**out, "says": f"highest target not replayed: {exc}"}
    says = answer.highest_says
    if pooled is not None:
        says += f" ({len(pooled.pods)} recorded pods' used CPU pooled)"
    return {**out, "highest_target_pct": answer.highest, "predicted_met": answer.met,
            "says": says, "pooled": None if pooled is None else pooled.to_dict()}
