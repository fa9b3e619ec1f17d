"""``http-timing import FILE --timeline NAME.cgroup.csv``: another tool's per-request results
(or an access log) joined to a timeline that ``http-timing record`` wrote, saved as a run.
``--timeline k8s:NS/POD[/CONTAINER]`` fetches the pod's timeline for the requests' window from
the node agent of the pod's node, through the API server's proxy (a kubeconfig is enough).

    http-timing import FILE --timeline NAME.cgroup.csv|k8s:NS/POD [--format F] [--name OUT]
                       [--start EPOCH] [--offset SECONDS | --no-align]
                       [--concurrency C | --open-loop] [--log-format 'NGINX FORMAT']
                       [--upstream IP[:PORT]]

The format is recognised from the content (``--format`` forces one; ``--log-format`` reads
an nginx log in the user's own ``log_format``). ``--upstream`` keeps the requests one server
served (a proxy's log: an Ingress's, marked against one pod's timeline). Files with relative
times (hey, oha) need ``--start`` (the tool's start, Unix seconds as ``date +%s.%N`` prints);
without it the command prints the best estimate and stops. Every import prints the clock
check (the shift that lines the stalls up with the throttling, with its confidence) and
aligns the stated clock (``client.analysis.clock.align``): the shift near it that fits the
latencies clearly better is applied, and said; ``--offset`` sets the shift instead,
``--no-align`` keeps the stated clock. The load's shape (``client.run.importing.shape_of``)
is printed and kept in the run's JSON; ``--concurrency C`` or ``--open-loop`` says it.
Exit 0; 2 for bad input (one line).
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone
from collections.abc import Callable
from pathlib import Path

from client.analysis.clock import (CHECK_WINDOW_NS, Alignment, ClockEstimate,
                                   align_records, estimate_shift)
from client.analysis.detect import no_limit_note
from client.commands.options import CliError, OneLineParser, check_folder
from client.data.formats import EPOCH, IMPORTERS, Imported, read_results
from client.data.formats.base import ImportFileError, seconds_ns
from client.data.formats.nginx import NginxLogFormat
from client.data.formats.nginx_format import LogFormatError
from client.data.loadshape import UNKNOWN, LoadShape
from client.data.naming import check_file_name
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample, read_timeline
from client.data.timeline_meta import (TimelineMetadata, read_timeline_metadata,
                                       timeline_meta_path)
from client.data.attribution import throttled_stretches
from client.run.agent_timeline import (RECORDER_NAMESPACE, AgentTimelineError, PodRef,
                                       fetch_timeline, parse_pod_ref)
from client.run.importing import (ImportedRun, ImportSpec, build_imported, only_upstream,
                                  place_requests, placeable, save_imported)

__all__ = ["build_import_parser", "command_import", "shape_line"]

PROG = "http-timing import"


def _seconds(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            return seconds_ns(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes seconds, like 1732420000.25 "
                                             f"(got {text!r})") from None
    return parse


def _connections(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"--concurrency takes a whole number of connections, "
                                         f"1 or more (got {text!r})")
    return count


def _said_shape(opts: argparse.Namespace) -> LoadShape | None:
    if opts.open_loop:
        return LoadShape(False, None, "said", "--open-loop")
    if opts.concurrency is not None:
        return LoadShape(True, opts.concurrency, "said", f"--concurrency {opts.concurrency}")
    return None


def build_import_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Mark another tool's requests (or an access "
                           "log's) with the throttling a recorded cgroup timeline shows, and "
                           "save them as a run that report, plot and compare read.")
    parser.add_argument("file", type=Path, metavar="FILE",
                        help="the tool's results: " + ", ".join(IMPORTERS))
    parser.add_argument("--timeline", required=True, metavar="NAME.cgroup.csv|k8s:NS/POD",
                        help="the timeline 'http-timing record' wrote (its NAME.json beside it), "
                        "or k8s:NAMESPACE/POD[/CONTAINER]: that pod's timeline from the node "
                        "agent (k8s/recorder/) of its node, fetched for the requests' window "
                        "through the API server's proxy (needs get pods/proxy in the "
                        "recorder's namespace)")
    parser.add_argument("--recorder-namespace", default=RECORDER_NAMESPACE, metavar="NS",
                        help="with k8s:NS/POD, the namespace of the node agents (default "
                        f"{RECORDER_NAMESPACE})")
    parser.add_argument("--format", choices=list(IMPORTERS), metavar="F",
                        help="the file's format (default: recognised from its content): "
                        + ", ".join(IMPORTERS))
    parser.add_argument("--name", help="name of the run's files (default: import-<FILE's stem>)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"), metavar="DIR",
                        help="where <name>.csv, .json and .cgroup.csv go (default ./raw-data)")
    parser.add_argument("--start", type=_seconds("--start"), metavar="EPOCH",
                        help="for relative times (hey, oha): the tool's start, Unix seconds "
                        "(date +%%s.%%N just before running it)")
    parser.add_argument("--offset", type=_seconds("--offset"), metavar="SECONDS",
                        help="add this to the file's times (its clock is off the timeline's "
                        "host's), instead of the clock check's shift")
    parser.add_argument("--no-align", action="store_true",
                        help="keep the file's clock as stated (--start, its Unix times): do not "
                        "apply the shift that lines its slow requests up with the throttling")
    parser.add_argument("--log-format", metavar="'FORMAT'",
                        help="an nginx log in your own log_format, in nginx's syntax (the "
                        "directive or its strings): any format with $msec and $request_time")
    loop = parser.add_mutually_exclusive_group()
    loop.add_argument("--concurrency", type=_connections, metavar="C",
                      help="the load was a closed loop of C connections (hey -c C, oha -c C): "
                      "each sent its next request when the previous one was answered "
                      "(default: as the file says, else as its requests show)")
    loop.add_argument("--open-loop", action="store_true",
                      help="the load sent each request at its own time, whatever the answers "
                      "(a rate: wrk2, vegeta, k6's arrival-rate executors)")
    parser.add_argument("--upstream", metavar="IP[:PORT]",
                        help="only the requests this server answered (Traefik's ServiceAddr, "
                        "nginx's $upstream_addr): a proxy's log against one pod's timeline")
    return parser


def _read(opts: argparse.Namespace) -> Imported:
    if opts.log_format is None:
        imported = read_results(opts.file, opts.format)
    elif opts.format not in (None, "nginx"):
        raise CliError(f"--log-format reads nginx logs; it does not go with --format {opts.format}")
    else:
        try:
            importer = NginxLogFormat(opts.log_format)
        except LogFormatError as exc:
            raise CliError(str(exc)) from None
        imported = importer.read(opts.file)
        if not imported.requests:
            raise ImportFileError(f"{opts.file}: no requests in it (read as nginx)")
    if opts.upstream is not None:
        try:
            imported = only_upstream(imported, opts.upstream)
        except ValueError as exc:
            raise CliError(f"{opts.file}: {exc}") from None
    return imported


def _timeline(path: Path) -> tuple[list[CgroupSample], int, TimelineMetadata]:
    timeline = read_timeline(path)
    meta_path = timeline_meta_path(path)
    meta = read_timeline_metadata(meta_path)
    if meta is None or meta.clock is None:
        raise CliError(f"{meta_path}: no clock for {path} (expected the JSON that "
                       "'http-timing record' writes beside its timeline)")
    if len(timeline) < 2:
        raise CliError(f"{path}: fewer than 2 samples: nothing to mark requests from")
    return timeline, meta.clock.zero_epoch_ns, meta


def _check(records: list[RequestRecord], timeline: list[CgroupSample], period_ns: int | None,
           lo_ns: int, hi_ns: int) -> ClockEstimate | None:
    """The clock check over the shifts in ``[lo_ns, hi_ns]`` that keep every request inside
    the timeline (beyond its ends nothing is known, and would look like no throttling)."""
    lo_ns = max(lo_ns, timeline[0].t_ns - min(r.start_ns for r in records))
    hi_ns = min(hi_ns, timeline[-1].t_ns - max(r.end_ns for r in records))
    if hi_ns < lo_ns:
        return None
    stretches = throttled_stretches(timeline, period_ns)
    return estimate_shift([(r.start_ns, r.end_ns) for r in records], stretches, lo_ns, hi_ns,
                          period_ns=period_ns)


def _need_start(imported: Imported, path: Path, timeline: list[CgroupSample], zero: int,
                period_ns: int | None) -> CliError:
    """The error for a relative file without --start, with the estimate as advice."""
    placed = place_requests(imported, zero, zero, 0)   # the tool's zero at the timeline's
    lo = timeline[0].t_ns - placed[0].start_ns
    hi = timeline[-1].t_ns - max(r.end_ns for r in placed)
    if imported.anchor_epoch_ns is not None:   # oha's whole-second launch time
        lo = max(lo, imported.anchor_epoch_ns - zero - 1_000_000_000)
        hi = min(hi, imported.anchor_epoch_ns - zero + 2_000_000_000)
    estimate = _check(placed, timeline, period_ns, lo, hi)
    advice = ("; the requests do not fit inside the timeline" if estimate is None else
              f"; best line-up with the throttling: --start {(zero + estimate.shift_ns) / 1e9:.3f}"
              f" ({estimate.describe().split(' (', 1)[1]}" if estimate.confidence != "none"
              else "; no start lines the stalls up with the throttling")
    return CliError(f"{path}: {imported.format} times are relative to the tool's own start: "
                    f"give --start EPOCH (date +%s.%N just before it ran){advice}")


def _window(imported: Imported, opts: argparse.Namespace) -> tuple[float | None, float | None]:
    """The wall-clock window (Unix s) a fetched timeline must cover: the requests, shifted as
    they will be placed, plus the clock check's reach; open when the start is not known yet."""
    if imported.clock == EPOCH:
        base = 0
    elif opts.start is not None:
        base = opts.start
    else:
        return None, None
    if not imported.requests:
        return None, None
    starts = [r.start_ns for r in imported.requests]
    ends = [r.start_ns + r.latency_ns for r in imported.requests]
    margin = CHECK_WINDOW_NS + 1_000_000_000
    offset = opts.offset or 0
    return ((base + min(starts) + offset - margin) / 1e9,
            (base + max(ends) + offset + margin) / 1e9)


