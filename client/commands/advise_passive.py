"""``http-timing advise --passive``: the smallest limit that meets a latency target, from the
replay of what a group did (``client.analysis.passive``): no resize, no load.

    http-timing advise --passive --timeline FILE [--requests-from FILE] --p99 MS [--p90 MS]
    http-timing advise --passive --cgroup TARGET --duration S [--requests-from FILE] --p99 MS
    http-timing advise --passive --k8s NS/KIND/NAME [--since DURATION] [--until TIME]
                       [--requests-from FILE] --p99 MS

With ``--cgroup``, the group is recorded for ``--duration`` seconds first, as ``http-timing
record`` does (``<data-dir>/<name>.cgroup.csv`` and ``.json``), touching nothing. With
``--k8s``, the window of the last ``--since`` (to ``--until``, or now) that the node agent
recorded for each of the workload's pods is fetched through the API server
(``client.commands.cluster.pod_windows``, kept in ``<data-dir>``) and replayed per pod, pooled
(``client.analysis.cluster``). With ``--requests-from``, each limit is judged through the
seam live advise runs its limits through: the replay as a limit
(``client.analysis.replayed_limit``), its predicted requests saved as a run
(``<data-dir>/<name>-replay-<cpus>``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from client.analysis.advise import docker_flags, floor_millicores, kubernetes_cpu, shape
from client.analysis.advise_target import LatencyTarget
from client.advise.passive import search
from client.analysis.passive import PassiveAdvice
from client.analysis.replay import LimitRow, replay_limits
from client.commands.common import EXIT_OK
from client.commands.options import CliError, iso_utc
from client.commands.predict_replay import Replayed, load_replay, replay_answer, replayed_limit
from client.commands.common import cgroup_target
from client.data.jsonsafe import json_ready
from client.data.files import FileWriteError
from client.data.naming import check_file_name, run_name
from client.render.replay import format_passive
from client.run.cgroup_target import CgroupTargetError
from client.run.timeline_record import TimelineSpec, record_timeline

if TYPE_CHECKING:
    from client.run.k8s_workloads import Workload

__all__ = ["EXIT_NOT_MET", "command_advise_passive", "passive_problem"]

EXIT_NOT_MET = 3   # as advise: no limit up to the ceiling met the target
MS = 1_000_000
LOAD_OPTIONS = ("url", "requests", "concurrency", "rate", "max_throttled")


def passive_problem(opts: argparse.Namespace) -> str | None:
    """What is wrong with ``--passive``'s options, in one line (None: nothing)."""
    given = [f"--{name.replace('_', '-')}" for name in LOAD_OPTIONS
             if getattr(opts, name, None) not in (None, False)]
    if given:
        return (f"{', '.join(given)}: not with --passive (it sends no load and answers from a "
                "recorded window by its requests' latency or its added delay)")
    sources = [s for s in (opts.timeline, opts.cgroup, opts.k8s) if s is not None]
    if len(sources) != 1:
        return ("--passive needs one of --timeline FILE (a recorded window), --cgroup TARGET "
                "--duration S (record it now) or --k8s NS/KIND/NAME (what the node agent "
                "recorded)")
    for flag, value in (("--since", opts.since), ("--until", opts.until)):
        if value is not None and opts.k8s is None:
            return f"{flag} goes with --passive --k8s NS/KIND/NAME (the node agent's window)"
    if opts.k8s is not None and opts.duration is not None:
        return "--duration goes with --passive --cgroup (--k8s reads what was recorded: --since)"
    if opts.cgroup is not None and opts.duration is None:
        return "--passive --cgroup needs --duration S: how long to record the group"
    if opts.timeline is not None and opts.duration is not None:
        return "--duration goes with --passive --cgroup (--timeline is already recorded)"
    return None


def _record(opts: argparse.Namespace, argv: list[str]) -> Path:
    name = opts.name or "passive-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    if problem := check_file_name(name):
        raise CliError(problem)
    target = cgroup_target(opts.cgroup, None)
    assert target is not None
    spec = TimelineSpec(target, name, opts.data_dir, opts.duration, None, opts.cgroup_interval,
                        ("http-timing", "advise", *argv))
    print(f"recording {target.directory} for {opts.duration:g} s to {spec.csv_path} "
          "(nothing is changed)", file=sys.stderr if opts.json else sys.stdout, flush=True)
    try:
        record_timeline(spec)
    except CgroupTargetError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot write {spec.csv_path}: {exc.strerror or exc}") from None
    return spec.csv_path


