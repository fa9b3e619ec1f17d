"""``http-timing advise``: the smallest CPU limit that meets a latency target, proven by runs.

    http-timing advise --p99 MS [--p90 MS] [--max-throttled PCT]
                       [--backend kernel|inprocess|docker|auto] [--period-ms P] [--burst-ms B]
                       [--requests N | --rate R --duration D | --concurrency C]
                       [--iterations N] [--name PREFIX] [--json] [--max-runs N]
                       [--no-alternatives]

Profile without a limit, let the quota model guess, verify with real runs, say it beside what
the usage rules would set (the steps: ``client.advise.live``). Each run is saved like any
other (``<data-dir>/<prefix>-advise-<cpus>.csv/.json``); the answer goes to
``<pictures-dir>/<prefix>-advise.png``, ``.md`` and ``.json`` (what ``--json`` prints;
progress then goes to stderr). Every service started is stopped by its id, also on Ctrl-C
(exit 130: the runs so far stay); no limit up to the ceiling met: exit 3.

**A running service** (``--cgroup PATH|pid:PID|docker:NAME|k8s:NS/POD`` or ``--k8s
NS/deployment/NAME``, with ``--url URL``): the same search, each limit set in place and put
back at the end whatever ends it (``--keep``: leave the answer; ``--apply``: patch the pod's
Deployment). ``--passive`` answers from a recorded window instead (``client.advise.passive``).
``--passive --replicas 1,2,3,4``: for each replica count the smallest limit each, the load
spread over them, and the least total (``client.advise.replicas``); without ``--passive``,
with ``--k8s NS/deployment/NAME``, the same measured: the Deployment scaled to each count, every
pod resized in place, the count and every limit put back (``client.advise.replicas_live``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from client.advise import AdviseError
from client.advise.answer import Answer
from client.advise.cluster import DEFAULT_SINCE_S
from client.advise.live import LESS, Advisor, Asked, Hooks, save_answer, span
from client.advise.passive import Window, record_cgroup
from client.advise.replicas import save_sized, spread_of
from client.advise.sources import Source, passive_over, replicas_over
from client.advise.vpa import vpa_check
from client.analysis.goal import LatencyGoal
from client.commands.exits import EXIT_NOT_MET
from client.commands.common import (EXIT_INTERRUPTED, EXIT_OK, add_inplace_arguments,
                                    add_load_arguments, add_target_arguments, at_limit_from,
                                    check_folders, check_inplace_options, plan_from,
                                    show_stopped)
from client.commands.options import (HPA_FLAGS, PASSIVE_FLAGS, CliError, OneLineParser,
                                     add_passive_arguments, given, int_at_least, iso_utc,
                                     number_above, number_at_least, parse_counts,
                                     passive_problem)
from client.data.naming import check_file_name, sweep_stem
from client.data.request import DEFAULT_ITERATIONS
from client.render.advise import format_advice, format_runs_table
from client.render.progress import RunProgress
from client.render.replay import format_passive, format_predicted_runs, format_workload
from client.run.at_limit import AtLimit, InPlaceError
from client.run.k8s_workloads import WorkloadRef
from client.run.limiters import LimiterError
from client.run.recorder import stop_on_terminate
from cpuquota.limit import DEFAULT_PERIOD_MS

__all__ = ["EXIT_NOT_MET", "LESS", "build_advise_parser", "command_advise", "goal_from"]



def build_advise_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="http-timing advise",
        description="Find the smallest CPU limit that meets a latency target: profile the "
        "service without a limit, let the quota model guess, verify with real runs.")
    parser.add_argument("--p99", type=number_above(0), required=True, metavar="MS",
                        help="the target: p99 latency at most MS milliseconds")
    parser.add_argument("--p90", type=number_above(0), metavar="MS",
                        help="and p90 at most MS milliseconds")
    parser.add_argument("--max-throttled", type=number_at_least(0), metavar="PCT",
                        help="and at most PCT %% of the requests delayed by throttling")
    add_target_arguments(parser)
    add_load_arguments(parser, per=" per run", iterations_default=None)
    parser.add_argument("--profile-seconds", type=number_above(0), default=10.0, metavar="S",
                        help="the run without a limit lasts at least S seconds (the same load "
                        "for longer: S per-second usage samples; default 10)")
    parser.add_argument("--max-runs", type=int_at_least(2), default=12, metavar="N",
                        help="most limits the search runs (default 12)")
    parser.add_argument("--no-alternatives", dest="alternatives", action="store_false",
                        help="do not run a shorter period or a burst, even when the model "
                        "says they need less")
    parser.add_argument("--name", default=None, metavar="PREFIX",
                        help="prefix of the file names (default <date>-<time>; '' for none)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"), metavar="DIR",
                        help="where every run of the search is saved, as <name>.csv and "
                        "<name>.json (default ./raw-data)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"), metavar="DIR",
                        help="where the answer goes: its picture, tables (.md) and JSON "
                        "(default ./pictures)")
    parser.add_argument("--json", action="store_true",
                        help="print the answer as JSON (progress goes to stderr)")
    add_inplace_arguments(parser, keep=True)
    live = parser.add_argument_group(
        "replicas, live (--k8s NS/deployment/NAME --replicas N,N,...: scaled, resized, put back)")
    live.add_argument("--despite-hpa", action="store_true",
                      help="with --replicas on a live Deployment: go on though an HPA scales "
                      "it (it may change the count under the runs; default: stop, one line)")
    live.add_argument("--pending-timeout", type=number_above(0), default=None, metavar="S",
                      help="with --replicas on a live Deployment: a pod unscheduled this many "
                      "seconds means the nodes cannot hold that many replicas (default 60)")
    add_passive_arguments(parser)
    return parser


def goal_from(opts: argparse.Namespace) -> LatencyGoal:
    """The target of the options; nonsense is a one-line ``CliError``."""
    throttled = None if opts.max_throttled is None else opts.max_throttled / 100
    target = LatencyGoal(opts.p99, opts.p90, throttled)
    if problem := target.problem():
        raise CliError(problem)
    if opts.p99 >= opts.timeout * 1000:
        raise CliError(f"--p99 {opts.p99:g} ms is not below --timeout {opts.timeout:g} s: a "
                       "request that slow counts as failed")
    return target


def command_advise(argv: list[str]) -> int:
    try:
        return _advise(argv)
    except AdviseError as exc:
        raise CliError(str(exc)) from None


def _advise(argv: list[str]) -> int:
    opts = build_advise_parser().parse_args(argv)
    if opts.passive:
        return advise_passive(opts, argv, goal_from(opts))
    if opts.replicas is not None:
        return advise_replicas_live(opts, argv, goal_from(opts))
    if live_only := given(opts, LIVE_REPLICAS_FLAGS):
        raise CliError(f"{', '.join(live_only)}: with --k8s NS/deployment/NAME --replicas only")
    if passive_only := given(opts, PASSIVE_FLAGS):
        raise CliError(f"{', '.join(passive_only)}: with --passive only (a recorded window)")
    if not check_inplace_options(opts) and opts.iterations is None:
        opts.iterations = DEFAULT_ITERATIONS   # burn-service's work per request
    period_ms = DEFAULT_PERIOD_MS if opts.period_ms is None else opts.period_ms
    started = datetime.now(timezone.utc)
    target, plan = goal_from(opts), plan_from(opts)
    check_folders(opts)
    prefix = started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    at, why_not_kernel = at_limit_from(opts, argv, "advise", plan, on_stopped=show_stopped)
    if opts.apply and not at.capabilities.patches:
        raise CliError(f"--apply patches a Kubernetes Deployment: {at.spec} is not a pod of one "
                       "(see 'To keep it' in the answer)")
    if at.capabilities.patches:   # a Deployment's pod: is a VPA changing its limit too?
        say_vpa(vpa_check(str(at.names["namespace"]), "Deployment", str(at.names["owner"]),
                          opts.despite_vpa))
    asked = Asked(plan, target, prefix, started, opts.data_dir,
                  span(at, period_ms, opts.burst_ms), period_ms, opts.burst_ms, opts.warmup,
                  opts.profile_seconds, opts.max_runs, opts.alternatives)
    with contextlib.redirect_stdout(sys.stderr if opts.json else sys.stdout):
        if why_not_kernel:
            print(f"advise: in-process throttle (no kernel quota here: {why_not_kernel})")
        advisor = Advisor(asked, at, Hooks(lambda line: print(line, flush=True), RunProgress))
        answer = advise_live(opts, advisor, at)
    if answer is None:
        return EXIT_INTERRUPTED
    if opts.json:
        print(json.dumps(answer.to_dict(), indent=2, allow_nan=False))
    return EXIT_OK if answer.met else EXIT_NOT_MET


def advise_live(opts: argparse.Namespace, advisor: Advisor, at: AtLimit) -> Answer | None:
    """The search run (``--keep``, ``--apply``: the answer left or patched), its answer
    saved and said; None: interrupted (the runs so far said)."""
    try:
        with stop_on_terminate(), at.holding():
            advice = advisor.advise()
            if opts.keep and advice.recommended is not None:
                at.keep(advice.recommended)
    except KeyboardInterrupt:
        print(f"\nhttp-timing advise: interrupted after {len(advisor.runs)} run(s); every "
              f"completed request is saved in {opts.data_dir}", file=sys.stderr)
        if advisor.runs:
            print(format_runs_table(advisor.runs), end="", file=sys.stderr)
        return None
    except InPlaceError as exc:   # the limit could not be put back
        raise CliError(str(exc)) from None
    if opts.apply and advice.recommended is not None:
        try:
            advisor.applied = at.patch_for_good(advice.recommended)
        except LimiterError as exc:
            raise CliError(str(exc)) from None
        print(f"in place: {advisor.applied}", flush=True)
    answer, words = advisor.answer(advice), advisor.words(advice)
    files = save_answer(answer, opts.pictures_dir, sweep_stem(advisor.asked.prefix, "advise"),
                        less=advisor.less, words=words)
    if not opts.json:
        print()
        print(format_advice(advice), end="")
        print(words, end="")
        print(f"\n{len(advice.runs) + (1 if advisor.less else 0)} runs in "
              f"{time.monotonic() - advisor.began:.0f} s; raw data in {opts.data_dir}; "
              + ", ".join(map(str, files)))
    return answer


LIVE_REPLICAS_FLAGS = (("--despite-hpa", "despite_hpa"), ("--pending-timeout", "pending_timeout"))


def live_replicas_checked(opts: argparse.Namespace) -> tuple[tuple[int, ...], WorkloadRef]:
    """``--replicas`` without ``--passive``: the counts and the Deployment, or a one-line
    ``CliError``."""
    from client.advise.replicas import check_counts
    from client.run.k8s_workloads import WorkloadError, parse_workload_ref

    counts = tuple(sorted(set(parse_counts(opts.replicas))))
    if problem := check_counts(counts):
        raise CliError(problem)
    if opts.k8s is None:
        raise CliError("--replicas without --passive goes with --k8s NS/deployment/NAME (the "
                       "Deployment scaled to each count, its pods resized in place)")
    if other := [f for f in given(opts, PASSIVE_FLAGS) if f != "--replicas"]:
        raise CliError(f"{', '.join(other)}: with --passive only (live, the Service spreads "
                       "the load)")
    if opts.keep or opts.apply:
        raise CliError("--keep, --apply: not with --replicas (the count and every limit are "
                       "put back at the end)")
    try:
        ref = parse_workload_ref(opts.k8s)
    except WorkloadError as exc:
        raise CliError(str(exc)) from None
    if ref.kind != "Deployment":
        raise CliError(f"--k8s {opts.k8s} --replicas: a Deployment only (it is scaled)")
    return counts, ref


def advise_replicas_live(opts: argparse.Namespace, argv: list[str], target: LatencyGoal
                         ) -> int:
    """``--k8s NS/deployment/NAME --replicas``: the Deployment scaled to each count, every pod
    resized in place, the load timed through ``--url``; the count and every limit put back
    (``client.advise.replicas_live``). The table (or JSON) and the picture."""
    from client.advise.replicas_live import LiveAsked, hpa_refusal, run_at, size_live
    from client.data.jsonsafe import json_ready
    from client.render.replicas import format_sizing
    from client.run.k8s_hpa import read_hpa
    from client.run.k8s_scale import PENDING_TIMEOUT_S, Scaler
    from client.run.k8s_workloads import WorkloadError
    from client.run.kube_api import connect_as

    counts, ref = live_replicas_checked(opts)
    check_inplace_options(opts)
    started = datetime.now(timezone.utc)
    plan = plan_from(opts)
    check_folders(opts)
    prefix = started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    try:
        api = connect_as(WorkloadError)
        said = hpa_refusal(str(ref), read_hpa(ref), opts.despite_hpa)
    except WorkloadError as exc:
        raise CliError(str(exc)) from None
    say_vpa(said)
    say_vpa(vpa_check(ref.namespace, "Deployment", ref.name, opts.despite_vpa))
    asked = LiveAsked(counts, target, plan, prefix, started, opts.data_dir,
                      DEFAULT_PERIOD_MS if opts.period_ms is None else opts.period_ms,
                      opts.burst_ms or 0.0, opts.max_runs)
    scaler = Scaler(api, ref, pending_timeout_s=opts.pending_timeout or PENDING_TIMEOUT_S)

    def say(line: str) -> None:
        print(line, flush=True)

    with contextlib.redirect_stdout(sys.stderr if opts.json else sys.stdout):
        try:
            with stop_on_terminate():
                sized = size_live(asked, scaler,
                                  lambda: at_limit_from(opts, argv, "advise", plan)[0],
                                  run_at(asked, say, RunProgress), say)
        except KeyboardInterrupt:
            print(f"\nhttp-timing advise: interrupted; the replica count and every limit are "
                  f"put back; every completed request is saved in {opts.data_dir}",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        except InPlaceError as exc:   # a limit could not be put back
            raise CliError(str(exc)) from None
    answer = save_sized(sized, opts.pictures_dir, prefix)
    if opts.json:
        print(json.dumps(json_ready(answer), indent=2))
    else:
        print()
        print(format_sizing(answer))
        print(f"picture: {answer['picture']}")
    return EXIT_OK if sized.met else EXIT_NOT_MET


def say_vpa(line: str | None) -> None:
    """``--despite-vpa``'s line that a VPA may change the limit meanwhile, on stderr."""
    if line is not None:
        print(line, file=sys.stderr, flush=True)