def _fetch(ref: PodRef, imported: Imported, opts: argparse.Namespace, into: Path) -> Path:
    lo, hi = _window(imported, opts)
    try:
        return fetch_timeline(ref, into, lo, hi, recorder_namespace=opts.recorder_namespace)
    except AgentTimelineError as exc:
        raise CliError(f"--timeline {ref}: {exc}") from None


def command_import(argv: list[str]) -> int:
    opts = build_import_parser().parse_args(argv)
    name = opts.name or f"import-{opts.file.name.split('.')[0]}"
    if problem := check_file_name(name):
        raise CliError(problem)
    check_folder("--data-dir", opts.data_dir)
    try:
        ref = parse_pod_ref(opts.timeline)
    except ValueError as exc:
        raise CliError(f"--timeline {exc}") from None
    imported = _read(opts)
    with tempfile.TemporaryDirectory(prefix="http-timing-timeline-") as fetched:
        timeline_file = Path(opts.timeline) if ref is None else _fetch(ref, imported, opts,
                                                                      Path(fetched))
        return _import(opts, argv, name, imported, timeline_file, "" if ref is None else str(ref))


def _import(opts: argparse.Namespace, argv: list[str], name: str, imported: Imported,
            timeline_file: Path, source: str) -> int:
    timeline, zero, meta = _timeline(timeline_file)
    period_ns = meta.period_ns
    if imported.clock != EPOCH and opts.start is None:
        raise _need_start(imported, opts.file, timeline, zero, period_ns)
    offset = opts.offset or 0
    records = place_requests(imported, zero, opts.start, offset)
    fine = placeable(imported, period_ns)
    estimate = (_check(records, timeline, period_ns, -CHECK_WINDOW_NS, CHECK_WINDOW_NS)
                if fine else None)
    alignment = (align_records(records, timeline, period_ns, imported.clock != EPOCH)
                 if fine and opts.offset is None and not opts.no_align else None)
    shift = alignment.shift_ns if alignment is not None and alignment.applied else 0
    if shift:
        records = place_requests(imported, zero, opts.start, offset + shift)
    spec = ImportSpec(opts.file, timeline_file, name, opts.data_dir, offset, opts.start,
                      ("http-timing", "import", *argv), source, _said_shape(opts), shift)
    run = build_imported(spec, imported, records, timeline, meta, zero)
    if run.records and run.outside == len(run.records):
        raise _no_overlap(opts.file, run.records, timeline, zero, source or str(timeline_file))
    save_imported(spec, run)
    _print(run, imported, spec, estimate, _check_says(opts, alignment))
    return 0


