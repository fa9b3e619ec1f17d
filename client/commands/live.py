"""``--live [PORT]`` and ``--live-host ADDRESS``: the live page of a run, for any command that
records one (``run``) and for ``watch`` and ``record`` (:func:`watched_live`: the group alone,
its last minute).

One call around the run, one at its end::

    with live_page(opts) as live:                         # None without --live
        recorded = measure(spec, observers=observers, watcher=live).recorded
        ...                                               # the report, the picture
        show_live_end(live, recorded, report.detection, picture)

The address goes to stderr (stdout keeps the run's own lines); a port that cannot be served
is a one-line usage error before anything is sent.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from client.analysis.detect import Detection
from client.commands.options import CliError, int_in
from client.data.metadata import RunMetadata
from client.data.timeline import timeline_path
from client.render.live import DEFAULT_HOST, DEFAULT_PORT, LiveError, LivePage
from client.run.cgroup_sampler import DEFAULT_INTERVAL, CgroupSampler
from client.run.cgroup_target import CgroupTarget, CgroupTargetError
from client.run.record import RecordedRun

__all__ = ["add_live_arguments", "live_page", "run_files", "show_live_end", "watched_live"]


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
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
    """The page server while inside (None without ``--live``); stopped when left.
    ``window_s``: the page shows only the group's last seconds (a watch)."""
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


@contextmanager
def watched_live(live: LivePage | None, target: CgroupTarget, command: str = "watch",
                 files: Sequence[Path] = ()) -> Iterator[None]:
    """``watch --live`` and ``record --live``: the group sampled for the page (as a run's
    ``--cgroup`` is, many times a period, no file) while inside; the page's end, with
    ``files``' names (``record``'s timeline and metadata), when left."""
    if live is None:
        yield
        return
    sampler = CgroupSampler(target, None, DEFAULT_INTERVAL)
    try:
        sampler.start()
    except CgroupTargetError as exc:
        raise CliError(str(exc)) from None
    live.run_started(RunMetadata(name=f"{command} {target.group}",
                                 command=["http-timing", command],
                                 cgroup={**target.to_metadata(), "usage": sampler.usage}),
                     sampler.samples)   # the sampler keeps its usage note up to date
    try:
        yield
    finally:
        sampler.stop()
        live.show_end([], None, list(files))


def run_files(recorded: RecordedRun, picture: Path | None) -> list[Path]:
    """The files a run left: CSV, metadata, the group's timeline, the picture."""
    files = [recorded.run.path, recorded.meta_path]
    if recorded.run.timeline is not None:
        files.append(timeline_path(recorded.run.path))
    return files + ([picture] if picture else [])


def show_live_end(live: LivePage | None, recorded: RecordedRun, detection: Detection | None,
                  picture: Path | None) -> None:
    """The run's final picture and its files' names on the page (nothing without one)."""
    if live is not None:
        live.show_end(recorded.run.records, detection, run_files(recorded, picture),
                      interrupted=recorded.interrupted, picture=picture)
