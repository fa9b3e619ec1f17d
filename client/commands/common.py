"""What the commands share: exit codes, a quiet stdout when the reader went away, the
options that describe a CPU limit (``--cpus``, ``--period-ms``, ``--burst-ms``), the
``--cgroup TARGET`` of a group to watch and ``--live [PORT]`` (the page's server while a
command works, :func:`live_page`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from client.analysis.report import Report
from client.analysis.throughput import throughput_row
from client.commands.exits import (EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE,
                                   silence_stdout)
from client.commands.options import (CliError, check_folder, cpu_limit_action, cpus_number,
                                     int_at_least, int_in, number_above, number_at_least)
from client.data.files import FileWriteError
from client.data.metadata import LoadMode
from client.render.figures import plot_run
from client.render.live import DEFAULT_HOST, DEFAULT_PORT, LiveError, LivePage
from client.render.text import format_errors, format_summary, format_throughput
from client.run.agent_timeline import AgentLink, AgentTimelineError, agent_link
from client.run.cgroup_target import CgroupTarget, CgroupTargetError, resolve_cgroup
from client.run.plan import DEFAULT_REQUESTS, LoadPlan, LoadPlanError
from client.run.pod_reach import locate
from client.run.record import RecordedRun
from client.run.targets import AUTO, BACKENDS, Backend, Target, TargetOptions, resolve_backend
from client.run.targets.replicas import ReplicaSet
from cpuquota.limit import MAX_PERIOD_MS, MIN_PERIOD_MS, Limit, LimitError

__all__ = ["EXIT_FAILED_REQUESTS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE",
           "add_limit_arguments", "add_live_arguments", "add_load_arguments",
           "add_target_arguments", "backend_from", "cgroup_target", "check_folders",
           "draw_result", "limit_from", "live_page", "period_ms", "plan_from", "run_cgroup",
           "show_healthy", "show_result", "show_stopped", "silence_stdout"]



def period_ms(text: str) -> float:
    """A period in ms, in the kernel's range for ``cfs_period_us`` (1 ms to 1 s)."""
    rule = f"must be a number in [{MIN_PERIOD_MS}, {MAX_PERIOD_MS}]"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{rule} (got {text!r})") from None
    if not MIN_PERIOD_MS <= value <= MAX_PERIOD_MS:
        raise argparse.ArgumentTypeError(f"{rule} (got {text})")
    return value


def add_limit_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    instead = ("give the limit to model" if required
               else "omit --cpus for the run's own limit")
    parser.add_argument("--cpus", type=cpus_number, action=cpu_limit_action(instead),
                        required=required, metavar="X",
                        help="the CPU limit, as docker run --cpus: X × period of CPU per period"
                        + ("" if required else " (default: the run's metadata)"))
    parser.add_argument("--period-ms", type=period_ms, metavar="P",
                        help="the quota's period in ms (default: the metadata's, else 100)")
    parser.add_argument("--burst-ms", type=number_at_least(0), metavar="B",
                        help="burst: unused quota that may be saved, in ms (default 0)")


def limit_from(cpus: float, period: float | None, burst: float | None, source: str = "",
               default: Limit | None = None) -> Limit:
    """The limit the options give, the period and burst falling back to ``default``'s (then
    100 ms, 0); a limit that cannot be is a one-line ``CliError``."""
    try:
        return Limit(cpus, period or (default.period_ms if default else 100.0),
                     burst if burst is not None else (default.burst_ms if default else 0.0),
                     source)
    except LimitError as exc:
        raise CliError(str(exc)) from None


