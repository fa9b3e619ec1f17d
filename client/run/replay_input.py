"""What ``http-timing predict --timeline`` reads: a recorded timeline (``http-timing record``'s,
a ``--cgroup`` run's, the node agent's) with the JSON beside it, and the requests to replay
(a run's CSV, another tool's file or an access log, read as ``http-timing import`` reads them)
placed on the timeline's clock. Every problem is a one-line ``RawDataError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from client.data.attribution import held
from client.data.files import read_run
from client.data.formats import (EPOCH, HEAD_BYTES, RUN, read_results, recognise,
                                 run_shape, run_zero_epoch_ns)
from client.data.loadshape import LoadShape
from client.data.metadata import RunMetadata
from client.data.record import RawDataError, RequestRecord
from client.data.timeline import CgroupSample, Rows, timeline_path, timeline_rows
from client.data.timeline_meta import (TimelineMetadata, read_timeline_metadata,
                                       timeline_meta_path)
from client.run.importing import place_requests, shape_of

__all__ = ["DEFAULT_PERIOD_NS", "Placed", "Recording", "read_recording", "read_requests",
           "sent_closed"]

DEFAULT_PERIOD_NS = 100_000_000   # the kernel's default period, when the record does not say


@dataclass(frozen=True)
class Recording:
    """A timeline and what its JSON says about it."""

    path: Path
    samples: Sequence[CgroupSample]   # a five-column file's as Rows (client.data.timeline)
    meta: TimelineMetadata | None
    period_ns: int
    period_source: str                  # where the period came from
    limits: tuple[float | None, ...]    # the limits in force in the window (None: no quota)
    zero_epoch_ns: int | None           # the wall clock at the timeline's zero, if known
    zero_exact: bool                    # False: from a run's started_at (before its warm-up)


@dataclass(frozen=True)
class Placed:
    """The requests on the timeline's clock inside its window, with the wall time the record
    held each (``client.data.attribution.held``), and how they were placed."""

    records: list[RequestRecord]
    held_ns: list[int]
    outside: int          # successful requests not wholly inside the window, left out
    failed: int           # requests that failed, left out
    how: str
    # how they were sent when the file says (an http-timing run's own plan, an imported run's
    # shape as said, read from a column or its format: client.data.loadshape): True a closed
    # loop (one or C at a time), False an open loop (--rate, an access log); None: read from
    # their gaps (inferred, or not known)
    closed: bool | None = None
    relative: bool = False   # the file's times are relative to the tool's start (--start)
    shape: LoadShape | None = None   # the load's shape as the file says or shows (None: no word)
    shape_from: str = ""             # where it says it: "the run's JSON", "the file (NAME)"
    # another tool's file (not an http-timing run, whose times are the host's clock): its
    # clock may be off the host's, and a clock check may move it
    foreign: bool = False
    # the successful requests left out that ran in the window for part of their time (it
    # ended, or began, while they ran): (start, latency, the server's CPU or 0); the CPU the
    # window's rows show during them is theirs, not the others' (an open loop recorded at
    # saturation ends with a queue of them)
    partial: tuple[tuple[int, int, int], ...] = ()


def _limits(samples: Sequence[CgroupSample], meta: TimelineMetadata | None
            ) -> tuple[float | None, ...]:
    seen: list[float | None] = []
    for sample in () if isinstance(samples, Rows) else samples:   # Rows: no quota read
        if sample.quotas:
            quota, period = sample.quotas[0]
            cpus = None if quota is None or quota <= 0 or period <= 0 else quota / period
            if cpus not in seen:
                seen.append(cpus)
    if seen:
        return tuple(seen)
    cpus = (meta.cgroup or {}).get("cpus") if meta else None
    return (float(cpus) if isinstance(cpus, (int, float)) and cpus > 0 else None,)


def _period(samples: Sequence[CgroupSample], meta: TimelineMetadata | None
            ) -> tuple[int, str]:
    periods = [] if isinstance(samples, Rows) else [   # Rows: no quota read
        s.quotas[0][1] for s in samples if s.quotas and s.quotas[0][1] > 0]
    if periods:
        return max(set(periods), key=periods.count) * 1000, "the timeline's period_us"
    if meta is not None and meta.period_ns:
        return meta.period_ns, "the timeline's JSON"
    return DEFAULT_PERIOD_NS, "the kernel's default (the record does not say)"


def _epoch(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return round(datetime.fromisoformat(text).timestamp() * 1e9)
    except ValueError:
        return None


def read_recording(path: Path) -> Recording:
    """The timeline at ``path`` and its JSON (``<name>.json``; a run's or ``record``'s)."""
    samples = timeline_rows(path)
    meta = read_timeline_metadata(timeline_meta_path(path))
    period_ns, source = _period(samples, meta)
    zero: int | None = None
    exact = False
    if meta is not None and meta.clock is not None:
        zero, exact = meta.clock.zero_epoch_ns, True
    elif meta is not None:
        zero = _epoch(meta.started_at)
    return Recording(path, samples, meta, period_ns, source, _limits(samples, meta), zero,
                     exact)


def _is_run_file(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError:
        return True   # read_run says why, in one line
    return recognise(head, RUN) is not None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def sent_closed(meta: RunMetadata) -> bool | None:
    """Whether a run sent its requests in a closed loop (an http-timing run's plan: one or
    ``--concurrency`` C at a time; an imported run's shape as its file, its format or the
    user said) or an open one (``--rate``, an access log); None when nothing says (a shape
    inferred from the requests or not known: the replay reads their gaps again; a capture)."""
    return _closed(run_shape(meta))


def _closed(shape: LoadShape | None) -> bool | None:
    return None if shape is None or shape.source in ("inferred", "unknown") else shape.closed


def _shape_says(shape: LoadShape | None) -> str:
    """What ``how`` adds on the load's shape, and what to give when it is not known."""
    if shape is None:
        return ""
    if not shape.known:
        return (f"; concurrency not known ({shape.why}): each sent at its recorded time, "
                "which under-states a closed loop's demand at a higher limit; if the tool "
                "kept C connections, import it with --concurrency C")
    return f"; {shape.describe()}"


