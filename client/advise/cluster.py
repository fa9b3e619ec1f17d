"""``cluster``'s row of a workload and ``advise --passive --k8s``'s answer: each recorded pod's
window (:func:`pod_windows`, fetched from its node's agent) replayed at each limit the one
search (:mod:`client.advise.passive`) asks for, pooled as if a request arrived at a random
instant at a random replica (``client.analysis.cluster``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from pathlib import Path

from client.advise import AdviseError
from client.advise.answer import Answer
from client.advise.passive import (WHAT_TO_GIVE, Window, bounds, hidden_throughout,
                                   saving_replays, search, unanswered, unseen)
from client.advise.replay import load_replay, replay_answer
from client.analysis.goal import LatencyGoal
from client.analysis.cluster import (MS, NO_RECOMMENDATION, ClusterRow, PodWindow,
                                     WorkloadLimits, no_quota, pod_window, pooled_replays,
                                     replica_note, search_span, usage_p95, vpa_rule)
from client.analysis.passive import PassiveAdvice
from client.analysis.passive_range import Bound, range_of
from client.analysis.replay import (LimitRow, Replayed, Replayer, ReplayError, added_delay,
                                    bunched)
from client.run.k8s_workloads import Fetched, Workload, fetch_windows
from client.run.replay_input import Recording, read_recording
from cpuquota.account import CpuStat
from cpuquota.limit import NO_QUOTA

__all__ = ["DEFAULT_SINCE_S", "PodWindows", "advise_pods", "advise_workload", "pod_windows",
           "recorded_workload", "row_of"]

DEFAULT_SINCE_S = 600.0   # the window, when none is asked for: the last 10 minutes


def _pooled(pods: Sequence[PodWindow], verdict_of: LatencyGoal | None = None
            ) -> Callable[[int | None], LimitRow]:
    """Each limit replayed on every pod's window, pooled (once per limit). With
    ``verdict_of``, for a search whose answer alone is kept: a limit's replays end once its
    added delay's p99 must miss that target's (their time beyond it passes the 1 % of the
    pooled windows the p99 allows, with a margin), the rest of them left out: its row then
    misses it as the whole replay's would, its figures only what ran."""
    cache: dict[int | None, LimitRow] = {}
    each = [Replayer(p.demand) for p in pods]
    total = sum(p.demand.window_ns for p in pods)
    wait = None if verdict_of is None else verdict_of.p99_ms * MS * (1 + 1e-6) + 1
    budget = (1.0 - 99 / 100.0) * total * (1 + 1e-9) + 1

    def replay_at(millicores: int | None) -> LimitRow:
        if millicores not in cache:
            cpus = None if millicores is None else millicores / 1000
            if wait is None or cpus is None:
                cache[millicores] = LimitRow(pooled_replays([at(cpus) for at in each]), None)
                return cache[millicores]
            replays, spent = [], 0.0
            for at, pod in zip(each, pods):
                if spent > budget:   # it misses already: the other pods left out
                    replays.append(Replayed(cpus, (), CpuStat(),
                                            (pod.demand.start_ns, pod.demand.end_ns)))
                    continue
                replays.append(at(cpus, (wait, budget - spent)))
                spent += sum(max(0.0, e - s - wait) for s, e in replays[-1].stretches)
            cache[millicores] = LimitRow(pooled_replays(replays), None)
        return cache[millicores]
    return replay_at


