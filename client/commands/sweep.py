"""``http-timing sweep``: start the service under each CPU limit, time it, stop it, compare.

    http-timing sweep --cpus 1,0.3,0.1 --backend kernel|inprocess|docker|auto
                      [--requests N] [--iterations N] [--rate R --duration D | --concurrency C]
                      [--period-ms P] [--burst-ms B] [--name PREFIX] [--image IMAGE]

A loop over targets (``client.run.targets``: one backend, one limit each) calling
``record_run``: each service is started on a free port, timed once ``/healthz`` answers, and
stopped by its pid or container id (also on Ctrl-C/SIGTERM or a failure).

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
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from client.analysis.report import build_report
from client.analysis.throughput import throughput_row
from client.commands.common import (EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EXIT_OK,
                                    add_load_arguments, draw_result, period_ms, plan_from,
                                    show_result)
from client.commands.options import CliError, number_at_least, parse_limits
from client.data.files import Run
from client.data.legacy import format_line
from client.data.metadata import LoadMode, SweepInfo
from client.data.naming import check_file_name, limit_tag, limit_text, run_name, sweep_stem
from client.render.compare import save_comparison
from client.render.progress import RunProgress
from client.render.tables import format_table, format_throughput_table
from client.run.http import build_url
from client.run.plan import LoadPlan
from client.run.record import RunSpec, load_average, record_run
from client.run.recorder import files_first, stop_on_terminate
from client.run.targets import AUTO, BACKENDS, Backend, ServiceError, Target, TargetOptions
from client.run.targets import resolve_backend
from client.run.targets.service import free_port
from service.limit import Limit

__all__ = ["build_sweep_parser", "command_sweep"]


def build_sweep_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="http-timing sweep",
        description="Start the burn service under each CPU limit, time it, stop it; save every "
        "run, a comparison picture and a Markdown table.")
    parser.add_argument("--cpus", default="1,0.3,0.1",
                        help="CPU limits, comma separated; 0 or none = no limit "
                        "(default 1,0.3,0.1)")
    parser.add_argument("--backend", choices=(AUTO, *BACKENDS), default=AUTO,
                        help="kernel: burn-service --cpus (a real cgroup quota; root); "
                        "inprocess: burn-service --cpu-limit (anywhere); docker: docker run "
                        "--cpus; auto: kernel where permitted, else inprocess (default)")
    parser.add_argument("--period-ms", type=period_ms, default=100.0, metavar="P",
                        help="the quota's period in ms for every limit (default 100)")
    parser.add_argument("--burst-ms", type=number_at_least(0), default=0.0, metavar="B",
                        help="burst for every limit, in ms (kernel backend; default 0)")
    add_load_arguments(parser, per=" per limit")
    parser.add_argument("--name", default=None, metavar="PREFIX",
                        help="prefix of the file names (default sweep-<timestamp>; '' for none)")
    parser.add_argument("--image", default=None,
                        help="docker image for --backend docker (default $THROTTLE_LAB_IMAGE "
                        "or throttle-lab:latest)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"))
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"))
    parser.add_argument("--show-requests", action="store_true",
                        help="print the original per-request line for every request")
    return parser


def command_sweep(argv: list[str]) -> int:
    opts = build_sweep_parser().parse_args(argv)
    started = datetime.now(timezone.utc)
    limits = parse_limits(opts.cpus, period_ms=opts.period_ms, burst_ms=opts.burst_ms)
    plan = plan_from(opts)
    prefix = "sweep-" + started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    options = TargetOptions(**({"image": opts.image} if opts.image else {}))
    backend, why_not_kernel = resolve_backend(opts.backend, options)
    try:
        backend.check(limits)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if problem := backend.problem():
        raise CliError(problem)
    if why_not_kernel:
        print(f"sweep: in-process throttle (no kernel quota here: {why_not_kernel})")
    print(f"sweep: {backend.description}; limits {', '.join(map(limit_tag, limits))} "
          f"CPU; {plan.describe()}, iterations={opts.iterations}", flush=True)
    if (load := load_average()) is not None:
        print(f"sweep: load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy machine "
              "slows every run, limited or not)", flush=True)
    sweep = Sweep(opts, plan, backend, prefix, started, argv)
    try:
        with stop_on_terminate():
            runs = sweep.run_all(limits)
            compare_and_report(runs, opts, plan, backend, prefix)
    except KeyboardInterrupt:
        print(f"\nhttp-timing sweep: interrupted; {len(sweep.runs)} of {len(limits)} limits "
              f"done, every completed request is saved in {opts.data_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ServiceError as exc:
        raise CliError(f"{exc} (runs so far are saved in {opts.data_dir})") from None
    failed = any(r.metadata.summary and r.metadata.summary.errors for r in runs)
    return EXIT_FAILED_REQUESTS if failed else EXIT_OK


class Sweep:
    """One sweep: a target per limit, each started, recorded and stopped in turn."""

    def __init__(self, opts: argparse.Namespace, plan: LoadPlan, backend: Backend, prefix: str,
                 started: datetime, argv: Sequence[str]) -> None:
        self.opts, self.plan, self.backend = opts, plan, backend
        self.prefix, self.started, self.argv = prefix, started, list(argv)
        self.runs: list[Run] = []

    def run_all(self, limits: Sequence[Limit | None]) -> list[Run]:
        for index, limit in enumerate(limits, start=1):
            target = self.backend.target(limit, free_port(), index=index)
            print(f"\n[{index}/{len(limits)}] {limit_text(limit)}: {' '.join(target.argv)}",
                  flush=True)
            try:
                began = time.monotonic()
                target.start()
                print(f"healthy after {time.monotonic() - began:.1f} s ({target.ident})",
                      flush=True)
                self.runs.append(self.record(target, limit))
            finally:
                stop_quietly(target)
        return self.runs

    def record(self, target: Target, limit: Limit | None) -> Run:
        """Time the target like ``http-timing run`` does: CSV row per request, metadata,
        picture; a Ctrl-C stops the sweep once the run's files are complete."""
        opts, name = self.opts, run_name(self.prefix, self.backend.name, limit)
        spec = RunSpec(
            url=build_url(target.base_url + "/cpuBurnFlow", opts.iterations), plan=self.plan,
            name=name, data_dir=opts.data_dir, iterations=opts.iterations,
            command=["http-timing", "sweep", *self.argv], timeout=opts.timeout,
            warmup=opts.warmup, service=target.describe(), note_load_average=True,
            sweep=SweepInfo(sweep_stem(self.prefix, self.backend.name) + "-sweep",
                            self.backend.name, limit.cpus if limit else 0,
                            self.started.isoformat()))
        progress = RunProgress(self.plan.requests, limit_text(limit))
        observers = [progress.advance]
        if opts.show_requests:
            observers.insert(0, lambda record: print(format_line(record), flush=True))
        with progress:
            recorded = record_run(spec, observers)
        if recorded.interrupted:
            raise KeyboardInterrupt
        report = build_report(recorded.run)
        show_result(recorded, report)
        if recorded.outcome.stop_reason:
            print(f"http-timing sweep: {recorded.outcome.stop_reason}: "
                  f"{recorded.run.records[-1].error}", file=sys.stderr)
        draw_result(recorded, report, opts.pictures_dir)
        return recorded.run