def _limit(millicores: int, period_ms: float) -> dict[str, Any]:
    limit = shape(period_ms)(millicores)
    return {"cpus": limit.cpus, "millicores": limit.millicores, "period_ms": limit.period_ms,
            "burst_ms": limit.burst_ms, "docker": docker_flags(limit),
            "kubernetes_limits_cpu": kubernetes_cpu(limit)}


def passive_answer(base: dict[str, Any], advice: PassiveAdvice, period_ms: float,
                   by_requests: bool) -> dict[str, Any]:
    """advise's JSON keys where they apply, and the replay's window, record and requests."""
    at, less = advice.at, advice.less
    out = {key: value for key, value in base.items() if key != "limits"}
    out.update({
        "passive": True, "target": advice.target.to_dict(),
        "judged_by": ("the requests' predicted latency (p99, p90)" if by_requests else
                      "the added delay of a request arriving at a random instant (p99, p90): "
                      "no requests given"),
        "recommended": None if at is None or at.millicores is None else _limit(
            at.millicores, period_ms),
        "reason": advice.reason,
        "predicted": None if at is None else {
            "at_recommended": at.to_dict(),
            "at_25_percent_less": None if less is None else less.to_dict()},
        "no_limit": advice.free.to_dict(),
        "replays": [judged.to_dict() for judged in advice.tried],
        "search": {"floor_cpus": advice.floor / 1000, "ceiling_cpus": advice.ceiling / 1000,
                   "source": "replays of the recorded window (cpuquota.account); no run"},
    })
    return out


def command_advise_passive(opts: argparse.Namespace, argv: list[str],
                           target: LatencyTarget) -> int:
    if problem := passive_problem(opts):
        raise CliError(problem)
    if opts.k8s is not None:
        return _advise_k8s(opts, target)
    path = opts.timeline if opts.timeline is not None else _record(opts, argv)
    replayed = load_replay(path, opts.requests_from, opts.period_ms)
    recording, period_ns, demand = replayed.recording, replayed.period_ns, replayed.demand
    placed, requests = replayed.placed, replayed.requests
    burst_ns = round((opts.burst_ms or 0.0) * MS)
    runs: dict[int | None, Path] = {}

    def replay_only(millicores: int | None) -> LimitRow:
        cpus = None if millicores is None else millicores / 1000
        (row,) = replay_limits(demand, [cpus], requests, burst_ns, period_ns, replayed.closed)
        return row

    replay_at = (replay_only if opts.requests_from is None
                 else _saving(replayed, opts, runs))

    recorded = [c for c in recording.limits if c is not None]
    ceiling = (os.cpu_count() or 1) * 1000
    start = min(ceiling, round(recorded[0] * 1000)) if recorded else ceiling // 2
    advice = search(replay_at, target, start=start, floor=floor_millicores(period_ns / MS),
                    ceiling=ceiling)
    base = replay_answer(recording, demand, [], placed, opts.requests_from)
    answer = passive_answer(base, advice, period_ns / MS, requests is not None)
    if runs:
        answer["runs"] = [str(p) for p in runs.values()]
    if opts.json:
        print(json.dumps(json_ready(answer), indent=2))
    else:
        print(format_passive(answer))
        if runs:
            print(_runs_line(runs, advice))
    return EXIT_OK if advice.at is not None else EXIT_NOT_MET


def _runs_line(runs: dict[int | None, Path], advice: PassiveAdvice) -> str:
    """Where the predicted runs are, the answer's first (report, plot, compare read them)."""
    at = runs.get(advice.at.millicores) if advice.at is not None else None
    first = f"at the answer {at}; " if at is not None else ""
    folder = next(iter(runs.values())).parent
    return (f"predicted runs (report, plot and compare read them): {first}{len(runs)} in "
            f"{folder}, one per limit replayed")