def advise_pods(pods: Sequence[PodWindow], limit_cpus: float | None,
                target: LatencyGoal, *, whole: bool = True) -> PassiveAdvice:
    """The smallest per-pod limit whose replay of every pod's window, pooled, meets
    ``target`` by the added delay; and its range where a window was throttled: the same
    search with the demand run on 1 CPU and on as many as the search's ceiling (the CPUs a
    pod could use at once are not in its record). ``whole=False``: only the answer, its
    range and its reason are read, not the other limits' rows, so those that miss are
    replayed until they must (:func:`_pooled`), and the limit 25 % below the answer is not
    replayed (``less``: None); the answer's is whole, and where none met, the search runs
    again whole for its reason's figures."""
    start, floor, ceiling = search_span(limit_cpus, pods)
    advice = search(_pooled(pods, None if whole else target), target, start=start,
                    floor=floor, ceiling=ceiling, with_less=whole)
    if not whole and advice.at is None:
        advice = search(_pooled(pods), target, start=start, floor=floor, ceiling=ceiling)
    if advice.at is None or advice.at.millicores is None:
        return advice
    found, near = [], advice.at.millicores
    if any(p.demand.throttled_wall_ns > 0 for p in pods):
        for cores in sorted({1, max(1, ceiling // 1000)} - {max(p.demand.cores for p in pods)}):
            other = [replace(p, demand=replace(p.demand, cores=cores)) for p in pods]
            found.append(Bound("the hidden demand", f"on {cores} CPU{'s' if cores > 1 else ''}",
                               _answer(other, target, start, floor, ceiling, near)))
    if coarse := [p.demand for p in pods if p.demand.coarse]:
        other = [replace(p, demand=bunched(p.demand)) if p.demand.coarse else p for p in pods]
        rows = max(d.resolution_ns for d in coarse) / MS
        found.append(Bound(f"the rows ({rows:.0f} ms apart, periods of "
                           f"{coarse[0].period_ns / MS:g} ms)",
                           "each row's CPU wanted at its start",
                           _answer(other, target, start, floor, ceiling, near)))
    return replace(advice, range=range_of(advice.at.millicores, found, ceiling))


def _answer(pods: Sequence[PodWindow], target: LatencyGoal, start: int, floor: int,
            ceiling: int, near: int | None = None) -> int | None:
    """The search's answer on these windows (its rows not kept): the floor where no limit
    from it up throttles any of them (every limit meets, unlimited too, and the search
    steps down to the floor), else searched from ``near`` on (:func:`search`), each limit
    replayed until it must miss."""
    if all(Replayer(p.demand).never_throttled(floor / 1000) for p in pods):
        return floor
    at = search(_pooled(pods, target), target, start=start, floor=floor, ceiling=ceiling,
                with_less=False, near=near).at
    return None if at is None else at.millicores


def unseen_pods(name: str, pods: Sequence[PodWindow]) -> str | None:
    """Why the pods' windows cannot show the demand the quota hid, in one line (None: one
    can): every one sat throttled in (nearly) every period it ran, and no requests say
    their own CPU (the added delay is judged)."""
    if not pods or not all(hidden_throughout(p.demand.recorded) for p in pods):
        return None
    counts = ", ".join(f"{p.pod}: {p.demand.recorded.nr_throttled} of "
                       f"{p.demand.recorded.nr_periods}" for p in pods)
    return (f"{name}: {'each of its pods was' if len(pods) > 1 else 'its pod was'} throttled "
            f"in nearly every period of its window ({counts} periods), so no unthrottled "
            f"stretch shows the CPU the quota hid: {WHAT_TO_GIVE} (--requests-from, one pod)")


def row_of(workload: WorkloadLimits, pods: Sequence[PodWindow], target: LatencyGoal,
           missing: Sequence[str] = ()) -> ClusterRow:
    """The workload's row from its pods' windows (at least one)."""
    notes: list[str] = []
    # a quota in force in some pod's window: what the kernel recorded, not what the template
    # asks (exclusive CPUs under the static CPU manager: a limit, and no quota)
    limited = any(p.limit_cpus is not None for p in pods)
    exclusive = not limited and workload.limit_cpus is not None
    now = pooled_replays([p.recorded for p in pods])
    if not limited:
        notes.append(no_quota(workload.limit_cpus) + (
            "" if exclusive else "; the recommendation is the limit the windows would have met"))
    if any(p.demand.throttled_wall_ns > 0 for p in pods):
        share = sum(p.demand.throttled_wall_ns for p in pods) / sum(p.demand.window_ns
                                                                    for p in pods)
        notes.append(f"estimated: {100 * share:.0f} % of the windows was throttled "
                     "(the demand the quota hid is taken from the throttled time)")
    if (moved := replica_note(pods)) is not None:
        notes.append(moved)
    unseen = unseen_pods(str(workload.workload), pods) if limited else None
    reason: str | None = unseen
    if unseen is not None:
        # as `advise --passive --k8s` answers it (exit 3): no stretch shows the hidden demand,
        # so no limit is replayed for it
        at, span = None, None
    else:
        advice = advise_pods(pods, workload.limit_cpus, target, whole=False)
        if exclusive:   # a limit is no quota there: nothing to recommend
            advice = replace(advice, at=None, range=None)
        at, span, reason = advice.at, advice.range, advice.reason
    if at is None and not exclusive:
        notes.append(f"{NO_RECOMMENDATION}{reason}")
    elif span is not None and not span.sure:
        notes.append(f"the recommended limit's {span.words()}")
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
        tuple(notes), tuple(missing),
        recommended_range=None if span is None else (
            span.low / 1000, None if span.high is None else span.high / 1000),
        sure=None if span is None else span.sure,
        widened_by=() if span is None else span.widened_by,
        no_quota=None if limited else no_quota(workload.limit_cpus))


@dataclass(frozen=True)
class PodWindows:
    """A workload's recorded windows: each replayable pod's, and one line per pod without."""

    windows: list[PodWindow]
    recordings: list[Recording]
    missing: list[str]


def pod_windows(workload: Workload, since_s: float, dest: Path,
                fetched: Fetched | None = None, *, until: float | None = None) -> PodWindows:
    """Fetch (unless ``fetched`` already is) and read each recorded pod's window of the
    ``since_s`` seconds to ``until`` (None: now); a window the replay cannot use, e.g. too
    short, is a line of ``missing``."""
    paths, missing = (fetched if fetched is not None
                      else fetch_windows(workload, since_s, dest, until=until))
    missing = list(missing)
    windows, recordings = [], []
    for path in paths:
        recording = read_recording(path)
        pod = path.name.removesuffix(".cgroup.csv").split("_", 1)[-1]
        try:
            windows.append(pod_window(pod, recording.samples, recording.period_ns,
                                      recording.limits, recording.zero_epoch_ns))
            recordings.append(recording)
        except ReplayError as exc:
            missing.append(f"{workload.ref.namespace}/{pod}: {exc} ({path})")
    return PodWindows(windows, recordings, missing)


def recorded_workload(text: str) -> Workload:
    """The workload ``text`` names, with a CPU limit and a recorded pod; else one line."""
    from client.run.k8s_workloads import WorkloadError, parse_workload_ref, read_workload

    try:
        workload = read_workload(parse_workload_ref(text))
    except WorkloadError as exc:
        raise AdviseError(str(exc)) from None
    ref = workload.ref
    if workload.limit_cpus is None:
        raise AdviseError(f"{ref} has no CPU limit (a container of its pod template has no "
                          "limits.cpu, and the pod none in spec.resources): "
                          f"{NO_QUOTA}; give it a limit, or see its usage with "
                          "http-timing cluster")
    if not workload.pods:
        raise AdviseError(f"{ref} has no pod now (scaled to 0?): nothing recorded to replay")
    if not any(p.recorded for p in workload.pods):
        raise AdviseError(f"no pod of {ref} is recorded: label them throttle-lab/record=true "
                          "(the pod template's labels) for the node agent (k8s/recorder)")
    return workload


def advise_workload(workload: Workload, since_s: float, until: float | None,
                    target: LatencyGoal, window: Window) -> Answer:
    """Each recorded pod's window of the ``since_s`` to ``until`` (None: now), replayed at
    each limit, pooled; with ``window.requests_from``, its one pod's requests."""
    ref = workload.ref
    assert workload.limit_cpus is not None
    got = pod_windows(workload, since_s, window.data_dir, until=until)
    if not got.windows:
        raise AdviseError("; ".join(got.missing))
    if all(w.limit_cpus is None for w in got.windows):
        raise AdviseError(f"{ref}: its pods' groups had {NO_QUOTA} in the window, whatever "
                          f"limits.cpu ({workload.limit_cpus:g}) says (exclusive CPUs under the "
                          "static CPU manager get no quota): no limit to advise")
    if window.requests_from is not None and len(got.windows) > 1:
        raise AdviseError(f"--requests-from with {ref}: it has {len(got.windows)} recorded "
                          "pods and one file of requests cannot say which pod served each; "
                          "without --requests-from the added delay is judged")
    start, floor, ceiling = search_span(workload.limit_cpus, got.windows)
    runs: dict[int | None, Path] = {}
    if window.requests_from is not None:
        replayed = load_replay(got.recordings[0].path, window.requests_from, window.period_ms,
                               window.start_epoch_ns, window.align)
        replay_at = saving_replays(replayed, window, runs)
        if (why := unseen(replayed)) is not None:
            advice = unanswered(replay_at, target, start, floor, ceiling, why)
        else:
            advice = search(replay_at, target, start=start, floor=floor, ceiling=ceiling)
        if advice.at is not None and advice.at.millicores is not None:
            burst_ns = round((window.burst_ms or 0.0) * MS)
            advice = replace(advice, range=range_of(advice.at.millicores, bounds(
                replayed, target, burst_ns, start=start, floor=floor, ceiling=ceiling,
                near=advice.at.millicores), ceiling))
        placed, clock = replayed.placed, replayed.clock
    elif (why := unseen_pods(str(ref), got.windows)) is not None:
        advice = unanswered(_pooled(got.windows), target, start, floor, ceiling, why)
        placed, clock = None, None
    else:
        advice = advise_pods(got.windows, workload.limit_cpus, target)
        placed, clock = None, None
    base = replay_answer(got.recordings[0], got.windows[0].demand, [], placed,
                         window.requests_from, clock)
    part: dict[str, Any] = {
        "name": str(ref), "limit_cpus": workload.limit_cpus,
        "limit_level": workload.limit_level,
        "request_cpus": workload.request_cpus, "since_s": since_s, "until": until,
        "pods": [{"pod": w.pod, "timeline": str(r.path), "seconds": w.demand.window_ns / 1e9,
                  "start_epoch_s": None if w.start_epoch_ns is None else w.start_epoch_ns / 1e9,
                  "periods": w.demand.recorded.nr_periods,
                  "periods_throttled": w.demand.recorded.nr_throttled,
                  "throttled_ms": w.demand.recorded.throttled_ns / MS,
                  "source": "the pod's cpu.stat, as the node agent recorded it"}
                 for w, r in zip(got.windows, got.recordings)],
        "missing": got.missing,
        "judged": "each pod's window replayed at the limit, pooled (a random instant at a "
                  "random replica)" if len(got.windows) > 1 else "the pod's window replayed"}
    return Answer(advice, replay=base, period_ms=got.windows[0].demand.period_ns / MS,
                  by_requests=window.requests_from is not None,
                  timeline=", ".join(str(r.path) for r in got.recordings), workload=part,
                  runs=runs)
