"""``http-timing [run]``: time requests like the original ``http-timing.py`` and keep every one.

Prints the original's line per request, then ``<N> requests in <total>ms avg <avg>ms``, the
percentiles (and the throughput of a load run), and where the raw data and picture went.
Exit codes: 0 all succeeded; 1 some failed (recorded: no answer, or a status ``--ok-status``
does not count a success, by default any outside [200, 400)); 2 bad usage, or the service was
never reachable or never answered readably; 130 interrupted (what was collected is saved).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from client.analysis.detect import ThrottleSource
from client.analysis.report import Report, build_report
from client.commands.common import (EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EXIT_OK,
                                    EXIT_USAGE, add_live_arguments, add_load_arguments,
                                    check_folders, draw_result, live_page, plan_from,
                                    run_cgroup, show_result, silence_stdout)
from client.commands.options import CliError, OneLineParser, int_at_least, number_above
from client.data.naming import check_file_name
from client.data.formats.legacy import format_line
from client.data.record import RequestRecord
from client.data.status import DEFAULT_OK_STATUS, StatusRule, StatusRuleError
from client.render.live import LivePage, show_live_end
from client.render.progress import RunProgress
from client.render.text import format_held
from client.run.cgroup_sampler import DEFAULT_INTERVAL
from client.run.agent_marks import mark_through_agent
from client.run.agent_timeline import AgentLink, AgentTimelineError
from client.run.service_group import ServiceGroup
from client.data.request import RequestError, redact_command
from client.run.http import TlsError, tls_verify
from client.run.measure import measure
from client.run.reach import closed_without_answer, is_burn_service_default, unreachable
from client.run.record import RecordedRun, RunSpec
from client.run.recorder import files_first
from client.run.request_flags import requests_from_flags
from client.run.answer import answered
from cpuquota.limit import NO_QUOTA

__all__ = ["DEFAULT_URL", "add_answer_arguments", "build_run_parser", "command_run",
           "throttling_line"]

DEFAULT_URL = "http://localhost:7800/cpuBurnFlow"


def build_run_parser(prog: str = "http-timing") -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog,
        description="Time HTTP requests one after another and keep every request as raw data "
        "(what http-timing does when given no command). Every command: http-timing help.",
    )
    parser.add_argument("--url", default=None,
                        help=f"URL to time, sent exactly as given (default {DEFAULT_URL}; "
                        "burn-service's /cpuBurnFlow gets ?iterations=N)")
    parser.add_argument("-X", "--method", help="the request's method (default GET; POST with -d)")
    parser.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'",
                        help="a header to send (repeatable); it replaces the client's own of "
                        "that name")
    parser.add_argument("-d", "--data", metavar="TEXT|@FILE",
                        help="the request's body: TEXT, @FILE's bytes, or @- for stdin "
                        "(Content-Length set; the method becomes POST unless -X says)")
    parser.add_argument("--targets", type=Path, metavar="FILE",
                        help="send the requests of FILE round-robin, in vegeta's http format "
                        "(METHOD URL, header lines, an optional @body-file line, a blank line "
                        "between targets); each request's target is in the CSV")
    parser.add_argument("--redact", action="append", default=[], metavar="NAME",
                        help="also keep this header's value out of every file written "
                        "(Authorization, Proxy-Authorization and Cookie always are)")
    add_load_arguments(parser, iterations_default=None)
    parser.add_argument("--new-connection", action="store_true",
                        help="open a new connection for every request, as the original did "
                        "(default: one keep-alive connection)")
    tls = parser.add_mutually_exclusive_group()
    tls.add_argument("--cacert", type=Path, metavar="FILE",
                     help="an https:// server's certificate is checked against the CA(s) in "
                     "this PEM file (a private CA, or the server's self-signed certificate) "
                     "instead of the usual ones")
    tls.add_argument("-k", "--insecure", action="store_true",
                     help="do not check an https:// server's certificate at all (as curl -k)")
    add_answer_arguments(parser)
    parser.add_argument("--max-failures", type=int_at_least(0), default=5, metavar="N",
                        help="stop after this many connection failures in a row; 0 never stops "
                        "(default 5)")
    parser.add_argument("--cgroup", metavar="TARGET",
                        help="also read the service's own cgroup during the run, to mark each "
                        "request with the throttling it met: a cgroup directory, pid:PID, "
                        "docker:NAME_OR_ID or k8s:NAMESPACE/POD[/CONTAINER] (usually needs "
                        "root)")
    parser.add_argument("--cgroup-interval", type=number_above(0), default=DEFAULT_INTERVAL,
                        metavar="S", help="seconds between two samples of the cgroup "
                        f"(default {DEFAULT_INTERVAL:g}: {1 / DEFAULT_INTERVAL:g} per second)")
    parser.add_argument("--pod-uid", metavar="UID",
                        help="with --cgroup k8s:...: the pod's UID, where kubectl cannot tell")
    parser.add_argument("--name", help="name of the run's files (default: run-<timestamp>)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"), metavar="DIR",
                        help="where <name>.csv and <name>.json go (default ./raw-data)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"), metavar="DIR",
                        help="where <name>.png goes (default ./pictures)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the picture")
    parser.add_argument("--quiet", action="store_true", help="no per-request lines")
    add_live_arguments(parser)
    return parser


def add_answer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ok-status`` and ``--follow-redirects``: what is made of an answer
    (``client.data.status``, ``client.run.redirects``)."""
    parser.add_argument("--ok-status", default=DEFAULT_OK_STATUS, metavar="LIST",
                        help="the statuses counted as successes, e.g. 200-299 (redirects are "
                        "errors) or 200-399,404; every answer is timed and kept with its "
                        f"status whatever it is (default {DEFAULT_OK_STATUS}, as vegeta)")
    parser.add_argument("--follow-redirects", type=int_at_least(0), default=0, metavar="N",
                        help="follow up to N redirects inside the request's time, as curl -L "
                        "(default 0: a 3xx is the answer, timed and kept with its status)")


