"""``http-timing``: a drop-in for the original ``http-timing.py``, plus ``plot`` and ``report``.

    http-timing [run] [--url URL] [--iterations N] [--requests N] ...   time requests, save raw data
                [--concurrency C | --rate R --duration D]               closed / open loop
    http-timing plot FILE...                                            redraw pictures
    http-timing report FILE [--json] [--predict]                        statistics, throttling
    http-timing predict --service-ms S --cpus X                         the quota model
    http-timing compare A B C... [-o PICTURE]                           runs side by side
    http-timing sweep --cpus 1,0.3,0.1 --backend kernel|inprocess|docker start, time, compare

Run, raw data file, report/plot: each step usable alone (the shape of vegeta's run/report/plot).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from client import __version__
from client.explain import add_report_arguments, command_compare, command_predict, print_report
from client.load import LoadPlan, LoadPlanError, time_plan
from client.options import CliError, OneLineParser, int_at_least, number_above
from client.plot import plot_run
from client.progress import RunProgress
from client.rawdata import RawDataError, RequestRecord, Run, RunWriter, read_run, write_metadata
from client.stats import Summary, summarize
from client.throughput import throughput_row
from client.timing import RunOutcome, build_url, fetch_limits, format_line, warm_up

__all__ = ["main"]

DEFAULT_URL = "http://localhost:7800/cpuBurnFlow"
EXIT_OK, EXIT_FAILED_REQUESTS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_run_parser(prog: str = "http-timing") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Time HTTP requests one after another and keep every request as raw data. "
        "Other commands: 'http-timing plot FILE...', 'http-timing report FILE', "
        "'http-timing sweep --cpus 1,0.3,0.1' (see each one's --help).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"URL to time (default {DEFAULT_URL})")
    parser.add_argument("--iterations", type=int_at_least(0), default=5000,
                        help="appended as ?iterations=N when N > 0 (default 5000)")
    parser.add_argument("--requests", type=int_at_least(1), default=None,
                        help="how many requests (default 100)")
    parser.add_argument("--concurrency", type=int_at_least(1), metavar="C",
                        help="closed loop: C requests at a time, each worker sending its next "
                        "when the previous is answered (default: one after another)")
    parser.add_argument("--rate", type=number_above(0), metavar="R",
                        help="open loop: R requests per second whatever the answers; latency "
                        "counts from each request's intended send time (like wrk2)")
    parser.add_argument("--duration", type=number_above(0), metavar="D",
                        help="seconds to run, with --rate or --concurrency (instead of "
                        "--requests)")
    parser.add_argument("--new-connection", action="store_true",
                        help="open a new connection for every request, as the original did "
                        "(default: one keep-alive connection)")
    parser.add_argument("--timeout", type=number_above(0), default=30.0,
                        help="seconds before one request counts as failed (default 30)")
    parser.add_argument("--warmup", type=int_at_least(0), default=0, metavar="N",
                        help="send N requests first that are not recorded (default 0: the "
                        "first recorded request pays the server's warm-up, as in the original)")
    parser.add_argument("--max-failures", type=int_at_least(0), default=5,
                        help="stop after this many connection failures in a row; 0 never stops "
                        "(default 5)")
    parser.add_argument("--name", help="name of the run's files (default: run-<timestamp>)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"),
                        help="where <name>.csv and <name>.json go (default ./raw-data)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"),
                        help="where <name>.png goes (default ./pictures)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the picture")
    parser.add_argument("--quiet", action="store_true", help="no per-request lines")
    return parser


def build_plot_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="http-timing plot",
                                     description="Draw saved runs (CSV, or the original script's "
                                     "text output) as dots of latency against time.")
    parser.add_argument("files", nargs="+", type=Path, help="run files (.csv, .json or text)")
    parser.add_argument("-o", "--output", type=Path,
                        help="picture path (one input only; default <pictures-dir>/<name>.png)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"))
    parser.add_argument("--title", help="picture title")
    return parser


def build_report_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="http-timing report",
                           description="Latency statistics of a saved run, which requests were "
                           "throttled, and (--predict) what the quota model says.")
    parser.add_argument("file", type=Path, help="run file (.csv, .json or text capture)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_report_arguments(parser)
    return parser


SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in SUBCOMMANDS:
            return SUBCOMMANDS[args[0]](args[1:])
        if args and args[0] == "run":
            args = args[1:]
        return command_run(args)
    except (CliError, RawDataError) as exc:
        print(f"http-timing: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader of our output went away (`... | head`)
        _silence_stdout()
        return EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null so later prints (and Python's exit flush) do not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop and keep what was collected."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated()


def command_run(argv: list[str]) -> int:
    opts = build_run_parser().parse_args(argv)
    try:
        plan = LoadPlan.from_options(requests=opts.requests, concurrency=opts.concurrency,
                                     rate=opts.rate, duration=opts.duration)
    except LoadPlanError as exc:
        raise CliError(str(exc)) from None
    opts.requests = plan.requests
    started = datetime.now(timezone.utc)
    name = opts.name or "run-" + started.strftime("%Y%m%d-%H%M%S")
    if os.sep in name or (os.altsep and os.altsep in name) or name in ("", ".", ".."):
        raise CliError(f"--name must be a plain file name (got {name!r})")
    url = build_url(opts.url, opts.iterations)
    if not url.startswith(("http://", "https://")):
        raise CliError(f"--url must start with http:// or https:// (got {opts.url!r})")
    csv_path = opts.data_dir / f"{name}.csv"
    meta_path = csv_path.with_suffix(".json")
    metadata: dict[str, Any] = {
        "name": name, "tool": "http-timing", "version": __version__,
        "url": url, "iterations": opts.iterations, **plan.to_metadata(),
        "new_connection": opts.new_connection, "timeout_s": opts.timeout, "warmup": opts.warmup,
        "started_at": started.isoformat(), "host": socket.gethostname(),
        "platform": platform.platform(), "python": platform.python_version(),
        "command": ["http-timing", *argv], "limits": fetch_limits(opts.url),
    }
    try:
        writer = RunWriter(csv_path)
        write_metadata(meta_path, metadata)
    except OSError as exc:
        raise CliError(f"cannot write raw data in {opts.data_dir}: {exc.strerror or exc}") from None

    progress = RunProgress(plan.requests, name)

    def on_record(record: RequestRecord) -> None:
        writer.write(record)
        if not opts.quiet:
            try:
                print(format_line(record), flush=True)
            except BrokenPipeError:  # `http-timing | head`: keep measuring and saving, quietly
                _silence_stdout()
                opts.quiet = True
        progress.advance(record)

    outcome = RunOutcome()
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        warm_up(url, opts.warmup, new_connection=opts.new_connection, timeout=opts.timeout)
        with progress:
            time_plan(url, plan, on_record, new_connection=opts.new_connection,
                      timeout=opts.timeout, max_consecutive_failures=opts.max_failures,
                      outcome=outcome)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
        writer.close()
    return _finish(opts, metadata, csv_path, meta_path, outcome, interrupted)


def _finish(opts: argparse.Namespace, metadata: dict[str, Any], csv_path: Path, meta_path: Path,
            outcome: RunOutcome, interrupted: bool) -> int:
    # Ignore a second Ctrl-C while the files are completed, so they are not left half done.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        records = outcome.records
        summary = summarize(records)
        metadata.update(ended_at=datetime.now(timezone.utc).isoformat(), completed=len(records),
                        interrupted=interrupted, stop_reason=outcome.stop_reason,
                        summary=summary.to_dict())
        write_metadata(meta_path, metadata)
        if records:
            total_ms = int(summary.total_ms)
            print(f"{len(records)} requests in {total_ms}ms avg "
                  f"{summary.total_ms / len(records):.1f}ms")
            print(format_summary(summary))
            if metadata.get("mode", "sequential") != "sequential":
                print(format_throughput(records, metadata))
        picture = None
        if records and not opts.no_plot and outcome.reached:
            picture = plot_run(Run(csv_path, records, metadata),
                               opts.pictures_dir / f"{csv_path.stem}.png")
        print(f"raw data: {csv_path} (metadata {meta_path})" +
              (f", picture: {picture}" if picture else ""))
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        print(f"http-timing: interrupted after {len(records)} of {opts.requests or 'the'} requests; "
              "every completed request is saved", file=sys.stderr)
        return EXIT_INTERRUPTED
    if records and not outcome.reached:
        print(f"http-timing: cannot reach {metadata['url']}: {records[-1].error} "
              "(is the service running? start it with: burn-service)", file=sys.stderr)
        return EXIT_USAGE
    if outcome.stop_reason:
        print(f"http-timing: {outcome.stop_reason}: {records[-1].error}", file=sys.stderr)
    return EXIT_FAILED_REQUESTS if summary.errors else EXIT_OK


def format_summary(summary: Summary) -> str:
    def ms(v: float) -> str:
        return "n/a" if v != v else f"{v:.2f}"
    return (f"latency ms: p50 {ms(summary.p50_ms)}  p90 {ms(summary.p90_ms)}  "
            f"p99 {ms(summary.p99_ms)}  max {ms(summary.max_ms)}  mean {ms(summary.mean_ms)}  "
            f"errors {summary.errors} of {summary.count}")


def format_throughput(records: Sequence[RequestRecord], metadata: dict[str, Any]) -> str:
    """``throughput 58.3 requests/s (intended 100/s), 0.0 % errors`` for load runs."""
    row = throughput_row(records)
    rate = metadata.get("rate_rps")
    intended = f" (intended {rate:g}/s)" if isinstance(rate, (int, float)) else ""
    return (f"throughput {row.rps:.1f} requests/s{intended}, "
            f"{100 * row.error_rate:.1f} % errors")


def command_sweep(argv: list[str]) -> int:
    from client.sweep import command_sweep as sweep  # imported late: it builds on this module

    return sweep(argv)


def command_plot(argv: list[str]) -> int:
    opts = build_plot_parser().parse_args(argv)
    if opts.output and len(opts.files) > 1:
        raise CliError("-o/--output takes one input file; use --pictures-dir for several")
    runs = [read_run(f) for f in opts.files]  # read all first: a bad file fails before drawing
    for run in runs:
        out = opts.output or opts.pictures_dir / f"{run.path.stem}.png"
        print(plot_run(run, out, title=opts.title))
    return EXIT_OK


def command_report(argv: list[str]) -> int:
    opts = build_report_parser().parse_args(argv)
    run = read_run(opts.file)
    print_report(run, opts, format_summary)  # client.explain: throttling, --predict
    return EXIT_OK


SUBCOMMANDS.update(plot=command_plot, report=command_report, sweep=command_sweep,
                   predict=command_predict, compare=command_compare)

if __name__ == "__main__":
    sys.exit(main())
