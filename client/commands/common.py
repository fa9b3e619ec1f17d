"""What the commands share: exit codes, a quiet stdout when the reader went away, the
options that describe a CPU limit (``--cpus``, ``--period-ms``, ``--burst-ms``), the
``--cgroup TARGET`` of a group to watch, ``--live [PORT]`` (the page's server while a command
works, :func:`live_page`), and those of ``advise``/``sweep`` on a running service (``--cgroup
TARGET --url URL``: which group, what each run sends, the safety catches
``--allow-new-limit``, ``--keep``) with the service at a limit they name
(:func:`at_limit_from`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

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
from client.run.service_group import ServiceGroup, ServiceGroupError, resolve_cgroup
from client.run.plan import DEFAULT_REQUESTS, LoadPlan, LoadPlanError
from client.run.pod_reach import locate
from client.run.record import RecordedRun
from client.run.targets import AUTO, BACKENDS, Backend, Target, TargetOptions, resolve_backend
from client.run.targets.replicas import ReplicaSet
from client.run.cgroup_sampler import DEFAULT_INTERVAL
from cpuquota.limit import MAX_PERIOD_MS, MIN_PERIOD_MS, Limit, LimitError

if TYPE_CHECKING:
    from client.run.at_limit import AtLimit

__all__ = ["EXIT_FAILED_REQUESTS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE",
           "add_inplace_arguments", "add_limit_arguments", "add_live_arguments",
           "add_load_arguments", "add_target_arguments", "at_limit_from", "backend_from",
           "service_group", "check_folders", "check_inplace_options", "draw_result",
           "limit_from", "live_page", "period_ms", "plan_from", "run_cgroup",
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


def service_group(spec: str | None, pod_uid: str | None) -> ServiceGroup | None:
    """``--cgroup TARGET`` resolved to its group (a one-line ``CliError`` if it cannot be)."""
    if spec is None:
        if pod_uid is not None:
            raise CliError("--pod-uid goes with --cgroup k8s:NAMESPACE/POD")
        return None
    try:
        return resolve_cgroup(spec, pod_uid=pod_uid)
    except ServiceGroupError as exc:
        raise CliError(str(exc)) from None


def run_cgroup(spec: str | None, pod_uid: str | None) -> ServiceGroup | AgentLink | None:
    """A run's ``--cgroup``: the group's files here, or for a pod whose group is not on this
    machine, the way to its node's agent (its timeline marks the run once it is over)."""
    if spec is None or not spec.startswith("k8s:"):
        return service_group(spec, pod_uid)
    try:
        found = locate(spec, lambda s: resolve_cgroup(s, pod_uid=pod_uid))
        return found if isinstance(found, ServiceGroup) else agent_link(found)
    except ServiceGroupError as exc:
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


def add_inplace_arguments(parser: argparse.ArgumentParser, *, keep: bool) -> None:
    group = parser.add_argument_group(
        "a running service (its limit changed in place, put back at the end)")
    group.add_argument("--cgroup", metavar="TARGET",
                       help="the running service's group: a cgroup directory, pid:PID, "
                       "docker:NAME_OR_ID or k8s:NAMESPACE/POD; each run sets the limit there "
                       "(the quota file; docker update --cpus; the pod's resize subresource) "
                       "and reads the group's throttling (needs root; a pod on another node: "
                       "through its node's agent, with a kubeconfig alone)")
    group.add_argument("--k8s", metavar="NS/deployment/NAME",
                       help="instead of --cgroup: the running pods of a Kubernetes Deployment "
                       "(each resized alike in place with pods/resize, their groups sampled "
                       "as one sum; --url a Service's or an Ingress's address the host "
                       "reaches, spreading the requests over the pods)")
    group.add_argument("--container", metavar="NAME",
                       help="with a pod: the container whose cpu limit is changed (where a "
                       "pod has several and only one has a cpu limit, or serves the URL's "
                       "port, that one; else needed)")
    group.add_argument("--allow-restart", action="store_true",
                       help="with a pod: resize a container whose resizePolicy for cpu is "
                       "RestartContainer (it restarts at each limit)")
    group.add_argument("--url", default=None,
                       help="with --cgroup: the URL each run times, sent as given")
    group.add_argument("-X", "--method", help="the request's method (default GET; POST with -d)")
    group.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'",
                       help="a header to send (repeatable)")
    group.add_argument("-d", "--data", metavar="TEXT|@FILE",
                       help="the request's body: TEXT, @FILE's bytes, or @- for stdin")
    group.add_argument("--targets", type=Path, metavar="FILE",
                       help="send the requests of FILE round-robin (vegeta's http format)")
    group.add_argument("--redact", action="append", default=[], metavar="NAME",
                       help="also keep this header's value out of every file written")
    tls = group.add_mutually_exclusive_group()
    tls.add_argument("--cacert", type=Path, metavar="FILE",
                     help="check an https:// server's certificate against this PEM file")
    tls.add_argument("-k", "--insecure", action="store_true",
                     help="do not check an https:// server's certificate (as curl -k)")
    group.add_argument("--cgroup-interval", type=number_above(0), default=DEFAULT_INTERVAL,
                       metavar="S", help=f"seconds between two samples of the group (default "
                       f"{DEFAULT_INTERVAL:g})")
    group.add_argument("--allow-new-limit", action="store_true",
                       help="the group has no limit now: let the runs set one (none again at "
                       "the end)")
    if keep:
        group.add_argument("--keep", action="store_true",
                           help="leave the answer in force at the end (default: the limit the "
                           "service had; also on an error or Ctrl-C)")
        group.add_argument("--apply", action="store_true",
                           help="with a pod of a Deployment: patch the Deployment with the "
                           "answer at the end (this rolls out new pods)")
        group.add_argument("--despite-vpa", action="store_true",
                           help="go on though a VerticalPodAutoscaler in an updating mode "
                           "(Auto, Recreate, InPlaceOrRecreate) targets the workload: it "
                           "will change the limit again (default: stop, in one line)")


