"""``http-timing import``: another tool's requests joined to a recorded cgroup timeline, saved
as a throttle-lab run (``<name>.csv``, ``<name>.json``, ``<name>.cgroup.csv``) that ``report``,
``plot`` and ``compare`` read like any other.

Placing: a request's start on the timeline is ``epoch - clock.zero_epoch_ns + offset`` (a
file with Unix times), or ``start_epoch + relative - zero + offset`` (hey, oha: ``--start``).
Marking: :func:`client.run.attach.mark_records`, what a live ``--cgroup`` run does; a request
not wholly inside the timeline stays unmarked (unknown), and is counted.
The load's shape (:func:`shape_of`, ``client.data.loadshape``) goes into the run's JSON: its
``mode`` and ``concurrency``, and ``imported.shape`` (where it came from).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from client import __version__
from client.data.files import replacing, write_metadata, write_rows
from client.data.folders import make_folder
from client.data.formats import EPOCH, Imported, ImportedRequest
from client.data.loadshape import LoadShape, infer
from client.data.metadata import LoadMode, RunMetadata, watched_without_limit
from client.data.record import RawDataError, RequestRecord
from client.data.summary import summarize
from client.data.timeline import CgroupSample, timeline_path
from client.data.timeline_meta import TimelineMetadata
from client.run.attach import mark_records

__all__ = ["OPEN_FORMATS", "ImportSpec", "ImportedRun", "build_imported", "mark_imported",
           "mode_of", "only_upstream", "place_requests", "placeable", "save_imported",
           "shape_of", "upstream_matches"]

# formats whose requests arrived at their own time: access logs, and vegeta's attack -rate
OPEN_FORMATS = {
    **{name: "an access log: each request arrived when it arrived" for name in (
        "nginx", "envoy", "envoy-json", "traefik", "traefik-json")},
    **{name: "vegeta attack sends at its -rate, whatever the answers" for name in (
        "vegeta-csv", "vegeta-json")}}


@dataclass(frozen=True)
class ImportSpec:
    source: Path
    timeline_path: Path
    name: str
    data_dir: Path
    offset_ns: int = 0
    start_epoch_ns: int | None = None     # where a relative file's zero is (--start)
    command: tuple[str, ...] = ()
    timeline_source: str = ""             # where the timeline came from, if not a file (k8s:NS/POD)
    shape: LoadShape | None = None        # how the load was sent, as the user says
    aligned_ns: int = 0                   # the clock check's shift, applied (beyond offset_ns)

    @property
    def csv_path(self) -> Path:
        return self.data_dir / f"{self.name}.csv"

    @property
    def meta_path(self) -> Path:
        return self.data_dir / f"{self.name}.json"

    @property
    def timeline_copy(self) -> Path:
        return timeline_path(self.csv_path)


@dataclass
class ImportedRun:
    records: list[RequestRecord]
    metadata: RunMetadata
    outside: int          # requests not wholly inside the timeline (left unmarked)


def place_requests(imported: Imported, zero_epoch_ns: int, start_epoch_ns: int | None,
                   offset_ns: int) -> list[RequestRecord]:
    """The requests on the timeline's clock, in start order (``ValueError`` when a relative
    file has no ``start_epoch_ns``)."""
    if imported.clock == EPOCH:
        base = -zero_epoch_ns
    elif start_epoch_ns is None:
        raise ValueError("relative times need the tool's start (--start EPOCH)")
    else:
        base = start_epoch_ns - zero_epoch_ns
    ordered = sorted(imported.requests, key=lambda r: r.start_ns)
    return [_placed(seq, r, base + offset_ns) for seq, r in enumerate(ordered)]


def _placed(seq: int, request: ImportedRequest, shift_ns: int) -> RequestRecord:
    """The request as a record on the timeline's clock (http-timing's own row kept whole, its
    scheduled send moved with it)."""
    if (kept := request.kept) is not None:
        return replace(kept, seq=seq, start_ns=request.start_ns + shift_ns,
                       scheduled_ns=None if kept.scheduled_ns is None else
                       kept.scheduled_ns - kept.start_ns + request.start_ns + shift_ns)
    return RequestRecord(seq, request.start_ns + shift_ns, request.latency_ns, request.status,
                         request.error)


def shape_of(imported: Imported, records: list[RequestRecord],
             said: LoadShape | None = None) -> LoadShape:
    """How the requests were sent: as the user says (``said``), as the file says (its JSON,
    its connection column), as its format is (:data:`OPEN_FORMATS`), else as the requests
    show (:func:`client.data.loadshape.infer`: "concurrency not known" when they do not)."""
    if said is not None:
        return said
    if imported.shape is not None:
        return imported.shape
    if imported.format in OPEN_FORMATS:
        return LoadShape(False, None, "format", OPEN_FORMATS[imported.format])
    return infer([(r.start_ns, r.end_ns) for r in records if not r.error])


def mode_of(shape: LoadShape) -> tuple[LoadMode, int]:
    """The run's ``mode`` and ``concurrency`` for a shape: one at a time sequential, C at a
    time a closed loop of C; an open loop, and a shape not known, each request at its time."""
    if shape.closed and shape.connections is not None:
        return (LoadMode.SEQUENTIAL, 1) if shape.connections == 1 else (
            LoadMode.CLOSED_LOOP, shape.connections)
    return LoadMode.OPEN_LOOP, 1


def mark_imported(records: list[RequestRecord], timeline: list[CgroupSample],
                  timeline_meta: TimelineMetadata, placed: bool = True
                  ) -> tuple[list[RequestRecord], int]:
    """The records marked, and how many were left unmarked (outside the timeline); none held
    longer than its latency less its own CPU where the server sent it (Server-Timing:
    ``client.data.attribution.beyond_own``). When the
    file's starts are too coarse to place a request among the periods (``placed`` False,
    :func:`placeable`), none is marked (None: unknown), and 0 are counted outside."""
    if not placed:
        return list(records), 0
    marked = mark_records(records, timeline, [timeline_meta.period_ns], outside=False,
                          own_ns=[r.server_cpu_ns for r in records])
    return marked, sum(1 for r in marked if r.cgroup_nr_throttled is None)


def placeable(imported: Imported, period_ns: int | None) -> bool:
    """Whether the file's starts are fine enough to mark its requests: to within a tenth of the
    quota's period (10 ms of 100 ms). Traefik's CLF gives whole seconds: a request began
    somewhere in a second, ten periods, so which period's throttling it met is unknown."""
    return imported.start_step_ns <= (period_ns or 100_000_000) // 10