def stop_quietly(target: Target) -> None:
    """Stop the target; a second Ctrl-C meanwhile must not leave it running."""
    with files_first():
        words = target.stop()
    summary = [line for line in words.splitlines() if "periods" in line and "throttled" in line]
    if summary:  # the cpu-quota supervisor's cpu.stat line
        print(summary[-1].strip(), flush=True)


def compare_and_report(runs: Sequence[Run], opts: argparse.Namespace, plan: LoadPlan,
                       backend: Backend, prefix: str) -> None:
    stem = sweep_stem(prefix, backend.name) + "-sweep"
    title = f"{backend.description}: {plan.describe()}, iterations={opts.iterations}"
    picture, table, rows = save_comparison(runs, opts.pictures_dir / f"{stem}.png", title)
    print()
    print(format_table(rows))
    files = [f"comparison picture: {picture}", f"table: {table}"]
    if plan.mode is not LoadMode.SEQUENTIAL:
        labelled = [(limit_text(_sweep_limit(run)), throughput_row(
            run.records, row.throttled_fraction)) for run, row in zip(runs, rows)]
        markdown = format_throughput_table(labelled)
        scaling = opts.pictures_dir / f"{stem}-throughput.md"
        scaling.write_text(f"Throughput, {title}\n\n{markdown}", encoding="utf-8")
        print()
        print(markdown, end="")
        files.append(f"throughput table: {scaling}")
    print()
    print(f"raw data: {', '.join(str(r.path) for r in runs)} (+ .json metadata)")
    pictures = [opts.pictures_dir / f"{r.path.stem}.png" for r in runs]
    print(f"pictures: {', '.join(str(p) for p in pictures if p.exists())}")
    for line in files:
        print(line)


def _sweep_limit(run: Run) -> Limit | None:
    sweep = run.metadata.sweep
    return Limit(sweep.cpus) if sweep is not None and sweep.cpus else None