def _run_records(path: Path, recording: Recording
                 ) -> tuple[list[RequestRecord], str, LoadShape | None]:
    """A run's requests on the recording's clock: by the run's clock zero (its JSON's
    ``clock.zero_epoch_ns``, which ``import`` uses too); an older run without one by its
    ``started_at``, taken before its warm-up, and the answer says so. And how they were sent
    (:func:`sent_closed`)."""
    run = read_run(path)
    shape = run_shape(run.metadata)
    says = _shape_says(shape)
    records = [_from_origin(r) for r in run.records]
    if _same_file(timeline_path(run.path), recording.path):
        return records, "on the run's own timeline (one clock)" + says, shape
    zero, how = run_zero_epoch_ns(run.metadata)
    if zero is None or recording.zero_epoch_ns is None:
        raise RawDataError(f"{path}: cannot place its requests on {recording.path}: "
                           "the run or the timeline does not say when it started")
    if not recording.zero_exact:
        how += "; the timeline's zero by its started_at (before its warm-up)"
    base = zero - recording.zero_epoch_ns
    return ([replace(r, start_ns=r.start_ns + base, scheduled_ns=r.start_ns + base
                     if r.scheduled_ns is not None else None) for r in records],
            how + says, shape)


def _from_origin(record: RequestRecord) -> RequestRecord:
    """An open loop's request from its intended send time (``scheduled_ns``), where its
    latency runs from: a client that fell behind a throttled server sent it late, and
    placed at that late send with the latency from the schedule, it ran past its end, its
    wall held the client's wait, and at another limit the replay would send it late again,
    where a limit that keeps up sends it on time (issue 57's matrix: go's open loop at 0.3
    CPU, sent up to 640 ms late, advised 0.753 CPU where live met the goal at 0.384)."""
    if record.scheduled_ns is None:
        return record
    return replace(record, start_ns=record.scheduled_ns)