def add_load_arguments(parser: argparse.ArgumentParser, *, per: str = "",
                       iterations_default: int | None = 5000) -> None:
    """``--iterations``, ``--requests``, ``--concurrency``, ``--rate``, ``--duration``,
    ``--warmup``, ``--timeout``: the load, the same for every command that sends it.
    ``iterations_default`` None: only burn-service's URL gets the default (``run``)."""
    parser.add_argument("--iterations", type=int_at_least(0), default=iterations_default,
                        metavar="N",
                        help="burn iterations per request (1 us of CPU each, as burn-service "
                        "calibrates them at start: its --iteration-us), appended as "
                        "?iterations=N when N > 0 (default 5000" +
                        ("" if iterations_default is not None else
                         ", and only to burn-service's /cpuBurnFlow: any other URL is sent "
                         "as given unless this is given") + ")")
    parser.add_argument("--requests", type=int_at_least(1), default=None, metavar="N",
                        help=f"how many requests{per} (default {DEFAULT_REQUESTS})")
    parser.add_argument("--concurrency", type=int_at_least(1), metavar="C",
                        help="closed loop: C requests at a time, each worker sending its next "
                        "when the previous is answered (default: one after another)")
    parser.add_argument("--rate", type=number_above(0), metavar="R",
                        help="open loop: R requests per second whatever the answers; latency "
                        "counts from each request's intended send time (like wrk2)")
    parser.add_argument("--duration", type=number_above(0), metavar="D",
                        help=f"seconds to run{per}, with --rate or --concurrency (instead of "
                        "--requests)")
    parser.add_argument("--timeout", type=number_above(0), default=30.0, metavar="S",
                        help="seconds before one request counts as failed (default 30)")
    parser.add_argument("--warmup", type=int_at_least(0), default=0, metavar="N",
                        help="send N requests first that are not recorded, then wait one "
                        "quota period, so they do not spend the first recorded requests' quota "
                        "(default 0: the first recorded request pays the server's warm-up, as "
                        "in the original)")


def plan_from(opts: argparse.Namespace) -> LoadPlan:
    """The load plan of ``add_load_arguments``' options (one-line ``CliError`` if none)."""
    try:
        return LoadPlan.from_options(requests=opts.requests, concurrency=opts.concurrency,
                                     rate=opts.rate, duration=opts.duration)
    except LoadPlanError as exc:
        raise CliError(str(exc)) from None


def show_result(recorded: RecordedRun, report: Report) -> None:
    """The latency line, and for a load run the throughput line."""
    run = recorded.run
    print(format_summary(report.summary))
    if (errors := format_errors(report.errors_by, report.summary.count)) is not None:
        print(errors)
    if run.metadata.mode is not LoadMode.SEQUENTIAL:
        row = throughput_row(run.records, report.detection.throttled_fraction)
        print(format_throughput(row, run.metadata.rate_rps))
    if report.fell_behind_words:
        print(report.fell_behind_words)


def draw_result(recorded: RecordedRun, report: Report, pictures_dir: Path) -> Path | None:
    """The run's picture, once any request was answered; a picture that cannot be written is
    one line that says where the raw data is (kept: it was written first)."""
    if not recorded.outcome.reached:
        return None
    run = recorded.run
    try:
        return plot_run(run, pictures_dir / f"{run.path.stem}.png", detection=report.detection)
    except FileWriteError as exc:
        raise FileWriteError(f"{exc} (the raw data is kept: {run.path}, metadata "
                             f"{recorded.meta_path})") from None


def check_folders(opts: argparse.Namespace, *, tables: bool = False) -> None:
    """``--data-dir`` and (unless ``--no-plot``, or with ``tables``: a sweep writes its tables
    there too) ``--pictures-dir`` can hold the files a run writes: a one-line ``CliError``
    before any request is sent when they cannot."""
    folders = [("--data-dir", opts.data_dir)]
    if tables or not getattr(opts, "no_plot", False):
        folders.append(("--pictures-dir", opts.pictures_dir))
    for flag, folder in folders:
        check_folder(flag, folder)


def cgroup_target(spec: str | None, pod_uid: str | None) -> CgroupTarget | None:
    """``--cgroup TARGET`` resolved to its group (a one-line ``CliError`` if it cannot be)."""
    if spec is None:
        if pod_uid is not None:
            raise CliError("--pod-uid goes with --cgroup k8s:NAMESPACE/POD")
        return None
    try:
        return resolve_cgroup(spec, pod_uid=pod_uid)
    except CgroupTargetError as exc:
        raise CliError(str(exc)) from None


