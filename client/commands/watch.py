"""``http-timing watch TARGET``: the live ``top`` of one group's CPU throttling.

    http-timing watch TARGET [--interval 1] [--count N] [--json] [--pod-uid UID]

TARGET as for ``--cgroup``: a cgroup directory, ``pid:PID``, ``docker:NAME`` or
``k8s:NAMESPACE/POD[/CONTAINER]``. Each interval: periods, periods throttled, throttled time,
CPUs used and their share of the quota in force at the interval's end (read each time: an
in-place resize, ``docker update --cpus``, shows at once), and the thread names that spent the
most CPU in it (``client.run.thread_usage``; where threads cannot be seen, one line says why
and the rest goes on). A table refreshed in place on a terminal; one JSON object per line (per
interval) with ``--json`` or when the output is not a terminal.
A pod whose group is not on this machine is read through its node's agent
(``client.run.pod_reach``): each interval, the rows the agent wrote since the last line, fetched
through the API server's proxy (no top threads then, no ``--live``).
Ctrl-C ends it (exit 0); a bad target is one line on stderr (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import deque
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.live import Live

from client.analysis.cgroup import interval_stats
from client.analysis.quotas import QuotaSpan, in_force
from client.analysis.threads import top_between
from client.commands.exits import silence_stdout
from client.commands.common import add_live_arguments, live_page
from client.commands.options import CliError, OneLineParser, int_at_least, number_above
from client.render.live import watched_live
from client.render.watch import WatchRow, json_line, watch_table
from client.data.threads import ThreadReading
from client.data.metadata import RunMetadata
from client.data.timeline import CgroupSample, read_timeline
from client.data.timeline_meta import (TimelineMetadata, read_timeline_metadata,
                                       timeline_meta_path)
from client.run.cgroup_sampler import CgroupReader, usage_note
from client.run.agent_timeline import (RECORDER_NAMESPACE, AgentLink, AgentTimelineError,
                                       NoTimeline, PodRef, agent_link)
from client.run.service_group import ServiceGroup, ServiceGroupError, resolve_cgroup
from client.run.pod_reach import locate
from client.run.thread_usage import ThreadUsage
from cpuquota.limit import Limit

__all__ = ["build_watch_parser", "command_watch"]

PROG = "http-timing watch"
EXIT_OK, EXIT_GONE, EXIT_USAGE = 0, 1, 2
TABLE_ROWS = 20
LIVE_WINDOW_S = 60.0   # --live: the page shows the group's last minute
FIRST_LOOK_S = 5.0     # through the agent: how far back the first fetch looks for a row


def build_watch_parser() -> argparse.ArgumentParser:
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
    args = build_watch_parser().parse_args(argv)
    try:
        found = locate(args.target, lambda spec: resolve_cgroup(spec, pod_uid=args.pod_uid))
        if isinstance(found, PodRef):
            return _watch_through_agent(args, found)
        target = found
        reader = CgroupReader(target)
    except ServiceGroupError as exc:
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
    except (CliError, ServiceGroupError) as exc:
        reader.close()
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _show(args: argparse.Namespace, target: ServiceGroup, reader: CgroupReader) -> int:
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

    def __init__(self, target: ServiceGroup) -> None:
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


def _watch(target: ServiceGroup, reader: CgroupReader, interval: float, count: int | None,
           show: Callable[[WatchRow, WatchRow], None]) -> int:
    """Read every ``interval`` (on a fixed grid, never drifting) and show each interval."""
    threads = TopThreads(target)
    try:
        return _watch_with(target, reader, interval, count, show, threads)
    finally:
        threads.close()


def _watch_with(target: ServiceGroup, reader: CgroupReader, interval: float,
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


def limit_now(sample: CgroupSample, known: ServiceGroup | Limit | None) -> Limit | None:
    """The quota in force at ``sample`` (the tightest of the levels it read), else ``known``
    (the one the target had when it was resolved)."""
    if isinstance(known, ServiceGroup):
        known = known.limit
    found = in_force(sample.quotas)
    if found is None:
        return known
    level, (quota, period) = found
    burst = known.burst_ms if known else 0.0
    return QuotaSpan(sample.t_ns, sample.t_ns, quota, period, level).limit(burst)


def _row(before: CgroupSample, after: CgroupSample, target: ServiceGroup,
         unknown: object = None) -> WatchRow:
    """One interval, under the quota in force at its end; ``unknown``: why the usage cannot
    be known (then it is left out)."""
    return interval_row(before, after, target.limit, target.usage_source.describe(),
                        time.strftime("%H:%M:%S"), after.t_ns / 1e9, unknown)


def interval_row(before: CgroupSample, after: CgroupSample, known: Limit | None, source: str,
                 clock: str, elapsed_s: float, unknown: object = None) -> WatchRow:
    """The line of one interval from two samples (pure)."""
    limit = limit_now(after, known)
    stats = interval_stats(before, after, limit)
    if unknown:
        stats = replace(stats, usage_cpus=float("nan"), quota_share=None)
    return WatchRow(clock, elapsed_s, stats, limit, source, str(unknown) if unknown else None)


# ---- a pod on another node: its agent's rows, through the API server -------------------------

def on_wall_clock(samples: list[CgroupSample], zero_epoch_ns: int) -> list[CgroupSample]:
    """A fetched window's rows with ``t_ns`` on the wall clock (Unix ns): windows fetched
    apart may count from different zeros (the agent's files rotate)."""
    return [replace(s, t_ns=s.t_ns + zero_epoch_ns) for s in samples]


def next_interval(previous: CgroupSample | None, fetched: list[CgroupSample]
                  ) -> tuple[CgroupSample, CgroupSample] | None:
    """(before, after) of the next line: from the last row shown (or the first fetched) to
    the newest fetched, all on the wall clock; None when no newer row came (pure)."""
    newer = [s for s in fetched if previous is None or s.t_ns > previous.t_ns]
    if not newer:
        return None
    before = previous if previous is not None else newer[0]
    after = max(newer, key=lambda s: s.t_ns)
    return (before, after) if after.t_ns > before.t_ns else None


def agent_rows(batches: list[list[CgroupSample]], known: Limit | None, source: str,
               start_ns: int) -> list[WatchRow]:
    """The lines ``watch`` shows for successive polls of the agent (each a batch of rows on
    the wall clock): one per poll that brought a newer row (pure: the polls' replay)."""
    rows: list[WatchRow] = []
    previous: CgroupSample | None = None
    for batch in batches:
        row, previous = _agent_line(previous, batch, known, source, start_ns)
        if row is not None:
            rows.append(row)
    return rows


def _agent_line(previous: CgroupSample | None, batch: list[CgroupSample], known: Limit | None,
                source: str, start_ns: int) -> tuple[WatchRow | None, CgroupSample | None]:
    """The line a poll's batch gives (None: no newer row), and the row to count from next."""
    pair = next_interval(previous, batch)
    if pair is None:
        return None, previous or (batch[-1] if batch else None)
    before, after = pair
    clock = time.strftime("%H:%M:%S", time.localtime(after.t_ns / 1e9))
    return interval_row(before, after, known, source, clock,
                        (after.t_ns - start_ns) / 1e9), after


def _poll(link: AgentLink, into: Path, since_s: float) -> tuple[list[CgroupSample],
                                                                TimelineMetadata | None]:
    """The agent's rows since ``since_s`` (Unix s) on the wall clock, and its JSON."""
    try:
        path = link.window(into, since_s, None)
    except NoTimeline:
        return [], None
    meta = read_timeline_metadata(timeline_meta_path(path))
    if meta is None or meta.clock is None:
        raise AgentTimelineError(f"the agent {link.namespace}/{link.agent} sent no clock "
                                 "with the timeline")
    return on_wall_clock(read_timeline(path), meta.clock.zero_epoch_ns), meta


def _watch_through_agent(args: argparse.Namespace, ref: PodRef) -> int:
    """``watch k8s:NS/POD`` for a pod whose group is not on this machine: each interval, the
    rows its node's agent sampled since the last line, fetched through the API server."""
    if args.live is not None:
        print(f"{PROG}: --live reads the group's files here; {ref} is read through its node's "
              "agent (no --live then)", file=sys.stderr)
        return EXIT_USAGE
    as_json = args.json or not sys.stdout.isatty()
    try:
        link = agent_link(ref, recorder_namespace=RECORDER_NAMESPACE)
        with tempfile.TemporaryDirectory(prefix="http-timing-watch-") as tmp:
            return _poll_agent(args, link, Path(tmp), as_json)
    except AgentTimelineError as exc:
        print(f"{PROG}: {ref}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        silence_stdout()
        return EXIT_OK


def _poll_agent(args: argparse.Namespace, link: AgentLink, into: Path, as_json: bool) -> int:
    step = args.interval
    start_s = time.time()
    rows, meta = _poll(link, into, start_s - max(2 * step, FIRST_LOOK_S))
    if meta is None:
        raise AgentTimelineError(f"the agent {link.namespace}/{link.agent} on node {link.node} "
                                 f"has no timeline of {link.ref}: is the pod labelled "
                                 "throttle-lab/record=true?")
    group = str((meta.cgroup or {}).get("group") or link.ref)
    known = RunMetadata(cgroup=meta.cgroup).limit
    source = (f"cpu.stat, read by the node agent {link.namespace}/{link.agent} on node "
              f"{link.node} (through the API server)")
    quota_group = str((meta.cgroup or {}).get("quota_group") or group)
    previous = rows[-1] if rows else None
    origin = previous.t_ns if previous else round(start_s * 1e9)
    shown: deque[WatchRow] = deque(maxlen=TABLE_ROWS)
    with contextlib.ExitStack() as stack:
        live = None if as_json else stack.enter_context(
            Live(console=Console(), auto_refresh=False, transient=False))
        lines = 0
        while args.count is None or lines < args.count:
            time.sleep(step)
            since = previous.t_ns / 1e9 if previous else start_s - 2 * step
            batch, _ = _poll(link, into, since)
            row, previous = _agent_line(previous, batch, known, source, origin)
            if row is None:
                continue
            lines += 1
            if live is None:
                sys.stdout.write(json_line(group, row, quota_group) + "\n")
                sys.stdout.flush()
            else:
                shown.append(row)
                live.update(watch_table(group, row.limit, list(shown), None, quota_group),
                            refresh=True)
    return EXIT_OK


def _json_printer(target: ServiceGroup) -> Callable[[WatchRow, WatchRow], None]:
    def show(row: WatchRow, _total: WatchRow) -> None:
        sys.stdout.write(json_line(target.group, row, _quota_group(target)) + "\n")
        sys.stdout.flush()
    return show


def _table_printer(target: ServiceGroup, live: Live) -> Callable[[WatchRow, WatchRow], None]:
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


def _quota_group(target: ServiceGroup) -> str | None:
    return target.levels[0].group if target.levels else None
