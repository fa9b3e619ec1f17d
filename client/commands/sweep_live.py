"""``http-timing sweep --cgroup TARGET --url URL --cpus 1,0.5,0.3``: the same load at each
limit on the user's *running* service, its limit changed in place, and the comparison
``sweep`` draws.

Each limit is set in place (``client.run.limiters``: the group's quota file, ``docker update
--cpus``) and in force (read back) before its run, which samples the group as ``--cgroup``
does; ``0``/``none`` runs it without a limit where the target can have none. Files as
``sweep``'s, named ``<prefix>-inplace-<cpus>``. The limit the service had is put back at the end,
on an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from client.analysis.report import build_report
from client.commands.common import (EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EXIT_OK,
                                    check_folders, draw_result, plan_from, show_result)
from client.commands.inplace import InPlaceBackend, inplace_from, request_words
from client.commands.options import CliError, parse_limits
from client.commands.sweep import compare_and_report
from client.data.files import Run
from client.data.metadata import SweepInfo
from client.data.naming import check_file_name, limit_text, run_name, sweep_stem
from client.data.readers.legacy import format_line
from client.render.inplace import format_evidence
from client.render.progress import RunProgress
from client.run.inplace import InPlaceError
from client.run.limiters import LimiterError
from client.run.measure import Measurement
from client.run.record import load_average
from client.run.recorder import stop_on_terminate

__all__ = ["command_sweep_live"]


def command_sweep_live(opts: argparse.Namespace, argv: list[str]) -> int:
    if opts.replicas:
        raise CliError("--replicas starts services of its own: it does not go with --cgroup")
    started = datetime.now(timezone.utc)
    plan = plan_from(opts)
    check_folders(opts)
    prefix = "sweep-" + started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    limits = parse_limits(opts.cpus, period_ms=opts.period_ms, burst_ms=opts.burst_ms)
    inplace = inplace_from(opts, argv, "sweep")
    try:
        inplace.check(limits)
    except LimiterError as exc:
        raise CliError(str(exc)) from None
    backend = InPlaceBackend(inplace)
    print(f"sweep: {backend.description}; {', '.join(map(limit_text, limits))}; "
          f"{plan.describe()}, {request_words(inplace)}", flush=True)
    if (load := load_average()) is not None:
        print(f"sweep: load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy machine "
              "slows every run, limited or not)", flush=True)
    runs: list[Run] = []

    def show(measured: Measurement) -> None:
        recorded = measured.recorded
        report = build_report(recorded.run)
        show_result(recorded, report)
        print(format_evidence(report.cgroup), flush=True)
        if recorded.outcome.stop_reason:
            print(f"http-timing sweep: {recorded.outcome.stop_reason}: "
                  f"{recorded.run.records[-1].error}", file=sys.stderr)
        if not opts.no_plot:
            draw_result(recorded, report, opts.pictures_dir)

    observers = [lambda record: print(format_line(record), flush=True)] \
        if opts.show_requests else []
    try:
        with stop_on_terminate(), inplace.restoring():
            for index, limit in enumerate(limits, start=1):
                name = run_name(prefix, backend.name, limit)
                print(f"\n[{index}/{len(limits)}] {limit_text(limit)}: {inplace.target.spec}",
                      flush=True)
                sweep = SweepInfo(sweep_stem(prefix, backend.name) + "-sweep", backend.name,
                                  limit.cpus if limit else 0, started.isoformat())
                measured = inplace.measure(
                    limit, name=name, plan=plan, data_dir=opts.data_dir,
                    command=inplace.template.command, sweep=sweep,
                    progress=RunProgress(plan.requests, limit_text(limit)),
                    observers=observers, on_recorded=show)
                if measured.interrupted:
                    raise KeyboardInterrupt
                runs.append(measured.run)
    except KeyboardInterrupt:
        print(f"\nhttp-timing sweep: interrupted; {len(runs)} of {len(limits)} limits done, "
              f"every completed request is saved in {opts.data_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (InPlaceError, LimiterError) as exc:
        raise CliError(f"{exc} (runs so far are saved in {opts.data_dir})") from None
    compare_and_report(runs, opts, plan, backend, prefix)  # type: ignore[arg-type]
    failed = any(r.metadata.summary and r.metadata.summary.errors for r in runs)
    return EXIT_FAILED_REQUESTS if failed else EXIT_OK
