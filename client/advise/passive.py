"""``advise --passive``: the smallest limit whose replay of a recorded window meets a latency
target, through the one search (:mod:`client.advise.search`), each limit judged by its replay
(``client.analysis.passive.judge``) instead of a run: no resize, no load.

The window is a timeline (:func:`advise_timeline`; :func:`record_window` records one first)
or each recorded pod's window of a workload (``client.advise.cluster.advise_workload``). With the window's
requests (``requests_from``), each limit is judged through the seam live advise runs its
limits through: the replay as a limit (:mod:`client.advise.replayed_limit`), its predicted
requests saved as a run (``<data-dir>/<name>-replay-<cpus>``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from client.advise import AdviseError
from client.advise.answer import Answer
from client.advise.replay import MS, ReplayInputs, load_replay, replay_answer, replayed_limit
from client.advise.search import Rules, Search
from client.analysis.advise import TOLERANCE, bracket, floor_millicores, shape
from client.analysis.goal import LatencyGoal
from client.analysis.passive import (LESS, JudgedReplay, PassiveAdvice, RowJudge, judge,
                                     judge_tail)
from client.analysis.passive_range import SIDE, Bound, range_of, tail_covered, tail_needs
from client.analysis.replay import (BY_WALL, MEAN, MIN_DONORS, ROWS, Demand, LimitRow, bunched,
                                    Replayer, demand_of, in_flight, load_of, replay_load)
from client.data.files import FileWriteError
from client.data.naming import check_file_name, run_name
from client.run.service_group import ServiceGroup, ServiceGroupError
from client.run.timeline_record import TimelineSpec, record_timeline
from cpuquota.account import CpuStat

__all__ = ["UNSEEN_SHARE", "WHAT_TO_GIVE", "Replays", "Window", "advise_timeline", "bounds",
           "hidden_throughout", "record_cgroup", "record_window", "saving_replays", "search",
           "unanswered", "unseen"]

UNSEEN_SHARE = 0.05   # fewer unthrottled periods than this share: no stretch shows the demand
NEAR_STEPS = 3       # a replay's search: the tolerance steps up from a miss before it bisects
SHIFT = 0.25          # the requests whose CPU is not known: drawn this share of ranks either way


def _verdicts(rows: Sequence[JudgedReplay]) -> dict[int, bool]:
    return {row.millicores: row.met for row in rows if row.millicores is not None}


def search(replay_at: Callable[[int | None], LimitRow], target: LatencyGoal, *, start: int,
           floor: int, ceiling: int, judge: RowJudge = judge,
           with_less: bool = True, near: int | None = None) -> PassiveAdvice:
    """The smallest limit in ``[floor, ceiling]`` millicores whose replay (``replay_at``; None:
    no limit) meets ``target`` by ``judge``, to advise's tolerance; and the limit a step
    below it (``less``), unless ``with_less`` is False (a bound's search: its answer alone).

    The search begins at ``start`` (``near`` where given: a limit the answer is likely near,
    as a bound's is the main answer's), then goes one tolerance down where that met, else up
    a tolerance at a time while the limits miss (at most :data:`NEAR_STEPS`), and bisects
    from there (``client.analysis.advise.next_millicores``). Two replays where the answer
    is within a tolerance of where it began. A replay that misses ends once it must (most
    often soon), one that meets runs to the window's end: the steps up are the cheap ones."""
    free = judge(None, replay_at(None), target)
    if not free.met:
        return PassiveAdvice(target, free, (), None, None, floor, ceiling,
                             f"the target cannot be met by a CPU limit: even without one the "
                             f"replay misses it ({', '.join(free.missed)})")
    at = min(ceiling, max(floor, start if near is None else near))
    driver: Search[JudgedReplay] = Search(   # its steps counted from where it began
        lambda millicores, _role, _again: judge(millicores, replay_at(millicores), target),
        Rules(_verdicts), start=at, floor=floor, ceiling=ceiling)
    met = driver.once(at, "search").met
    for _ in range(1 if met else NEAR_STEPS):
        other = min(ceiling, max(floor, math.ceil(at / (1 + TOLERANCE)) if met
                                 else math.floor(at * (1 + TOLERANCE))))
        if other == at or driver.once(other, "search").met != met:
            break
        at = other
    driver.run()
    tried = {row.millicores: row for row in driver.rows if row.millicores is not None}
    _low, high = bracket(_verdicts(driver.rows))
    if high is None:
        top = tried[max(tried)]
        return PassiveAdvice(target, free, tuple(tried.values()), None, None, floor, ceiling,
                             f"no limit up to {ceiling / 1000:g} CPU met it in the replay "
                             f"({', '.join(top.missed)} at {max(tried) / 1000:g} CPU)")
    lower = max(1, round(high * LESS))
    less = (tried.get(lower) or judge(lower, replay_at(lower), target)) if with_less else None
    return PassiveAdvice(target, free, tuple(tried.values()), tried[high], less, floor, ceiling)


@dataclass(frozen=True)
class Window:
    """How a window is replayed: its requests (None: the added delay is judged), the period
    and burst (None: the record's period, no burst), where the predicted runs go."""

    requests_from: Path | None = None
    period_ms: float | None = None
    burst_ms: float | None = None
    name: str | None = None        # the runs' prefix (None: passive-<date>-<time>)
    data_dir: Path = Path("raw-data")
    start_epoch_ns: int | None = None   # a relative file's (hey, oha) tool start (--start)
    align: bool = True                  # False: keep that stated clock (--no-align)

    def prefix(self) -> str:
        return self.name or "passive-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def record_window(target: ServiceGroup, window: Window, duration_s: float, interval_s: float,
                  command: Sequence[str], say: Callable[[str], None]) -> Path:
    """Record ``target`` for ``duration_s`` as ``http-timing record`` does (nothing changed):
    its timeline's path."""
    name = window.prefix()
    if problem := check_file_name(name):
        raise AdviseError(problem)
    spec = TimelineSpec(target, name, window.data_dir, duration_s, None, interval_s,
                        tuple(command))
    say(f"recording {target.directory} for {duration_s:g} s to {spec.csv_path} (nothing is "
        "changed)")
    try:
        record_timeline(spec)
    except ServiceGroupError as exc:
        raise AdviseError(str(exc)) from None
    except OSError as exc:
        raise AdviseError(f"cannot write {spec.csv_path}: {exc.strerror or exc}") from None
    return spec.csv_path