def run_cgroup(spec: str | None, pod_uid: str | None) -> CgroupTarget | AgentLink | None:
    """A run's ``--cgroup``: the group's files here, or for a pod whose group is not on this
    machine, the way to its node's agent (its timeline marks the run once it is over)."""
    if spec is None or not spec.startswith("k8s:"):
        return cgroup_target(spec, pod_uid)
    try:
        found = locate(spec, lambda s: resolve_cgroup(s, pod_uid=pod_uid))
        return found if isinstance(found, CgroupTarget) else agent_link(found)
    except CgroupTargetError as exc:
        raise CliError(str(exc)) from None
    except AgentTimelineError as exc:
        raise CliError(f"--cgroup {spec}: {exc}") from None


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    """``--live [PORT]`` and ``--live-host ADDRESS``: the live page of a run (``run``), or of
    the group alone (``watch``, ``record``)."""
    parser.add_argument("--live", nargs="?", type=int_in(0, 65535), const=DEFAULT_PORT,
                        metavar="PORT",
                        help="watch the run in a browser while it goes: serve a page on "
                        f"http://{DEFAULT_HOST}:PORT/ (default {DEFAULT_PORT}; 0: any free "
                        "port) until the run ends")
    parser.add_argument("--live-host", metavar="ADDRESS",
                        help=f"with --live: serve on this address (default {DEFAULT_HOST}; "
                        "0.0.0.0 lets other machines see the page)")


@contextmanager
def live_page(opts: argparse.Namespace, what: str = "the run",
              window_s: float | None = None) -> Iterator[LivePage | None]:
    """The page server of ``add_live_arguments``' options while inside (None without
    ``--live``); stopped when left. ``window_s``: the page shows only the group's last
    seconds (a watch). The address goes to stderr (stdout keeps the command's own lines); a
    port that cannot be served is a one-line ``CliError`` before anything is sent."""
    if opts.live is None:
        if opts.live_host is not None:
            raise CliError("--live-host goes with --live")
        yield None
        return
    try:
        page = LivePage(opts.live_host or DEFAULT_HOST, opts.live, window_s=window_s)
    except LiveError as exc:
        raise CliError(str(exc)) from None
    with page:
        print(f"live page of {what}: {page.url}", file=sys.stderr, flush=True)
        yield page


def show_healthy(target: Target | ReplicaSet, seconds: float) -> None:
    """The line a sweep prints once a target it started answers."""
    print(f"healthy after {seconds:.1f} s ({target.ident})", flush=True)


def show_stopped(words: str) -> None:
    """From what a stopped target said, the cpu-quota supervisor's cpu.stat line, if any."""
    summary = [line for line in words.splitlines() if "periods" in line and "throttled" in line]
    if summary:
        print(summary[-1].strip(), flush=True)


def add_target_arguments(parser: argparse.ArgumentParser, *, per: str = "") -> None:
    """``--backend``, ``--period-ms``, ``--burst-ms``, ``--image``: how the commands that start
    the service themselves (sweep, advise) limit it."""
    parser.add_argument("--backend", choices=(AUTO, *BACKENDS), default=AUTO,
                        help="kernel: burn-service --cpus (a real cgroup quota; root); "
                        "inprocess: burn-service --cpu-limit (anywhere); docker: docker run "
                        "--cpus; auto: kernel where permitted, else inprocess (default)")
    parser.add_argument("--period-ms", type=period_ms, default=None, metavar="P",
                        help=f"the quota's period in ms{per} (default 100; a recorded "
                        "window's replay: the record's)")
    parser.add_argument("--burst-ms", type=number_at_least(0), default=0.0, metavar="B",
                        help=f"burst{per}, in ms, at most one quota (kernel backend; default 0)")
    parser.add_argument("--image", default=None,
                        help="docker image for --backend docker (default $THROTTLE_LAB_IMAGE "
                        "or throttle-lab:latest)")
    parser.add_argument("--start-timeout", type=number_above(0), default=None, metavar="S",
                        help="seconds to wait for each started service to answer /healthz "
                        "(default 30 + 1.5 / CPUs: a tight quota slows its start-up; give more "
                        "on a slow machine or for a big fleet)")


def backend_from(opts: argparse.Namespace) -> tuple[Backend, str | None]:
    """The backend of ``add_target_arguments``' options, and why not the kernel (for auto)."""
    options = TargetOptions(**({"image": opts.image} if opts.image else {}),
                            start_timeout=opts.start_timeout)
    return resolve_backend(opts.backend, options)