def upstream_matches(upstream: str, wanted: str) -> bool:
    """Whether a request's upstream (``10.42.0.7:8000``, ``[fd00::7]:8000``) is the one
    asked for: ``IP:PORT`` exactly, ``IP`` (or ``[IP]``) on any port."""
    if not upstream:
        return False
    if upstream == wanted:
        return True
    host = upstream.rsplit(":", 1)[0] if upstream.count(":") == 1 or upstream.startswith(
        "[") else upstream
    return host.strip("[]") == wanted.strip("[]")


def only_upstream(imported: Imported, wanted: str) -> Imported:
    """The requests ``wanted`` (``IP[:PORT]``) served (``ValueError``, one line, when the
    format names no upstream or none matches)."""
    if not imported.upstreams:
        raise ValueError(f"{imported.format} does not name each request's upstream: --upstream "
                         "needs Traefik's access log or an nginx --log-format with "
                         "$upstream_addr")
    kept = [r for r in imported.requests if upstream_matches(r.upstream, wanted)]
    if not kept:
        seen: dict[str, int] = {}
        for r in imported.requests:
            seen[r.upstream or "-"] = seen.get(r.upstream or "-", 0) + 1
        listed = ", ".join(f"{u} ({n})" for u, n in sorted(seen.items(), key=lambda i: -i[1])[:5])
        raise ValueError(f"no request was served by {wanted} (the upstreams in the file: "
                         f"{listed})")
    return replace(imported, requests=kept,
                   notes=[*imported.notes, f"{len(kept)} of {len(imported.requests)} requests "
                          f"served by {wanted} (--upstream)"])


def build_imported(spec: ImportSpec, imported: Imported, records: list[RequestRecord],
                   timeline: list[CgroupSample], timeline_meta: TimelineMetadata,
                   zero_epoch_ns: int) -> ImportedRun:
    """The marked records and the run's metadata."""
    placed = placeable(imported, timeline_meta.period_ns)
    if watched_without_limit(timeline_meta.cgroup):   # its counters count no throttling
        placed = False
    marked, outside = mark_imported(records, timeline, timeline_meta, placed)
    shape = shape_of(imported, marked, spec.shape)
    mode, concurrency = mode_of(shape)
    first_epoch = zero_epoch_ns + (marked[0].start_ns if marked else 0)
    details: dict[str, Any] = {
        "file": str(spec.source), "format": imported.format, "clock": imported.clock,
        "timeline": spec.timeline_source or str(spec.timeline_path),
        "offset_s": spec.offset_ns / 1e9, "aligned_s": spec.aligned_ns / 1e9,
        "start_epoch_s": None if spec.start_epoch_ns is None else spec.start_epoch_ns / 1e9,
        "outside_timeline": outside, "start_step_s": imported.start_step_ns / 1e9,
        "marked": placed, "notes": list(imported.notes), "shape": shape.to_dict()}
    metadata = RunMetadata(
        name=spec.name, tool=f"{imported.format} (http-timing import)", version=__version__,
        url=imported.url, mode=mode, requests=len(marked), concurrency=concurrency,
        started_at=datetime.fromtimestamp(first_epoch / 1e9, timezone.utc).isoformat(),
        host=timeline_meta.host, command=list(spec.command), cgroup=timeline_meta.cgroup,
        ended_at=datetime.now(timezone.utc).isoformat(), completed=len(marked),
        summary=summarize(marked), extra={"imported": details})
    return ImportedRun(marked, metadata, outside)


def save_imported(spec: ImportSpec, run: ImportedRun) -> None:
    """The timeline copy, the CSV, then the JSON, each written to a temporary name and
    renamed (a reader never sees half a file). ``RawDataError`` when they cannot be written."""
    try:
        make_folder(spec.data_dir)
        if spec.timeline_path.resolve() != spec.timeline_copy.resolve():
            with replacing(spec.timeline_copy) as tmp:
                shutil.copyfile(spec.timeline_path, tmp)
        write_rows(spec.csv_path, run.records)
        write_metadata(spec.meta_path, run.metadata)
    except OSError as exc:
        raise RawDataError(f"cannot write the imported run in {spec.data_dir}: "
                           f"{exc.strerror or exc}") from None