def throttling_line(report: Report, cgroup: Mapping[str, Any] | None) -> str | None:
    """The last line of a ``--cgroup`` run: what the group's counters say over the run
    (None: no group watched, or no timeline)."""
    c, d = report.cgroup, report.detection
    if cgroup is None or c is None or c.samples < 2:
        return None
    where = f"throttling in {cgroup.get('spec') or cgroup.get('path')}" + (
        f" ({cgroup['source']})" if cgroup.get("source") else "")
    known = c.usage_unknown is None
    used = f"CPU used {c.usage_cpus_mean:.2f}" if known else \
        f"CPU used: not known ({c.usage_unknown})"
    if c.quota_cpus is None:
        whole = " (the root group: the whole machine's)" if cgroup.get("group") in ("", "/") \
            else ""
        return (f"{where}: {NO_QUOTA} (none on this group or above): none counted; {used}"
                + (f" CPU{whole}" if known else ""))
    delayed = d.throttled_count if d.source is ThrottleSource.CGROUP else c.throttled_requests
    held = f", {format_held(d.held)}" if d.held and d.source is ThrottleSource.CGROUP else ""
    share = f" ({100 * delayed / d.count:.1f} %{held})" if d.count else ""
    cpus = f"{c.quota_cpus:.2f}" if round(c.quota_cpus, 2) == c.quota_cpus else \
        f"{c.quota_cpus:g}"   # 0.30 beside "used 0.28"; 0.125 whole
    quota = f" of the {cpus} CPU quota" if known else f" (quota {cpus} CPU)"
    return (f"{where}: {delayed} of {d.count} requests delayed by throttling{share}, "
            f"{c.nr_throttled} of {c.nr_periods} periods throttled, {used}{quota}")