def _imported_records(path: Path, recording: Recording, start_epoch_ns: int | None,
                      offset_ns: int
                      ) -> tuple[list[RequestRecord], str, LoadShape, bool]:
    imported = read_results(path)
    if recording.zero_epoch_ns is None:
        raise RawDataError(f"{recording.path}: its JSON has no clock to place {path}'s "
                           "requests on (expected the JSON 'http-timing record' writes)")
    relative = imported.clock != EPOCH
    try:
        records = place_requests(imported, recording.zero_epoch_ns,
                                 start_epoch_ns if relative else None, offset_ns)
    except ValueError:
        raise RawDataError(
            f"{path}: {imported.format} times are relative to the tool's own start: give "
            "--start EPOCH (date +%s.%N just before it ran; advise --passive takes it and "
            "lines the requests up with the throttling), or make it a run with http-timing "
            f"import {path} --timeline {recording.path} --start EPOCH and give that run's CSV"
            ) from None
    shape = shape_of(imported, records)
    how = ("by the tool's start (--start) and its relative times" if relative else
           "by their Unix times") + f" ({imported.format})"
    return records, how + _shape_says(shape), shape, relative


def _outside(path: Path, records: list[RequestRecord], recording: Recording, how: str) -> str:
    """The line for a requests file none of whose requests lies inside the timeline: when
    each was, what that means, and what to give."""
    zero = recording.zero_epoch_ns

    def when(t_ns: int) -> str:
        if zero is None:
            return f"{t_ns / 1e9:+.1f} s"
        return datetime.fromtimestamp((zero + t_ns) / 1e9, timezone.utc).strftime("%H:%M:%S")

    span = (f"requests {when(min(r.start_ns for r in records))} to "
            f"{when(max(r.end_ns for r in records))}, " if records else "")
    return (f"{path}: none of its {len(records)} requests lies inside the timeline's window "
            f"({span}{recording.path} {when(recording.samples[0].t_ns)} to "
            f"{when(recording.samples[-1].t_ns)} UTC; placed {how.split('; ')[0]}): the "
            "timeline was recorded at another time or the file's clock is off; give the "
            "timeline recorded during the load, or import the file with --start or --offset")


def read_requests(path: Path, recording: Recording, start_epoch_ns: int | None = None,
                  offset_ns: int = 0) -> Placed:
    """The requests of ``path`` on the recording's clock (see the module's docstring): a
    file with relative times (hey, oha) by the tool's start, ``start_epoch_ns``; another
    tool's file moved by ``offset_ns`` (a clock check's shift)."""
    if not path.exists():
        raise RawDataError(f"{path}: no such file")
    if path.is_dir():
        raise RawDataError(f"{path}: is a directory, not a file of requests")
    relative = False
    shape: LoadShape | None
    if run_file := _is_run_file(path):
        records, how, shape = _run_records(path, recording)
    else:
        records, how, shape, relative = _imported_records(path, recording, start_epoch_ns,
                                                          offset_ns)
    first, last = recording.samples[0].t_ns, recording.samples[-1].t_ns
    ok = [r for r in records if not r.error]
    inside = [r for r in ok if first <= r.start_ns and r.start_ns + r.latency_ns <= last]
    if not inside:
        raise RawDataError(_outside(path, records, recording, how))
    walls = held([(r.start_ns, r.start_ns + r.latency_ns) for r in inside],
                 [recording.samples], [recording.period_ns])
    partial = tuple((r.start_ns, r.latency_ns, r.server_cpu_ns or 0) for r in ok
                    if r.start_ns < last and r.start_ns + r.latency_ns > first
                    and not (first <= r.start_ns and r.start_ns + r.latency_ns <= last))
    return Placed(inside, walls, len(ok) - len(inside), len(records) - len(ok), how,
                  _closed(shape), relative, shape,
                  "the run's JSON" if run_file else f"the file ({path.name})", not run_file,
                  partial)