def record_cgroup(spec: str, window: Window, duration_s: float, interval_s: float,
                  command: Sequence[str], say: Callable[[str], None]) -> Path:
    """``--cgroup TARGET --duration S``: the group resolved (the window's name checked
    first) and recorded (:func:`record_window`); its timeline's path."""
    from client.run.service_group import resolve_cgroup

    if problem := check_file_name(window.prefix()):   # the name first, as always
        raise AdviseError(problem)
    try:
        group = resolve_cgroup(spec, pod_uid=None)
    except ServiceGroupError as exc:
        raise AdviseError(str(exc)) from None
    return record_window(group, window, duration_s, interval_s, command, say)


def advise_timeline(timeline: Path, target: LatencyGoal, window: Window) -> Answer:
    """The answer from the recorded window at ``timeline`` (and its requests), with its range
    (:func:`bounds`); none where the record cannot show the demand (:func:`unseen`)."""
    replayed = load_replay(timeline, window.requests_from, window.period_ms,
                           window.start_epoch_ns, window.align)
    runs: dict[int | None, Path] = {}
    burst_ns = round((window.burst_ms or 0.0) * MS)
    replay_at = (plain_replays(replayed, replayed.demand, replayed.closed, burst_ns)
                 if window.requests_from is None else saving_replays(replayed, window, runs))
    recorded = [c for c in replayed.recording.limits if c is not None]
    ceiling = (os.cpu_count() or 1) * 1000
    start = min(ceiling, round(recorded[0] * 1000)) if recorded else ceiling // 2
    floor = floor_millicores(replayed.period_ns / MS)
    if (why := unseen(replayed)) is not None:
        advice = unanswered(replay_at, target, start, floor, ceiling, why)
    else:
        advice = search(replay_at, target, start=start, floor=floor, ceiling=ceiling)
    if advice.at is not None and advice.at.millicores is not None:
        advice = replace(advice, range=range_of(advice.at.millicores, bounds(
            replayed, target, burst_ns, start=start, floor=floor, ceiling=ceiling,
            near=advice.at.millicores), ceiling))
    base = replay_answer(replayed.recording, replayed.demand, [], replayed.placed,
                         window.requests_from, replayed.clock)
    return Answer(advice, replay=base, period_ms=replayed.period_ns / MS,
                  by_requests=replayed.requests is not None, runs=runs)


def unanswered(replay_at: Callable[[int | None], LimitRow], target: LatencyGoal, at: int,
               floor: int, ceiling: int, why: str) -> PassiveAdvice:
    """No answer, and ``why``; the window replayed without a limit and at ``at`` millicores
    (the recorded limit) is kept, as what the record shows."""
    return PassiveAdvice(target, judge(None, replay_at(None), target),
                         (judge(at, replay_at(at), target),), None, None, floor, ceiling, why)


def hidden_throughout(stat: CpuStat) -> bool:
    """Whether a window sat throttled in (nearly) every period it ran: fewer unthrottled
    periods than two and :data:`UNSEEN_SHARE` of them, so no stretch shows what the group
    wanted."""
    unthrottled = stat.nr_periods - stat.nr_throttled
    return stat.nr_periods > 0 and unthrottled < max(2, UNSEEN_SHARE * stat.nr_periods)


