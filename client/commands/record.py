"""``http-timing record TARGET``: a group's cgroup timeline on its own, no requests.

    http-timing record TARGET [--duration S] [--max-size BYTES] [--name NAME] [--interval S]
                              [--live [PORT]]

TARGET as for ``--cgroup``. Writes ``<name>.cgroup.csv`` (a flushed row every ``--interval``)
and ``<name>.json`` (the group, its quota, the host, the clock) in ``--data-dir``, until
``--duration``, Ctrl-C or SIGTERM (exit 0 for each), the size limit or the group's end (exit 1).
``http-timing import`` joins it to another tool's per-request results. ``--live``: the
group's last minute on a page while it records (as ``watch --live``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

from client.commands.common import add_live_arguments, service_group, live_page
from client.commands.options import (CliError, OneLineParser, check_folder, int_at_least,
                                     number_above)
from client.data.naming import check_file_name
from client.render.live import watched_live
from client.run.cgroup_sampler import DEFAULT_INTERVAL
from client.run.service_group import ServiceGroupError
from client.run.timeline_record import TimelineSpec, record_timeline

__all__ = ["build_record_parser", "command_record"]

PROG = "http-timing record"
EXIT_OK, EXIT_ENDED = 0, 1
LIVE_WINDOW_S = 60.0   # --live: the page shows the group's last minute, as watch's


def build_record_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Record a cgroup's CPU counters every "
                           "--interval (no requests): <name>.cgroup.csv and <name>.json, to "
                           "join later to a load tool's results or an access log with "
                           "'http-timing import'.")
    parser.add_argument("target", metavar="TARGET",
                        help="a cgroup directory, pid:PID, docker:NAME_OR_ID or "
                        "k8s:NAMESPACE/POD[/CONTAINER]")
    parser.add_argument("--duration", type=number_above(0), metavar="S",
                        help="stop after S seconds (default: until Ctrl-C or SIGTERM)")
    parser.add_argument("--max-size", type=int_at_least(1024), metavar="BYTES",
                        help="stop before the timeline file grows past BYTES (a row is ~40 "
                        "bytes: 100 rows a second fill 14 MiB an hour)")
    parser.add_argument("--interval", type=number_above(0), default=DEFAULT_INTERVAL,
                        metavar="S", help=f"seconds between two samples (default "
                        f"{DEFAULT_INTERVAL:g})")
    parser.add_argument("--name", help="name of the files (default: timeline-<timestamp>)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"), metavar="DIR",
                        help="where the files go (default ./raw-data)")
    parser.add_argument("--pod-uid", metavar="UID",
                        help="with k8s:NS/POD: the pod's UID, where kubectl cannot tell")
    add_live_arguments(parser)
    return parser


def command_record(argv: list[str]) -> int:
    opts = build_record_parser().parse_args(argv)
    name = opts.name or "timeline-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    if problem := check_file_name(name):
        raise CliError(problem)
    check_folder("--data-dir", opts.data_dir)
    target = service_group(opts.target, opts.pod_uid)
    assert target is not None
    spec = TimelineSpec(target, name, opts.data_dir, opts.duration, opts.max_size,
                        opts.interval, ("http-timing", "record", *argv))
    limit = target.limit
    print(f"recording {target.directory} "
          f"({f'quota {limit.cpus:g} CPU' if limit else 'no CPU quota'}) every "
          f"{opts.interval * 1000:g} ms to {spec.csv_path}", flush=True)
    if (note := target.no_limit) is not None:
        print(f"{PROG}: {note}", file=sys.stderr, flush=True)
    try:
        with live_page(opts, "the recording", window_s=LIVE_WINDOW_S) as live, \
                watched_live(live, target, "record", [spec.csv_path, spec.meta_path]):
            meta = record_timeline(spec)
    except ServiceGroupError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot write {spec.csv_path}: {exc.strerror or exc}") from None
    print(f"{meta.samples} samples: {spec.csv_path} (metadata {spec.meta_path})")
    if meta.stop_reason and meta.stop_reason.startswith("stopped sampling"):
        print(f"{PROG}: {meta.stop_reason}", file=sys.stderr)
        return EXIT_ENDED
    return EXIT_OK