def _check_says(opts: argparse.Namespace, alignment: Alignment | None) -> str:
    """What the clock check did with the stated clock, for its line."""
    if opts.offset is not None:
        return f"applied: --offset {opts.offset / 1e9:g} (not aligned: --offset sets the clock)"
    if opts.no_align:
        return "applied: no offset (--no-align keeps the stated clock)"
    if alignment is None or not alignment.applied and abs(alignment.shift_ns) < 1_000_000:
        return "applied: no offset (the stated clock fits best)" if alignment else (
            "applied: no offset")
    if alignment.applied:
        return (f"applied: a shift of {alignment.describe()}{alignment.aside} "
                "(--no-align keeps the stated clock, --offset sets one)")
    return f"applied: no offset ({alignment.refused()})"


def _no_overlap(path: Path, records: list[RequestRecord], timeline: list[CgroupSample],
                zero: int, source: str) -> CliError:
    """The error for a file none of whose requests lies inside the timeline."""
    def utc(t_ns: int) -> str:
        return datetime.fromtimestamp((zero + t_ns) / 1e9, timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S")
    first, last = min(r.start_ns for r in records), max(r.end_ns for r in records)
    return CliError(f"{path}: none of its {len(records)} requests lies inside the timeline "
                    f"{source} (requests {utc(first)} to {utc(last)} UTC, timeline "
                    f"{utc(timeline[0].t_ns)} to {utc(timeline[-1].t_ns)}): nothing to mark "
                    "(the service's timeline of another time? --offset moves the requests)")


def shape_line(shape: LoadShape | None) -> str:
    """The import's line on the load's shape; for a shape not known, what to give."""
    if shape is None or not shape.known:
        why = UNKNOWN.why if shape is None else shape.why
        return (f"load: concurrency not known ({why}): a replay (predict, advise --passive) "
                "sends each request at its recorded time; if the tool kept C connections "
                "(hey -c, oha -c), import again with --concurrency C, else with --open-loop")
    return f"load: {shape.describe()}"


def _print(run: ImportedRun, imported: Imported, spec: ImportSpec,
           estimate: ClockEstimate | None, applied: str) -> None:
    records = run.records
    for note in imported.notes:
        print(note)
    if (why := no_limit_note(run.metadata.cgroup)) is not None:
        print(f"{len(records)} requests from {spec.source} ({imported.format}), not marked: "
              f"{why}")
        _raw_data(run, spec)
        return
    if not run.metadata.extra["imported"]["marked"]:
        step = imported.start_step_ns / 1e9
        print(f"{len(records)} requests from {spec.source} ({imported.format}), not marked: "
              f"their starts are whole {'seconds' if step == 1 else f'{step:g} s steps'} "
              f"(a request began somewhere in a {step:g} s step, many quota periods), so which "
              f"period's throttling each met is unknown; no clock check either")
        if imported.format == "traefik":
            print("for marks, have Traefik write --accesslog.format=json (its StartUTC is in ns)")
        _raw_data(run, spec)
        return
    delayed = [r for r in records if r.cgroup_held_ns]
    longest = max((r.cgroup_held_ns or 0 for r in records), default=0) / 1e6
    print(f"{len(records)} requests from {spec.source} ({imported.format}); "
          f"{len(delayed)} delayed by throttling ({100 * len(delayed) / len(records):.0f} %), "
          f"the longest held {longest:.0f} ms (from the timeline's cpu.stat)")
    if run.outside:
        print(f"{run.outside} requests lie outside the timeline: left unmarked (is the clock "
              "right? see --offset)")
    if estimate is None:
        print(f"clock check: none (the requests fit inside the timeline at no shift within "
              f"±{CHECK_WINDOW_NS / 1e9:g} s); {applied}")
    elif estimate.confidence == "none":
        print(f"clock check: {estimate.describe()}; {applied}")
    else:
        print(f"clock check: the stalls line up best with the throttling at a shift of "
              f"{estimate.describe()}; {applied}")
    _raw_data(run, spec)


def _raw_data(run: ImportedRun, spec: ImportSpec) -> None:
    """The load's shape, then where the run went: the last two lines."""
    print(shape_line(LoadShape.from_dict(run.metadata.extra["imported"]["shape"])))
    print(f"raw data: {spec.csv_path} (metadata {spec.meta_path}, timeline {spec.timeline_copy})")
