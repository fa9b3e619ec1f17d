"""``http-timing sweep``: start the service under each CPU limit, time it, stop it, compare.

    http-timing sweep --cpus 1,0.3,0.1 --backend kernel|inprocess|docker|auto
                      [--requests N] [--iterations N] [--rate R --duration D | --concurrency C]
                      [--period-ms P] [--burst-ms B] [--name PREFIX] [--image IMAGE]

A loop over limits, each run by one :class:`client.run.at_limit.AtLimit`: burn-service started
by a backend (``client.run.targets``) on a free port, timed once ``/healthz`` answers, and
stopped by its pid or container id (also on Ctrl-C/SIGTERM or a failure); or, with
``--cgroup TARGET --url URL`` (``--k8s``), the user's running service, each limit set in place
and read back before its run, which samples the group as ``--cgroup`` does (files named
``<prefix>-inplace-<cpus>``), and the limit it had put back at the end, on an error, Ctrl-C or
SIGTERM. With ``--timeline T --requests-from R`` nothing is started or touched: each limit is
the replay of the recorded requests (``client.advise.replayed_limit``), saved as a predicted
run (``<prefix>-replay-<cpus>``).

Files: ``<data-dir>/<prefix>-<backend>-<cpus>.csv/.json`` and ``<pictures-dir>/<same>.png``
per limit, then the comparison picture ``<pictures-dir>/<prefix>-<backend>-sweep.png`` with its
Markdown table beside it, printed too. With ``--rate`` or ``--concurrency`` it is the seeds'
throughput-scaling test: a second table (RPS, avg, p95, p99, error rate, throttled, per limit)
in ``<prefix>-<backend>-sweep-throughput.md``. A limit of 0 (or ``none``) runs the service
without a limit, as a baseline.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from client.advise.replay import load_replay, replayed_limit
from client.advise.replayed_limit import ReplayedLimit
from client.analysis.replicas import replica_row
from client.analysis.report import build_report
from client.analysis.throughput import throughput_row
from client.commands.common import (EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EXIT_OK,
                                    add_inplace_arguments, add_load_arguments,
                                    add_target_arguments, at_limit_from, check_folders,
                                    check_inplace_options, draw_result, plan_from,
                                    show_healthy, show_result, show_stopped)
from client.commands.options import CliError, OneLineParser, parse_counts, parse_limits
from client.data.files import Run, writing
from client.data.metadata import LoadMode, SweepInfo
from client.data.naming import check_file_name, limit_text, run_name, sweep_stem
from client.data.formats.legacy import format_line
from client.data.request import DEFAULT_ITERATIONS
from client.render.compare import save_comparison
from client.render.inplace import format_evidence
from client.render.progress import RunProgress, StartProgress
from client.render.text import format_predicted
from client.render.tables import format_replicas_table, format_table, format_throughput_table
from client.run.at_limit import RUN_ERRORS, AtLimit
from client.run.measure import Measurement
from client.run.plan import LoadPlan
from client.run.targets import AUTO
from client.run.record import load_average
from client.run.recorder import stop_on_terminate
from cpuquota.limit import DEFAULT_PERIOD_MS, Limit, LimitError

__all__ = ["build_sweep_parser", "command_sweep"]


def build_sweep_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="http-timing sweep",
        description="Start the burn service under each CPU limit, time it, stop it; save every "
        "run, a comparison picture and a Markdown table (--no-plot: the table only). With "
        "--cgroup, your running service's limit is changed in place instead; with --timeline, "
        "a recorded window is replayed at each limit and nothing is touched.")
    parser.add_argument("--cpus", default="1,0.3,0.1", metavar="LIST",
                        help="CPU limits, comma separated; none = no limit "
                        "(default 1,0.3,0.1); with --replicas: the total, shared by them")
    parser.add_argument("--replicas", metavar="LIST",
                        help="N small or 1 big: for each N in LIST (e.g. 1,4) start N "
                        "services of --cpus/N CPU each and spread the requests round-robin "
                        "over them")
    add_target_arguments(parser, per=" for every limit")
    add_load_arguments(parser, per=" per limit", iterations_default=None)
    parser.add_argument("--name", default=None, metavar="PREFIX",
                        help="prefix of the file names (default sweep-<timestamp>; '' for none)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"), metavar="DIR",
                        help="where each limit's <name>.csv and <name>.json go "
                        "(default ./raw-data)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"), metavar="DIR",
                        help="where each run's picture, the comparison and its table go "
                        "(default ./pictures)")
    parser.add_argument("--no-plot", action="store_true",
                        help="draw no pictures: the raw data and the tables only")
    parser.add_argument("--show-requests", action="store_true",
                        help="print the original per-request line for every request")
    add_inplace_arguments(parser, keep=False)
    replay = parser.add_argument_group(
        "predicted, not measured (--timeline: no service is started or touched)")
    replay.add_argument("--timeline", type=Path, metavar="NAME.cgroup.csv",
                        help="replay this recorded window (http-timing record's, a --cgroup "
                        "run's, the node agent's) with the requests of --requests-from at each "
                        "limit: each limit's predicted requests saved as a run "
                        "(<prefix>-replay-<cpus>), for report, plot and compare")
    replay.add_argument("--requests-from", type=Path, metavar="FILE",
                        help="with --timeline: the window's requests (a run's CSV, a load "
                        "tool's file or an access log, as import reads them)")
    return parser


# what a replay takes from the record, not from the options
NOT_WITH_REPLAY = (("--requests", "requests"), ("--concurrency", "concurrency"),
                   ("--rate", "rate"), ("--duration", "duration"),
                   ("--iterations", "iterations"), ("--replicas", "replicas"),
                   ("--cgroup", "cgroup"), ("--k8s", "k8s"), ("--url", "url"),
                   ("--image", "image"))


def replayed_from(opts: argparse.Namespace) -> ReplayedLimit:
    """``--timeline`` and ``--requests-from`` as a replayed limit; what does not go with them
    is one line."""
    if opts.timeline is None or opts.requests_from is None:
        raise CliError("--timeline FILE and --requests-from FILE go together: the recorded "
                       "window and its requests (predict --timeline replays a window alone)")
    given = [flag for flag, name in NOT_WITH_REPLAY if getattr(opts, name) is not None]
    given += ["--backend"] if opts.backend != AUTO else []
    if given:
        raise CliError(f"{', '.join(given)}: not with --timeline (the replay sends no request "
                       "and takes its load from the recorded requests)")
    replayed = load_replay(opts.timeline, opts.requests_from, None)
    if opts.period_ms is None:
        opts.period_ms = replayed.demand.period_ns / 1e6   # the record's, as predict
    return replayed_limit(replayed, opts.requests_from)


def command_sweep(argv: list[str]) -> int:
    opts = build_sweep_parser().parse_args(argv)
    replay = (replayed_from(opts)
              if opts.timeline is not None or opts.requests_from is not None else None)
    if opts.period_ms is None:
        opts.period_ms = DEFAULT_PERIOD_MS
    live = check_inplace_options(opts)
    if live and opts.replicas:
        raise CliError("--replicas starts services of its own: it does not go with --cgroup")
    if not live and replay is None and opts.iterations is None:
        opts.iterations = DEFAULT_ITERATIONS   # burn-service's work per request
    started = datetime.now(timezone.utc)
    plan = plan_from(opts) if replay is None else replay.plan()
    check_folders(opts, tables=True)
    prefix = "sweep-" + started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    at: AtLimit
    if replay is not None:
        at, why_not_kernel = replay, None
    else:
        at, why_not_kernel = at_limit_from(opts, argv, "sweep", plan, on_started=show_healthy,
                                           on_stopped=show_stopped)
    steps = (replica_steps(opts, at, prefix) if opts.replicas
             else limit_steps(opts, at, prefix))
    try:
        at.check([step.limit for step in steps])
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if problem := at.problem():
        raise CliError(problem)
    if why_not_kernel:
        print(f"sweep: in-process throttle (no kernel quota here: {why_not_kernel})")
    print(f"sweep: {at.description}; {', '.join(step.label for step in steps)}; "
          f"{plan.describe()}, {at.sends}", flush=True)
    if replay is None and (load := load_average()) is not None:
        print(f"sweep: load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy machine "
              "slows every run, limited or not)", flush=True)
    sweep = Sweep(opts, plan, at, prefix, started)
    try:
        with stop_on_terminate():
            with at.holding():
                runs = sweep.run_all(steps)
            compare_and_report(runs, opts, plan, at, prefix)
    except KeyboardInterrupt:
        print(f"\nhttp-timing sweep: interrupted; {len(sweep.runs)} of {len(steps)} "
              f"{'steps' if opts.replicas else 'limits'} done, every completed request is "
              f"saved in {opts.data_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RUN_ERRORS as exc:
        raise CliError(f"{exc} (runs so far are saved in {opts.data_dir})") from None
    failed = any(r.metadata.summary and r.metadata.summary.errors for r in runs)
    return EXIT_FAILED_REQUESTS if failed else EXIT_OK


@dataclass(frozen=True)
class Step:
    """One target of a sweep: a service under a limit, or N replicas under a limit each."""

    label: str            # "0.3 CPU", "4 replicas x 0.1 CPU"
    name: str             # the run's file name
    limit: Limit | None   # each service's
    replicas: int = 0     # 0: one plain service (not a replica set)


def limit_steps(opts: argparse.Namespace, at: AtLimit, prefix: str) -> list[Step]:
    limits = parse_limits(opts.cpus, period_ms=opts.period_ms, burst_ms=opts.burst_ms)
    return [Step(limit_text(limit), run_name(prefix, at.name, limit), limit)
            for limit in limits]


def replica_steps(opts: argparse.Namespace, at: AtLimit, prefix: str) -> list[Step]:
    """``--replicas 1,4 --cpus 0.4``: 1 x 0.4 CPU, then 4 x 0.1 CPU."""
    counts = parse_counts(opts.replicas)
    totals = parse_limits(opts.cpus, period_ms=opts.period_ms, burst_ms=opts.burst_ms)
    if len(totals) != 1:
        raise CliError("with --replicas, --cpus is one total (e.g. --cpus 0.4 --replicas 1,4)")
    total = totals[0]
    steps = []
    for count in counts:
        each = None
        if total is not None:
            try:
                each = Limit(total.cpus / count, total.period_ms, total.burst_ms / count)
            except LimitError as exc:
                raise CliError(f"--replicas {count}: {exc}") from None
        steps.append(Step(f"{count} x {limit_text(each)}",
                          f"{sweep_stem(prefix, at.name)}-replicas-{count}", each, count))
    return steps


class Sweep:
    """One sweep: a run at each step's limit in turn (``AtLimit.measure``)."""

    def __init__(self, opts: argparse.Namespace, plan: LoadPlan, at: AtLimit, prefix: str,
                 started: datetime) -> None:
        self.opts, self.plan, self.at = opts, plan, at
        self.prefix, self.started = prefix, started
        self.runs: list[Run] = []

    def run_all(self, steps: Sequence[Step]) -> list[Run]:
        for index, step in enumerate(steps, start=1):
            self.runs.append(self.record(step, index, len(steps)))
        return self.runs

    def at_step(self, step: Step) -> AtLimit:
        """The service of a step: N replicas of the limit each for ``--replicas``."""
        if not step.replicas:
            return self.at
        return self.at.with_replicas(step.replicas,
                                     StartProgress(step.replicas, step.label).advance)

    def record(self, step: Step, index: int, steps: int) -> Run:
        """Time the step like ``http-timing run`` does: CSV row per request, metadata,
        picture; a Ctrl-C stops the sweep once the run's files are complete."""
        opts = self.opts
        sweep = SweepInfo(sweep_stem(self.prefix, self.at.name) + "-sweep", self.at.name,
                          step.limit.cpus if step.limit else 0, self.started.isoformat())
        observers = ([lambda record: print(format_line(record), flush=True)]
                     if opts.show_requests else [])
        measured = self.at_step(step).measure(
            step.limit, name=step.name, plan=self.plan, data_dir=opts.data_dir, sweep=sweep,
            index=index, progress=RunProgress(self.plan.requests, step.label),
            observers=observers, on_recorded=self.show,
            on_target=lambda words: print(f"\n[{index}/{steps}] {step.label}: {words}",
                                          flush=True))
        if measured.interrupted:
            raise KeyboardInterrupt
        return measured.run

    def show(self, measured: Measurement) -> None:
        """The run's lines and picture (before a started service is stopped, as always)."""
        recorded = measured.recorded
        report = build_report(recorded.run)
        show_result(recorded, report)
        if self.at.capabilities.evidence:
            print(format_evidence(report.cgroup), flush=True)
        if report.predicted is not None:
            print("\n".join(format_predicted(report.predicted)), flush=True)
        if recorded.outcome.stop_reason:
            print(f"http-timing sweep: {recorded.outcome.stop_reason}: "
                  f"{recorded.run.records[-1].error}", file=sys.stderr)
        if not self.opts.no_plot:
            draw_result(recorded, report, self.opts.pictures_dir)