def unseen(replayed: ReplayInputs) -> str | None:
    """Why the record cannot show the demand the quota hid, in one line (None: it can): it
    sat throttled in (nearly) every period it ran, so no unthrottled stretch shows what the
    group wanted, and no requests were given. With its requests it can: the kernel counted
    the group's CPU over their rows, and each request is given its own (Server-Timing), its
    rows' (one at a time), one drawn from those that ran unthrottled, or, where too few
    did, the CPU per request the kernel counted, the range widened by the shape of the
    distribution not seen (``client.analysis.replay.load_of``, :func:`bounds`)."""
    stat = replayed.demand.recorded
    if not hidden_throughout(stat) or replayed.requests:
        return None
    return (f"{replayed.recording.path}: throttled in {stat.nr_throttled} of its "
            f"{stat.nr_periods} periods, so no unthrottled stretch shows the CPU the quota hid, "
            f"and no requests were given to share the CPU the kernel counted: {WHAT_TO_GIVE}")


WHAT_TO_GIVE = ("give the window's requests (--requests-from), or record a window with "
                "unthrottled stretches (a higher limit for a while, or a lighter load)")


def plain_replays(replayed: ReplayInputs, demand: Demand, closed: bool | None,
                  burst_ns: int, shift: float = 0.0, unseen: str = MEAN
                  ) -> Callable[[int | None], LimitRow]:
    """Each limit replayed on ``demand`` (the requests' load as ``closed`` says, their CPU
    drawn ``shift`` ranks up or down, or where no distribution showed, given out as
    ``unseen`` says: ``load_of``), nothing saved."""
    period_ns = replayed.period_ns
    if replayed.requests is None:
        at = Replayer(demand, burst_ns, period_ns)
        return lambda millicores: LimitRow(at(None if millicores is None else millicores / 1000),
                                           None)
    load = load_of(demand, replayed.requests, closed, shift, unseen)
    return lambda millicores: LimitRow(*replay_load(
        demand, load, None if millicores is None else millicores / 1000, burst_ns, period_ns))


Replays = Callable[[Demand, "bool | None"], Callable[[int | None], LimitRow]]


def bounds(replayed: ReplayInputs, target: LatencyGoal, burst_ns: int, *, start: int,
           floor: int, ceiling: int, replays: Replays | None = None,
           near: int | None = None) -> list[Bound]:
    """The answer under each bounding assumption of what the record could not show (see
    ``client.analysis.passive_range``): the hidden demand on 1 CPU and on the CPUs in flight
    (its requests at once, at most the machine's; without requests, the machine's), where
    the record was throttled; on coarse rows, each row's CPU wanted at its start (without
    requests; with them, a note of what was taken); the tail's order statistics on either side, with requests,
    and a note where they are too few for their largest to bound the p99; the CPU the
    record hid drawn a quarter of the ranks lighter and heavier (where no distribution showed
    to draw from, given out by each one's rows and by latency less hold, and a note); the loop open and closed,
    where its shape was inferred. ``replays``: each limit's replay of a demand with the
    requests sent as ``closed`` says (None: :func:`plain_replays`). ``near``: where each
    search begins (the answer; :func:`search`)."""
    replays_of: Replays = replays or (
        lambda other, closed: plain_replays(replayed, other, closed, burst_ns))

    def answer(replay_at: Callable[[int | None], LimitRow],
               row_judge: RowJudge = judge) -> int | None:
        at = search(replay_at, target, start=start, floor=floor, ceiling=ceiling,
                    judge=row_judge, with_less=False, near=near).at
        return None if at is None else at.millicores

    out = _hidden_bounds(replayed, answer, replays_of, ceiling)
    out += _coarse_bounds(replayed, answer, replays_of)
    if replayed.requests:
        out += _tail_bounds(replayed, answer, replays_of, burst_ns)
    return out


Searched = Callable[..., "int | None"]   # the search's answer over a limit's replay (a judge)