class LinePrinter:
    """Prints the original's line per request, until the reader of our output goes away
    (``http-timing | head``): then it keeps quiet and the run goes on, measuring and saving."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, record: RequestRecord) -> None:
        if self.quiet:
            return
        try:
            print(format_line(record), flush=True)
        except BrokenPipeError:
            silence_stdout()
            self.quiet = True


def command_run(argv: list[str]) -> int:
    opts = build_run_parser().parse_args(argv)
    plan = plan_from(opts)
    check_folders(opts)
    started = datetime.now(timezone.utc)
    name = opts.name or "run-" + started.strftime("%Y%m%d-%H%M%S")
    if problem := check_file_name(name):
        raise CliError(problem)
    try:
        asked = requests_from_flags(opts.url, default_url=DEFAULT_URL, method=opts.method,
                                    headers=opts.header, data=opts.data, targets=opts.targets,
                                    iterations=opts.iterations)
    except RequestError as exc:
        raise CliError(str(exc)) from None
    url = asked.request.url
    try:
        ok_status = replace(StatusRule.parse(opts.ok_status), follow=opts.follow_redirects)
    except StatusRuleError as exc:
        raise CliError(str(exc)) from None
    try:
        verify = tls_verify(opts.cacert, opts.insecure)
    except TlsError as exc:
        raise CliError(str(exc)) from None
    watched = run_cgroup(opts.cgroup, opts.pod_uid)
    spec = RunSpec(url=url, plan=plan, name=name, data_dir=opts.data_dir,
                   iterations=asked.iterations,
                   command=["http-timing", *redact_command(argv, opts.redact)],
                   new_connection=opts.new_connection, timeout=opts.timeout, warmup=opts.warmup,
                   max_failures=opts.max_failures, ask_limits=asked.burn_service,
                   request=asked.request if asked.custom and not asked.targets else None,
                   targets=asked.targets, redact=frozenset(opts.redact),
                   cgroup=watched if isinstance(watched, ServiceGroup) else None,
                   cgroup_interval=opts.cgroup_interval, verify=verify, ok_status=ok_status)
    with live_page(opts) as live:   # its options' errors first (a usage error)
        for target_url in dict.fromkeys([url, *(t.url for t in asked.targets)]):
            if (problem := unreachable(target_url, verify, min(opts.timeout, 5.0))) is not None:
                print(f"http-timing: cannot reach {target_url}: {problem}"
                      + (" (is burn-service running? start it with: burn-service)"
                         if is_burn_service_default(target_url) else ""), file=sys.stderr)
                return EXIT_USAGE
        if spec.cgroup is not None and (note := spec.cgroup.no_limit) is not None:
            print(f"http-timing: {note}", file=sys.stderr, flush=True)
        recorded = measure(spec, progress=RunProgress(plan.requests, name),
                           observers=[LinePrinter(opts.quiet)], started=started,
                           watcher=live).recorded
        if isinstance(watched, AgentLink):
            try:
                recorded.run = mark_through_agent(watched, recorded.run)
            except AgentTimelineError as exc:
                print(f"http-timing: --cgroup {watched.ref}: {exc}: the run is kept unmarked",
                      file=sys.stderr)
        return finish(recorded, opts, live)


def finish(recorded: RecordedRun, opts: argparse.Namespace, live: LivePage | None = None) -> int:
    """Print what the run gives, draw it, and say how it ended (the exit code)."""
    run, records = recorded.run, recorded.run.records
    with files_first():  # a second Ctrl-C does not cut the picture short
        report = build_report(run)
        if records:
            # the original's line; avg is the requests' mean latency (the original's, for its
            # sequential runs), never wall time / requests (under concurrency they overlap)
            total_ms, mean_ms = report.summary.total_ms, report.summary.mean_ms
            print(f"{len(records)} requests in {int(total_ms)}ms avg "
                  + ("n/a" if mean_ms != mean_ms else f"{mean_ms:.1f}ms"))
            show_result(recorded, report)
        # no picture of a run without a single answer: there is nothing to see in it
        picture = (None if opts.no_plot or not any(r.ok for r in records) else
                   draw_result(recorded, report, opts.pictures_dir))
        show_live_end(live, recorded, report.detection, picture)
        print(f"raw data: {run.path} (metadata {recorded.meta_path})" +
              (f", picture: {picture}" if picture else ""))
        if (ending := throttling_line(report, run.metadata.cgroup)) is not None:
            print(ending)
    if recorded.interrupted:
        print(f"http-timing: interrupted after {len(records)} of "
              f"{run.metadata.requests or 'the'} requests; every completed request is saved",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if records and not recorded.outcome.reached and answered(records[-1].error):
        print(f"http-timing: {run.metadata.url} answered, but its reply could not be read "
              f"as HTTP/1.1: {records[-1].error}", file=sys.stderr)
        return EXIT_USAGE
    if records and not recorded.outcome.reached and closed_without_answer(records[-1].error):
        print(f"http-timing: {run.metadata.url} closed the connection without an answer: "
              f"{records[-1].error} (something listens there, but sent no HTTP answer: is it "
              "the service's HTTP port?)", file=sys.stderr)
        return EXIT_USAGE
    if records and not recorded.outcome.reached:
        error = records[-1].error
        hint = ("the server's certificate is not trusted here: --cacert FILE trusts the CA "
                "that signed it, --insecure skips the check" if "CERTIFICATE_VERIFY_FAILED"
                in error else "is burn-service running? start it with: burn-service"
                if is_burn_service_default(run.metadata.url or "") else
                "is the service running and listening there?")
        print(f"http-timing: cannot reach {run.metadata.url}: {error} ({hint})",
              file=sys.stderr)
        return EXIT_USAGE
    if recorded.outcome.stop_reason:
        print(f"http-timing: {recorded.outcome.stop_reason}: {records[-1].error}",
              file=sys.stderr)
    return EXIT_FAILED_REQUESTS if report.summary.errors else EXIT_OK
