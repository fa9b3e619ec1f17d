"""``http-timing watch TARGET``: the live ``top`` of one group's CPU throttling.

    http-timing watch TARGET [--interval 1] [--count N] [--json] [--pod-uid UID]

TARGET as for ``--cgroup``: a cgroup directory, ``pid:PID``, ``docker:NAME`` or
``k8s:NAMESPACE/POD[/CONTAINER]``. Each interval: periods, periods throttled, throttled time,
CPUs used and their share of the quota in force at the interval's end (read each time: an
in-place resize, ``docker update --cpus``, shows at once), and the thread names that spent the
most CPU in it (``client.run.thread_usage``; where threads cannot be seen, one line says why
and the rest goes on). A table refreshed in place on a terminal; one JSON object per line (per
interval) with ``--json`` or when the output is not a terminal.
Ctrl-C ends it (exit 0); a bad target is one line on stderr (exit 2).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from dataclasses import replace
from collections.abc import Callable

from rich.console import Console
from rich.live import Live

from client.analysis.cgroup import interval_stats
from client.analysis.quotas import QuotaSpan, in_force
from client.analysis.threads import top_between
from client.commands.exits import silence_stdout
from client.commands.live import add_live_arguments, live_page, watched_live
from client.commands.options import CliError, OneLineParser, int_at_least, number_above
from client.render.watch import WatchRow, json_line, watch_table
from client.data.threads import ThreadReading
from client.data.timeline import CgroupSample
from client.run.cgroup_sampler import CgroupReader, usage_note
from client.run.cgroup_target import CgroupTarget, CgroupTargetError, resolve_cgroup
from client.run.thread_usage import ThreadUsage
from cpuquota.limit import Limit

__all__ = ["build_parser", "command_watch"]

PROG = "http-timing watch"
EXIT_OK, EXIT_GONE, EXIT_USAGE = 0, 1, 2
TABLE_ROWS = 20
LIVE_WINDOW_S = 60.0   # --live: the page shows the group's last minute


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Watch a cgroup's CPU throttling live: "
                           "periods, periods throttled, throttled time and CPU used vs the "
                           "quota, per interval.")
    parser.add_argument("target", metavar="TARGET",
                        help="a cgroup directory, pid:PID, docker:NAME_OR_ID or "
                        "k8s:NAMESPACE/POD[/CONTAINER]")
    parser.add_argument("--interval", type=number_above(0), default=1.0, metavar="SECONDS",
                        help="seconds per line (default 1)")
    parser.add_argument("--count", type=int_at_least(1), metavar="N",
                        help="stop after N intervals (default: until Ctrl-C)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per line (the default when not on a terminal)")
    parser.add_argument("--pod-uid", metavar="UID",
                        help="the pod's uid for k8s:NS/POD where kubectl cannot tell it")
    add_live_arguments(parser)
    return parser


def command_watch(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        target = resolve_cgroup(args.target, pod_uid=args.pod_uid)
        reader = CgroupReader(target)
    except CgroupTargetError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"{PROG}: cannot open {args.target}'s counters: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    if (note := target.no_limit) is not None:
        print(f"{PROG}: {note}", file=sys.stderr, flush=True)
    try:
        with live_page(args, "the watch", window_s=LIVE_WINDOW_S) as live, \
                watched_live(live, target):
            return _show(args, target, reader)
    except CliError as exc:
        reader.close()
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _show(args: argparse.Namespace, target: CgroupTarget, reader: CgroupReader) -> int:
    as_json = args.json or not sys.stdout.isatty()
    try:
        if as_json:
            return _watch(target, reader, args.interval, args.count, _json_printer(target))
        console = Console()
        with Live(console=console, auto_refresh=False, transient=False) as live:
            return _watch(target, reader, args.interval, args.count, _table_printer(target, live))
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:   # `| head`: the reader left
        silence_stdout()
        return EXIT_OK
    finally:
        reader.close()



class TopThreads:
    """The group's threads read once an interval: who spent its CPU since the last reading.
    A problem is said once on stderr; one that stops the reading leaves the column empty."""

    def __init__(self, target: CgroupTarget) -> None:
        self.usage: ThreadUsage | None = ThreadUsage(
            [pod.directory for pod in target.pods] or [target.directory],
            target.usage_source.proc)
        self.last: ThreadReading | None = self._read()

    def _read(self) -> ThreadReading | None:
        if self.usage is None:
            return None
        try:
            reading = self.usage.read()
        except OSError as exc:
            self._say(f"stopped reading its threads: {exc.strerror or exc}")
            self.close()
            return None
        if self.usage.problem:
            self._say(self.usage.problem)
            self.usage.problem = ""   # said once
        return reading

    @staticmethod
    def _say(problem: str) -> None:
        print(f"{PROG}: {problem}", file=sys.stderr, flush=True)

    def top(self) -> tuple[tuple[str, int, float], ...] | None:
        """The top names since the last call (None: the threads are not read)."""
        before, self.last = self.last, self._read()
        if before is None or self.last is None:
            return None
        return tuple(top_between(before, self.last))

    def close(self) -> None:
        if self.usage is not None:
            self.usage.close()
            self.usage = None


def _watch(target: CgroupTarget, reader: CgroupReader, interval: float, count: int | None,
           show: Callable[[WatchRow, WatchRow], None]) -> int:
    """Read every ``interval`` (on a fixed grid, never drifting) and show each interval."""
    threads = TopThreads(target)
    try:
        return _watch_with(target, reader, interval, count, show, threads)
    finally:
        threads.close()


def _watch_with(target: CgroupTarget, reader: CgroupReader, interval: float,
                count: int | None, show: Callable[[WatchRow, WatchRow], None],
                threads: TopThreads) -> int:
    origin = time.perf_counter_ns()
    first = previous = reader.read(origin)
    step = round(interval * 1e9)
    shown = 0
    while count is None or shown < count:
        next_ns = origin + (shown + 1) * step
        delay = (next_ns - time.perf_counter_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        try:
            current = reader.read(origin)
        except OSError as exc:
            print(f"{PROG}: {target.directory} went away ({exc.strerror or exc}): the "
                  "service stopped?", file=sys.stderr)
            return EXIT_GONE
        unknown = usage_note(reader, target.usage_source.to_metadata())["unknown"]
        row = replace(_row(previous, current, target, unknown), top_threads=threads.top())
        show(row, _row(first, current, target, unknown))
        previous = current
        shown += 1
    return EXIT_OK


def limit_now(sample: CgroupSample, target: CgroupTarget) -> Limit | None:
    """The quota in force at ``sample`` (the tightest of the levels it read), else the one
    the target had when it was resolved."""
    found = in_force(sample.quotas)
    if found is None:
        return target.limit
    level, (quota, period) = found
    burst = target.limit.burst_ms if target.limit else 0.0
    return QuotaSpan(sample.t_ns, sample.t_ns, quota, period, level).limit(burst)


def _row(before: CgroupSample, after: CgroupSample, target: CgroupTarget,
         unknown: object = None) -> WatchRow:
    """One interval, under the quota in force at its end; ``unknown``: why the usage cannot
    be known (then it is left out)."""
    limit = limit_now(after, target)
    stats = interval_stats(before, after, limit)
    if unknown:
        stats = replace(stats, usage_cpus=float("nan"), quota_share=None)
    return WatchRow(time.strftime("%H:%M:%S"), after.t_ns / 1e9, stats, limit,
                    target.usage_source.describe(), str(unknown) if unknown else None)


def _json_printer(target: CgroupTarget) -> Callable[[WatchRow, WatchRow], None]:
    def show(row: WatchRow, _total: WatchRow) -> None:
        sys.stdout.write(json_line(target.group, row, _quota_group(target)) + "\n")
        sys.stdout.flush()
    return show


def _table_printer(target: CgroupTarget, live: Live) -> Callable[[WatchRow, WatchRow], None]:
    rows: deque[WatchRow] = deque(maxlen=TABLE_ROWS)
    shown: list[Limit | None] = [target.limit]
    change: list[str] = []

    def show(row: WatchRow, total: WatchRow) -> None:
        rows.append(row)
        now = row.limit
        if now != shown[-1]:
            change[:] = [f"quota changed at {row.clock}: "
                         f"{shown[-1].describe() if shown[-1] else 'none'} -> "
                         f"{now.describe() if now else 'none'}"]
            shown.append(now)
        live.update(watch_table(target.group, shown[-1], list(rows), total.stats,
                                _quota_group(target), change[0] if change else None),
                    refresh=True)
    return show


def _quota_group(target: CgroupTarget) -> str | None:
    return target.levels[0].group if target.levels else None