def _hidden_bounds(replayed: ReplayInputs, answer: Searched, replays_of: Replays,
                   ceiling: int) -> list[Bound]:
    """Where the record was throttled: the hidden demand on 1 CPU and on the CPUs in flight
    (its requests at once, at most the machine's; without requests, the machine's)."""
    demand, requests = replayed.demand, replayed.requests
    if demand.throttled_wall_ns <= 0:
        return []
    machine = max(1, ceiling // 1000)
    most = min(machine, in_flight(requests)) if requests else machine
    out = []
    for cores in sorted({1, max(1, most)} - {demand.cores}):
        other = replace(demand_of(replayed.recording.samples,
                                  replayed.recording.period_ns, cores),
                        partial=demand.partial)
        out.append(Bound("the hidden demand", f"on {cores} CPU{'s' if cores > 1 else ''}",
                         answer(replays_of(other, replayed.closed))))
    return out


def _coarse_bounds(replayed: ReplayInputs, answer: Searched, replays_of: Replays) -> list[Bound]:
    """On coarse rows: each row's CPU wanted at its start (without requests; with them, a
    note of what was taken)."""
    demand = replayed.demand
    if not demand.coarse:
        return []
    rows = (f"the rows ({demand.resolution_ns / MS:.0f} ms apart, periods of "
            f"{demand.period_ns / MS:g} ms)")
    if replayed.requests:
        # the other end (each held no longer than its rows allow) leaves a request a
        # throttle held most of its latency on the node agent's rows: a bound so loose
        # it says nothing, so it is named, not searched
        return [Bound(rows, "where in its row each throttle lay is not known: a "
                      "request a throttle may have held is taken to run only its own "
                      "CPU, the least it can", None, note=True)]
    return [Bound(rows, "each row's CPU wanted at its start",
                  answer(replays_of(bunched(demand), replayed.closed)))]


def _tail_bounds(replayed: ReplayInputs, answer: Searched, replays_of: Replays,
                 burst_ns: int) -> list[Bound]:
    """With requests: the tail's order statistics on either side (and a note where they are
    too few for their largest to bound the p99); the CPU the record hid drawn a quarter of
    the ranks lighter and heavier (where no distribution showed to draw from, given out by
    each one's rows and by latency less hold, and a note); the loop open and closed, where
    its shape was inferred."""
    demand, requests = replayed.demand, replayed.requests
    assert requests
    out = []
    base = replays_of(demand, replayed.closed)
    n = len(requests)
    for side, words in ((-1, "a lower order statistic"), (1, "a higher one")):
        out.append(Bound(f"the tail ({n} requests decide the p99)", words,
                         answer(base, judge_tail(side))))
    if (covered := tail_covered(n, 99)) < SIDE:
        out.append(Bound(f"the tail ({n} requests decide the p99)",
                         f"their largest lies above the p99 only {100 * covered:.0f} % "
                         f"of the time: {tail_needs(99)} requests bound it", None,
                         note=True))
    drawn = load_of(demand, requests, replayed.closed).drawn
    if drawn is not None and drawn.unknown:
        unknown = (f"the CPU of {drawn.unknown} of {drawn.count} requests "
                   f"({100 * drawn.share:.0f} %) not known")
        if drawn.drawn:
            for shift, words in ((-SHIFT, "drawn a quarter lighter"),
                                 (SHIFT, "drawn a quarter heavier")):
                out.append(Bound(unknown, words, answer(plain_replays(
                    replayed, demand, replayed.closed, burst_ns, shift))))
        else:   # the kernel's CPU per request each; the shape of its spread not seen
            for spread, words in ((ROWS, "each its rows' share"),
                                  (BY_WALL, "by latency less hold, the slowest heaviest")):
                out.append(Bound(unknown, words, answer(plain_replays(
                    replayed, demand, replayed.closed, burst_ns, unseen=spread))))
            out.append(Bound(unknown, f"each the CPU per request the kernel counted: "
                             f"fewer than {MIN_DONORS} ran unthrottled and alone, so the "
                             "shape of its distribution was not seen", None, note=True))
    if replayed.closed is None:
        inferred = load_of(demand, requests, None).closed
        other_shape = not inferred
        out.append(Bound("the load's shape (inferred)",
                         "closed loop" if other_shape else "open loop",
                         answer(replays_of(demand, other_shape))))
    return out


def saving_replays(replayed: ReplayInputs, window: Window, runs: dict[int | None, Path]
            ) -> Callable[[int | None], LimitRow]:
    """Each limit judged by the replay behind advise's seam: its predicted requests saved as
    a run (``<data-dir>/<name>-replay-<cpus>``, in ``runs``) as live advise saves each run."""
    assert window.requests_from is not None
    at = replayed_limit(replayed, window.requests_from)
    limit_of = shape(replayed.period_ns / MS, window.burst_ms or 0.0)
    prefix = window.prefix()
    if problem := check_file_name(prefix, prefix=True):
        raise AdviseError(problem)
    plan = at.plan()

    def replay_at(millicores: int | None) -> LimitRow:
        limit = None if millicores is None else limit_of(millicores)
        try:
            measured = at.measure(limit, name=run_name(prefix, at.name, limit), plan=plan,
                                  data_dir=window.data_dir)
        except FileWriteError as exc:
            raise AdviseError(str(exc)) from None
        runs[millicores] = measured.run.path
        return at.row(limit)

    return replay_at
