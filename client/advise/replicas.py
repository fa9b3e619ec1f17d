"""``advise --passive --replicas 1,2,3,4``: for each replica count N, the smallest per-replica
limit L whose replay meets the goal, with the recorded load spread over N replicas as a
Service spreads it (``client.analysis.spread``), and the least total N × L.

Each N is the passive advice's one search (:func:`client.advise.passive.search`), each limit
judged by the replay of every replica's part, pooled; its range is the passive range rules'
(:func:`client.advise.passive.bounds`, ``client.advise.cluster.advise_pods``) on the same
spread. No predicted run is saved: a limit's replay is N replays.

The window is a timeline (:func:`replicas_timeline`, with its requests or not) or a
workload's recorded pods (:func:`replicas_workload`): without requests, every pod's window
with its demand times M/N (M pods recorded, their load now on N), pooled as ``cluster``
pools them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from client.advise import AdviseError
from client.advise.cluster import advise_pods, pod_windows
from client.advise.passive import Window, bounds, search, unseen
from client.advise.replay import MS, ReplayInputs, load_replay, replay_answer
from client.analysis.advise import floor_millicores
from client.analysis.cluster import search_span
from client.analysis.goal import LatencyGoal
from client.analysis.passive import PassiveAdvice, judge
from client.analysis.passive_range import range_of
from client.analysis.replay import Demand, LimitRow, Replayer, load_of, replay_load
from client.analysis.spread import (RANDOM, SEED, Sizing, least, pooled_rows, split_demand,
                                    spread_load, spread_says)
from client.run.k8s_workloads import Fetched, Workload

__all__ = ["MOST_REPLICAS", "Sized", "Spread", "check_counts", "replicas_timeline",
           "replicas_workload", "save_sized", "service_spread", "spread_of", "spread_replays"]

MOST_REPLICAS = 64   # the most replicas a list may ask for


@dataclass(frozen=True)
class Spread:
    """How the load is spread over the replicas (``client.analysis.spread``)."""

    counts: tuple[int, ...]
    how: str = RANDOM
    seed: int = SEED
    given: bool = False   # --spread said it (over what a workload's Services say)


@dataclass(frozen=True)
class Sized:
    """The answer over the replica counts: one :class:`Sizing` per N (in the order asked),
    the least total among those that met, and the window's figures."""

    target: LatencyGoal
    spread: Spread
    sizings: tuple[Sizing, ...]
    says: str                                # how the load was spread, in one line
    by_requests: bool
    replay: dict[str, Any]                   # the window, record, requests (replay_answer)
    ceiling: int                             # the per-replica ceiling searched, millicores
    workload: dict[str, Any] | None = None   # over a workload's pods: its name, pods

    @property
    def least(self) -> Sizing | None:
        return least(self.sizings)

    @property
    def met(self) -> bool:
        return self.least is not None

    def to_dict(self) -> dict[str, Any]:
        best = self.least
        out = {key: value for key, value in self.replay.items() if key != "limits"}
        out.update({
            "passive": True, "target": self.target.to_dict(),
            "judged_by": ("the requests' predicted latency (p99, p90), every replica's pooled"
                          if self.by_requests else "the added delay of a request arriving at "
                          "a random instant at a random replica (p99, p90): no requests "
                          "given"),
            "spread": {"how": self.spread.how if self.by_requests else "even",
                       "given": self.spread.given,
                       "seed": self.spread.seed if self.by_requests
                       and self.spread.how == RANDOM else None, "says": self.says},
            "ceiling_cpus_per_replica": self.ceiling / 1000,
            "replicas": [s.to_dict(s is best) for s in self.sizings],
            "least": None if best is None else {
                "replicas": best.replicas, "cpus": (best.millicores or 0) / 1000,
                "total_cpus": (best.total or 0) / 1000},
        })
        if self.workload is not None:
            out["workload"] = self.workload
        return out


def _cpus(millicores: int | None) -> float | None:
    return None if millicores is None else millicores / 1000