def check_until(opts: argparse.Namespace) -> None:
    """``--until`` with ``--k8s``: not in the future."""
    if opts.k8s is not None and opts.until is not None and opts.until > time.time():
        raise CliError(f"--until {iso_utc(opts.until)} is in the future")


def source_of(opts: argparse.Namespace, argv: list[str], window: Window, since: float
              ) -> Source:
    """Where the options say the window is (``--cgroup``: recorded when asked for)."""
    def record() -> Path:
        return record_cgroup(opts.cgroup, window, opts.duration, opts.cgroup_interval,
                             ("http-timing", "advise", *argv), lambda line: print(
                                 line, file=sys.stderr if opts.json else sys.stdout, flush=True))

    return Source(opts.timeline, opts.k8s, since, opts.until, record)


def advise_passive(opts: argparse.Namespace, argv: list[str], target: LatencyGoal) -> int:
    """``--passive``: the answer from the replay of a recorded window (no resize, no load)."""
    if problem := passive_problem(opts):
        raise CliError(problem)
    window = Window(opts.requests_from, opts.period_ms, opts.burst_ms, opts.name, opts.data_dir,
                    None if opts.start is None else round(opts.start * 1e9), not opts.no_align)
    since = DEFAULT_SINCE_S if opts.since is None else opts.since
    if (hpa_given := given(opts, HPA_FLAGS)) and opts.hpa_target is None and not opts.hpa:
        raise CliError(f"{', '.join(hpa_given)}: with --hpa-target PCT, or --hpa (the "
                       "workload's own HPA, with --k8s)")
    if hpa_given:
        if opts.replicas is not None:
            raise CliError("--replicas and the HPA: one at a time (the HPA chooses the "
                           "replicas)")
        return advise_hpa(opts, window, since, target)
    if opts.replicas is not None:
        return advise_replicas(opts, source_of(opts, argv, window, since), window, target)
    for flag, value in (("--spread", opts.spread), ("--seed", opts.seed)):
        if value is not None:
            raise CliError(f"{flag} goes with --replicas (how the load is spread over them)")
    check_until(opts)
    answer = passive_over(source_of(opts, argv, window, since), target, window,
                          despite_vpa=opts.despite_vpa, say=say_vpa)
    if opts.json:
        print(json.dumps(answer.to_json(), indent=2))
        return EXIT_OK if answer.met else EXIT_NOT_MET
    if answer.workload is not None:
        print("\n".join(format_workload(answer.workload, f"the last {since:g} s" if opts.until
                                        is None else f"the {since:g} s to {iso_utc(opts.until)}")))
    print(format_passive(answer.to_dict()))
    if answer.runs:
        at = answer.advice.at
        print(format_predicted_runs(answer.runs, None if at is None else at.millicores))
    return EXIT_OK if answer.met else EXIT_NOT_MET


