"""Raw data on disk: one CSV row per request, flushed as it completes, plus a JSON metadata file.

``<name>.csv`` has the columns of :mod:`client.data.record`; ``<name>.json`` the metadata of
:mod:`client.data.metadata`. ``read_run`` reads a run from its CSV (the metadata beside it), its
JSON, or any other format a reader recognises (:mod:`client.data.readers`: a text capture of
the original ``http-timing.py``, ...). A file that cannot be read gives a
:class:`RawDataError` naming it, in one line.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from client.data.metadata import RunMetadata
from client.data.readers import HEAD_BYTES, reader_for
from client.data.record import COLUMNS, RawDataError, RequestRecord
from client.data.timeline import CgroupSample, read_timeline, timeline_path

__all__ = ["RawDataError", "Run", "RunWriter", "read_run", "rewrite_rows", "write_metadata"]


@dataclass
class Run:
    """A recorded run: its requests and the metadata saved with it (``present`` False for a
    text capture)."""

    path: Path
    records: list[RequestRecord]
    metadata: RunMetadata = field(default_factory=RunMetadata.missing)
    timeline: list[CgroupSample] | None = None   # the watched group's (``<name>.cgroup.csv``)

    @property
    def name(self) -> str:
        return self.metadata.name or self.path.stem


class RunWriter:
    """Appends one CSV row per completed request and flushes it, so an interrupted run keeps
    every completed request (a row is written whole or not at all)."""

    def __init__(self, csv_path: Path) -> None:
        self.path = csv_path
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = open(csv_path, "w", newline="", encoding="utf-8")
        # rows are formatted in memory first (one writer, made once), then written whole
        self._line = io.StringIO()
        self._writer = csv.DictWriter(self._line, fieldnames=COLUMNS, lineterminator="\n")
        self._writer.writeheader()
        self._file.write(self._line.getvalue())
        self._file.flush()
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        row = record.to_row()
        row["error"] = " ".join(str(row["error"]).split())  # one line, no stray newlines
        self._line.seek(0)
        self._line.truncate()
        self._writer.writerow(row)
        self._file.write(self._line.getvalue())  # one write per row: never half a row
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rewrite_rows(csv_path: Path, records: Iterable[RequestRecord]) -> None:
    """Write the run's CSV again with ``records`` (columns filled in after the run), atomically:
    a reader sees the old file or the new one, never half of one."""
    tmp = csv_path.with_name(csv_path.name + ".tmp")
    with RunWriter(tmp) as writer:
        for record in records:
            writer.write(record)
    os.replace(tmp, csv_path)


def write_metadata(path: Path, metadata: RunMetadata) -> None:
    """Write the metadata JSON atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(metadata.to_dict(), indent=2, sort_keys=True, default=str) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def read_run(path: str | os.PathLike[str]) -> Run:
    """Read a run from its file (the metadata from the JSON beside it; the JSON finds its CSV),
    in whichever format a reader of ``client.data.readers`` recognises."""
    p = Path(path)
    if p.suffix == ".json" and p.with_suffix(".csv").exists():
        p = p.with_suffix(".csv")
    if not p.exists():
        raise RawDataError(f"{p}: no such file")
    if p.is_dir():
        raise RawDataError(f"{p}: is a directory, not a run file")
    try:
        with p.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError as exc:
        raise RawDataError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if not head.strip():
        raise RawDataError(f"{p}: empty file")
    records = reader_for(p, head).read(p)
    timeline = timeline_path(p)
    return Run(p, records, _read_metadata(p.with_suffix(".json"), p),
               read_timeline(timeline) if timeline.exists() and timeline != p else None)


def _read_metadata(meta_path: Path, run_path: Path) -> RunMetadata:
    if not meta_path.exists() or meta_path == run_path:
        return RunMetadata.missing()
    try:
        raw = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = None  # a broken metadata file does not lose the requests
    return RunMetadata.from_dict(raw) if isinstance(raw, dict) else RunMetadata.missing()