def compare_and_report(runs: Sequence[Run], opts: argparse.Namespace, plan: LoadPlan,
                       at: AtLimit, prefix: str) -> None:
    stem = sweep_stem(prefix, at.name) + "-sweep"
    title = f"{at.description}: {plan.describe()}" + (
        f", iterations={opts.iterations}" if opts.iterations is not None else "")
    picture, table, rows = save_comparison(runs, opts.pictures_dir / f"{stem}.png", title,
                                           draw=not opts.no_plot)
    print()
    print(format_table(rows))
    files = ([f"comparison picture: {picture}"] if picture else []) + [f"table: {table}"]
    if opts.replicas:
        replicas = format_replicas_table([replica_row(run, build_report(run)) for run in runs])
        path = opts.pictures_dir / f"{stem}-replicas.md"
        with writing(path):
            path.write_text(f"Replicas, {title}\n\n{replicas}", encoding="utf-8")
        print()
        print(replicas, end="")
        files.append(f"replicas table: {path}")
    elif plan.mode is not LoadMode.SEQUENTIAL:
        labelled = [(limit_text(_sweep_limit(run)), throughput_row(
            run.records, row.throttled_fraction)) for run, row in zip(runs, rows)]
        markdown = format_throughput_table(labelled)
        scaling = opts.pictures_dir / f"{stem}-throughput.md"
        with writing(scaling):
            scaling.write_text(f"Throughput, {title}\n\n{markdown}", encoding="utf-8")
        print()
        print(markdown, end="")
        files.append(f"throughput table: {scaling}")
    print()
    print(f"raw data: {', '.join(str(r.path) for r in runs)} (+ .json metadata)")
    if not opts.no_plot:
        pictures = [opts.pictures_dir / f"{r.path.stem}.png" for r in runs]
        print(f"pictures: {', '.join(str(p) for p in pictures if p.exists())}")
    for line in files:
        print(line)


def _sweep_limit(run: Run) -> Limit | None:
    sweep = run.metadata.sweep
    return Limit(sweep.cpus) if sweep is not None and sweep.cpus else None