def check_inplace_options(opts: argparse.Namespace) -> bool:
    """Whether the options name a running service (``--cgroup``, ``--k8s``); ``--url`` and
    the request flags only go with one, and it needs ``--url`` (or ``--targets``)."""
    given = [flag for flag, value in (("--url", opts.url), ("-X", opts.method),
                                      ("-d", opts.data), ("--targets", opts.targets),
                                      ("-H", opts.header or None), ("--cacert", opts.cacert),
                                      ("--allow-new-limit", opts.allow_new_limit or None),
                                      ("--container", opts.container),
                                      ("--allow-restart", opts.allow_restart or None),
                                      ("--keep", getattr(opts, "keep", False) or None),
                                      ("--apply", getattr(opts, "apply", False) or None))
             if value is not None]
    if opts.k8s is not None and opts.cgroup is not None:
        raise CliError("--k8s NS/deployment/NAME and --cgroup TARGET: give one of them")
    if opts.cgroup is None and opts.k8s is None:
        if given:
            raise CliError(f"{given[0]} goes with --cgroup TARGET (a running service); without "
                           "it the command starts burn-service itself")
        return False
    flag = "--cgroup TARGET" if opts.k8s is None else "--k8s NS/deployment/NAME"
    if opts.url is None and opts.targets is None:
        raise CliError(f"{flag} needs --url URL (or --targets FILE): what to time")
    return True


def at_limit_from(opts: argparse.Namespace, argv: list[str], command: str, plan: LoadPlan, *,
                  on_started: Callable[[Target | ReplicaSet, float], None] | None = None,
                  on_stopped: Callable[[str], None] | None = None
                  ) -> tuple[AtLimit, str | None]:
    """The service at a limit the options name: the running one changed in place
    (``client.advise.services``), or burn-service started by ``--backend`` for each run of
    ``plan`` (the hooks show each service started and stopped); and, for ``auto``, why not
    the kernel's quota. Bad input is a one-line ``CliError``."""
    from client.advise import AdviseError
    from client.advise.services import Running, open_running
    from client.run.at_limit import StartedService
    from client.run.measure import Traffic

    if check_inplace_options(opts):
        running = Running(
            opts.cgroup, opts.k8s, opts.container, opts.url, opts.method, opts.header,
            opts.data, opts.targets, opts.redact, opts.cacert, opts.insecure,
            opts.cgroup_interval, opts.allow_new_limit, opts.allow_restart)
        try:
            return open_running(running, ["http-timing", command, *argv],
                                iterations=opts.iterations, timeout=opts.timeout,
                                warmup=opts.warmup,
                                say=lambda line: print(f"{command}: {line}", file=sys.stderr,
                                                       flush=True)), None
        except AdviseError as exc:
            raise CliError(str(exc)) from None
    backend, why_not_kernel = backend_from(opts)
    load = Traffic(plan, opts.iterations, opts.timeout, opts.warmup)
    return StartedService(backend, load, ("http-timing", command, *argv),
                          on_started=on_started, on_stopped=on_stopped), why_not_kernel