def _saving(replayed: Replayed, opts: argparse.Namespace, runs: dict[int | None, Path]
            ) -> Callable[[int | None], LimitRow]:
    """Each limit judged by the replay behind advise's seam: its predicted requests saved as
    a run (``<data-dir>/<name>-replay-<cpus>``, in ``runs``) as live advise saves each run."""
    assert opts.requests_from is not None
    at = replayed_limit(replayed, opts.requests_from)
    limit_of = shape(replayed.period_ns / MS, opts.burst_ms or 0.0)
    prefix = opts.name or "passive-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    plan = at.plan()

    def replay_at(millicores: int | None) -> LimitRow:
        limit = None if millicores is None else limit_of(millicores)
        try:
            measured = at.measure(limit, name=run_name(prefix, at.name, limit), plan=plan,
                                  data_dir=opts.data_dir)
        except FileWriteError as exc:
            raise CliError(str(exc)) from None
        runs[millicores] = measured.run.path
        return at.row(limit)

    return replay_at


def _recorded_workload(text: str) -> Workload:
    """The workload ``text`` names, with a CPU limit and a recorded pod; else one line."""
    from client.run.k8s_workloads import WorkloadError, parse_workload_ref, read_workload

    try:
        workload = read_workload(parse_workload_ref(text))
    except WorkloadError as exc:
        raise CliError(str(exc)) from None
    ref = workload.ref
    if workload.limit_cpus is None:
        raise CliError(f"{ref} has no CPU limit (a container of its pod template has no "
                       "limits.cpu): nothing throttles it; give it a limit, or see its usage "
                       "with http-timing cluster")
    if not workload.pods:
        raise CliError(f"{ref} has no pod now (scaled to 0?): nothing recorded to replay")
    if not any(p.recorded for p in workload.pods):
        raise CliError(f"no pod of {ref} is recorded: label them throttle-lab/record=true "
                       "(the pod template's labels) for the node agent (k8s/recorder)")
    return workload


def _advise_k8s(opts: argparse.Namespace, target: LatencyTarget) -> int:
    """``--k8s NS/KIND/NAME``: each recorded pod's window of the last ``--since``, replayed."""
    from client.advise.cluster import advise_pods
    from client.analysis.cluster import search_span
    from client.commands.cluster import DEFAULT_SINCE_S, pod_windows

    since = DEFAULT_SINCE_S if opts.since is None else opts.since
    if opts.until is not None and opts.until > time.time():
        raise CliError(f"--until {iso_utc(opts.until)} is in the future")
    workload = _recorded_workload(opts.k8s)
    ref = workload.ref
    assert workload.limit_cpus is not None
    got = pod_windows(workload, since, opts.data_dir, until=opts.until)
    if not got.windows:
        raise CliError("; ".join(got.missing))
    if opts.requests_from is not None and len(got.windows) > 1:
        raise CliError(f"--requests-from with {ref}: it has {len(got.windows)} recorded pods "
                       "and one file of requests cannot say which pod served each; without "
                       "--requests-from the added delay is judged")
    start, floor, ceiling = search_span(workload.limit_cpus, got.windows)
    runs: dict[int | None, Path] = {}
    if opts.requests_from is not None:
        replayed = load_replay(got.recordings[0].path, opts.requests_from, opts.period_ms)
        advice = search(_saving(replayed, opts, runs), target, start=start, floor=floor,
                        ceiling=ceiling)
        placed = replayed.placed
    else:
        advice = advise_pods(got.windows, workload.limit_cpus, target)
        placed = None
    first = got.recordings[0]
    base = replay_answer(first, got.windows[0].demand, [], placed, opts.requests_from)
    period_ms = got.windows[0].demand.period_ns / MS
    answer = passive_answer(base, advice, period_ms, opts.requests_from is not None)
    answer["timeline"] = ", ".join(str(r.path) for r in got.recordings)
    if runs:
        answer["runs"] = [str(p) for p in runs.values()]
    answer["workload"] = {
        "name": str(ref), "limit_cpus": workload.limit_cpus,
        "request_cpus": workload.request_cpus, "since_s": since, "until": opts.until,
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
    if opts.json:
        print(json.dumps(json_ready(answer), indent=2))
    else:
        pods = answer["workload"]["pods"]
        window = (f"the last {since:g} s" if opts.until is None
                  else f"the {since:g} s to {iso_utc(opts.until)}")
        print(f"{ref}: {window} as the node agent recorded it; "
              f"{len(pods)} pod(s): " + ", ".join(f"{p['pod']} ({p['seconds']:.0f} s)"
                                                  for p in pods))
        for line in got.missing:
            print(f"left out: {line}")
        print(format_passive(answer))
        if runs:
            print(_runs_line(runs, advice))
    return EXIT_OK if advice.at is not None else EXIT_NOT_MET