def spread_replays(replayed: ReplayInputs, replicas: int, spread: Spread, burst_ns: int
                   ) -> Callable[[Demand, bool | None], Callable[[int | None], LimitRow]]:
    """Each limit's replay of a demand over ``replicas`` (the requests spread, or the demand
    split), pooled; once per limit."""
    period_ns = replayed.period_ns

    def replays(demand: Demand, closed: bool | None) -> Callable[[int | None], LimitRow]:
        cache: dict[int | None, LimitRow] = {}
        if replayed.requests is None:
            part = Replayer(split_demand(demand, 1 / replicas), burst_ns, period_ns)

            def at_split(millicores: int | None) -> LimitRow:
                if millicores not in cache:
                    cache[millicores] = LimitRow(part(_cpus(millicores)), None)
                return cache[millicores]
            return at_split
        loads = spread_load(load_of(demand, replayed.requests, closed), replicas, spread.how,
                            spread.seed)

        def at_spread(millicores: int | None) -> LimitRow:
            if millicores not in cache:
                cache[millicores] = pooled_rows([LimitRow(*replay_load(
                    demand, load, _cpus(millicores), burst_ns, period_ns)) for load in loads])
            return cache[millicores]
        return at_spread
    return replays


def _sizing(replayed: ReplayInputs, replicas: int, spread: Spread, target: LatencyGoal,
            burst_ns: int, recorded_millicores: int | None, ceiling: int) -> Sizing:
    replays = spread_replays(replayed, replicas, spread, burst_ns)
    replay_at = replays(replayed.demand, replayed.closed)
    floor = floor_millicores(replayed.period_ns / MS)
    start = (ceiling // 2 if recorded_millicores is None
             else max(floor, min(ceiling, round(recorded_millicores / replicas))))
    if (why := unseen(replayed)) is not None:
        free = judge(None, replay_at(None), target)
        advice = PassiveAdvice(target, free, (), None, None, floor, ceiling, why)
    else:
        advice = search(replay_at, target, start=start, floor=floor, ceiling=ceiling)
    if advice.at is not None and advice.at.millicores is not None:
        advice = replace(advice, range=range_of(advice.at.millicores, bounds(
            replayed, target, burst_ns, start=start, floor=floor, ceiling=ceiling,
            replays=replays, near=advice.at.millicores), ceiling))
    served: tuple[int, ...] = ()
    if replayed.requests is not None:
        loads = spread_load(load_of(replayed.demand, replayed.requests, replayed.closed),
                            replicas, spread.how, spread.seed)
        served = tuple(len(load.jobs) for load in loads)
    return Sizing(replicas, advice, served)


def replicas_timeline(timeline: Path, target: LatencyGoal, window: Window,
                      spread: Spread) -> Sized:
    """Each replica count's answer from the recorded window at ``timeline`` (and its
    requests)."""
    replayed = load_replay(timeline, window.requests_from, window.period_ms)
    return _over_replayed(replayed, target, window, spread, (os.cpu_count() or 1) * 1000)


def _over_replayed(replayed: ReplayInputs, target: LatencyGoal, window: Window, spread: Spread,
                   ceiling: int, workload: dict[str, Any] | None = None) -> Sized:
    burst_ns = round((window.burst_ms or 0.0) * MS)
    recorded = [c for c in replayed.recording.limits if c is not None]
    start = round(recorded[0] * 1000) if recorded else None
    sizings = tuple(_sizing(replayed, n, spread, target, burst_ns, start, ceiling)
                    for n in spread.counts)
    by_requests = replayed.requests is not None
    return Sized(target, spread, sizings, spread_says(spread.how, spread.seed, by_requests,
                                                      _closed(replayed)),
                 by_requests, replay_answer(replayed.recording, replayed.demand, [],
                                            replayed.placed, window.requests_from),
                 ceiling, workload)


def _closed(replayed: ReplayInputs) -> bool | None:
    if replayed.requests is None:
        return None
    return load_of(replayed.demand, replayed.requests, replayed.closed).closed