def advise_replicas(opts: argparse.Namespace, source: Source, window: Window,
                    target: LatencyGoal) -> int:
    """``--passive --replicas``: each replica count's smallest limit, the least total; the
    table (or the JSON) and the picture (``<pictures-dir>/<prefix>-replicas.png``)."""
    from client.data.jsonsafe import json_ready
    from client.render.replicas import format_sizing

    spread = spread_of(sorted(parse_counts(opts.replicas)), opts.spread, opts.seed)
    prefix = window.prefix()
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    check_folders(opts)
    check_until(opts)
    sized = replicas_over(source, target, window, spread)
    answer = save_sized(sized, opts.pictures_dir, prefix)
    if opts.json:
        print(json.dumps(json_ready(answer), indent=2))
    else:
        print(format_sizing(answer))
        print(f"picture: {answer['picture']}")
    return EXIT_OK if sized.met else EXIT_NOT_MET


def advise_hpa(opts: argparse.Namespace, window: Window, since: float,
               target: LatencyGoal) -> int:
    """``--passive --hpa-target PCT`` (or ``--hpa``): the HPA's rule over the window, the
    replicas per minute, the p99, the highest target that meets the goal."""
    from client.advise.hpa import HpaGiven, hpa_over
    from client.data.jsonsafe import json_ready
    from client.render.hpa import format_hpa

    given = HpaGiven(opts.hpa_target, opts.hpa, opts.min, opts.max, opts.hpa_limit,
                     opts.hpa_request, opts.ready_after)
    answer = hpa_over(given, target, window, timeline=opts.timeline, k8s=opts.k8s,
                      since_s=since, until=opts.until)
    said = answer.to_dict()
    print(json.dumps(json_ready(said), indent=2) if opts.json else format_hpa(said))
    return EXIT_OK if answer.met else EXIT_NOT_MET