def replicas_workload(workload: Workload, since_s: float, until: float | None,
                      target: LatencyGoal, window: Window, spread: Spread,
                      fetched: Fetched | None = None) -> Sized:
    """Each replica count's answer from the workload's recorded pods' windows of the
    ``since_s`` seconds to ``until`` (None: now; ``fetched``: those windows already fetched):
    with ``window.requests_from``, its one pod's requests spread; without, every pod's
    demand times M/N, pooled."""
    ref = workload.ref
    got = pod_windows(workload, since_s, window.data_dir, fetched, until=until)
    if not got.windows:
        raise AdviseError("; ".join(got.missing))
    pods = len(got.windows)
    part: dict[str, Any] = {
        "name": str(ref), "limit_cpus": workload.limit_cpus,
        "request_cpus": workload.request_cpus, "since_s": since_s, "until": until,
        "recorded_pods": pods,
        "pods": [{"pod": w.pod, "timeline": str(r.path), "seconds": w.demand.window_ns / 1e9}
                 for w, r in zip(got.windows, got.recordings)],
        "missing": got.missing}
    _start, _floor, ceiling = search_span(workload.limit_cpus, got.windows)
    if window.requests_from is not None:
        if pods > 1:
            raise AdviseError(f"--requests-from with {ref}: it has {pods} recorded pods and "
                              "one file of requests cannot say which pod served each; without "
                              "--requests-from the pods' demand is split")
        replayed = load_replay(got.recordings[0].path, window.requests_from, window.period_ms)
        return _over_replayed(replayed, target, window, spread, ceiling, part)
    sizings = []
    for n in spread.counts:
        scaled = [replace(p, demand=split_demand(p.demand, pods / n)) for p in got.windows]
        sizings.append(Sizing(n, advise_pods(scaled, workload.limit_cpus, target)))
    says = (f"split evenly: the {pods} recorded pod{'s' if pods > 1 else ''}' demand times "
            f"{pods}/N in every interval on each replica (no requests given: nothing to place; "
            "the group's own work is split with it)")
    base = replay_answer(got.recordings[0], got.windows[0].demand, [], None, None)
    return Sized(target, spread, tuple(sizings), says, False, base, ceiling, part)


def service_spread(workload: Workload, spread: Spread, services: list[Any] | None = None
                   ) -> str:
    """What the workload's Services (``services``: its namespace's, None: read from the API)
    say of the spread, as a clause for the answer's ``says``; ``AdviseError`` (one line) where
    they cannot tell it and ``--spread`` was not given."""
    from client.run.k8s_services import list_services, spreading
    from client.run.k8s_workloads import WorkloadError

    try:
        listed = list_services(workload.ref.namespace) if services is None else services
    except WorkloadError as exc:
        raise AdviseError(str(exc)) from None
    told = spreading(workload.ref, dict(workload.labels), listed)
    if told.unknown is None:
        return f"through Service {told.service} (a cluster IP, no session affinity)"
    if not spread.given:
        raise AdviseError(f"--replicas: {told.unknown}, so how the requests are spread over N "
                          "replicas cannot be told: give --spread random (kube-proxy's "
                          "iptables mode) or --spread round-robin (IPVS rr) to assume one")
    return f"--spread {spread.how} assumed over what the Service does: {told.unknown}"


def check_counts(counts: Sequence[int]) -> str | None:
    """Why the replica counts cannot be searched, in one line (None: they can)."""
    if not counts:
        return "--replicas: give at least one replica count, like 1,2,3,4"
    if (most := max(counts)) > MOST_REPLICAS:
        return f"--replicas: {most} is more than {MOST_REPLICAS} replicas"
    return None


def spread_of(counts: Sequence[int], how: str | None, seed: int | None) -> Spread:
    """``--replicas``, ``--spread`` and ``--seed`` checked (one line each): the spread."""
    if problem := check_counts(counts):
        raise AdviseError(problem)
    if seed is not None and (how or RANDOM) != RANDOM:
        raise AdviseError(f"--seed goes with --spread random (--spread {how} has no picks)")
    return Spread(tuple(counts), how or RANDOM, SEED if seed is None else seed, how is not None)


class _Answer(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def save_sized(sized: _Answer, pictures_dir: Path, prefix: str) -> dict[str, Any]:
    """The answer's dict (passive, :class:`Sized`, or live,
    ``client.advise.replicas_live.LiveSized``) with its picture
    (``<pictures_dir>/<prefix>-replicas.png``) saved and named (``picture``)."""
    from client.data.files import FileWriteError
    from client.data.naming import sweep_stem
    from client.render.replicas import save_sizing_figure

    answer = sized.to_dict()
    try:
        picture = save_sizing_figure(answer, pictures_dir / f"{sweep_stem(prefix, 'replicas')}.png")
    except FileWriteError as exc:
        raise AdviseError(str(exc)) from None
    answer["picture"] = str(picture)
    return answer
