"""Raw data: one CSV row per request, flushed as it completes, plus a JSON metadata file.

``<name>.csv`` columns (times in integer nanoseconds; empty where unknown):

- ``seq``: request number, from 0
- ``start_ns``: when the request was sent, since the run started (monotonic clock)
- ``latency_ns``: time until the whole response was read
- ``status``: HTTP status, 0 when the request failed in transport (refused, timeout, ...)
- ``error``: the transport error or ``HTTP <status>``; empty on success
- ``server_wall_ns``, ``server_cpu_ns``, ``server_throttle_ns``, ``kernel_throttled_ns``,
  ``kernel_nr_throttled``: from the response's ``Server-Timing`` header, when present

``read_run`` also reads the original ``http-timing.py``'s text output
(``26 Status code 200 time 5207306``), so old captures can be plotted and reported.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from client.servertiming import SERVER_FIELDS

__all__ = ["COLUMNS", "RawDataError", "RequestRecord", "Run", "RunWriter", "parse_legacy_text",
           "read_run", "write_metadata"]

REQUIRED_COLUMNS = ("seq", "start_ns", "latency_ns", "status")
COLUMNS = (*REQUIRED_COLUMNS, "error", "scheduled_ns", *SERVER_FIELDS)
_INT_COLUMNS = tuple(c for c in COLUMNS if c != "error")
LEGACY_LINE = re.compile(r"^\s*(\d+)\s+Status code\s+(\d+)\s+time\s+(\d+)\s*$")


class RawDataError(ValueError):
    """A file that cannot be read as a run; the message says which file and why, in one line."""


@dataclass
class RequestRecord:
    seq: int
    start_ns: int
    latency_ns: int
    status: int
    error: str = ""
    scheduled_ns: int | None = None  # intended send time (open-loop runs); None when closed loop
    server_wall_ns: int | None = None
    server_cpu_ns: int | None = None
    server_throttle_ns: int | None = None
    kernel_throttled_ns: int | None = None
    kernel_nr_throttled: int | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 400

    @property
    def latency_ms(self) -> float:
        return self.latency_ns / 1e6

    @property
    def origin_ns(self) -> int:
        """Where the latency starts: the intended send time in an open loop, else the send."""
        return self.start_ns if self.scheduled_ns is None else self.scheduled_ns

    @property
    def server_throttled(self) -> bool | None:
        """Whether the server said it was throttled during this request; None if it cannot tell."""
        known = [v for v in (self.kernel_nr_throttled, self.server_throttle_ns) if v is not None]
        if not known:
            return None
        return any(v > 0 for v in known)

    def to_row(self) -> dict[str, Any]:
        return {f.name: "" if getattr(self, f.name) is None else getattr(self, f.name)
                for f in fields(self)}


@dataclass
class Run:
    """A recorded run: its requests and the metadata saved with it (empty for text captures)."""

    path: Path
    records: list[RequestRecord]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or self.path.stem)


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


def write_metadata(path: Path, metadata: dict[str, Any]) -> None:
    """Write the metadata JSON atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def read_run(path: str | os.PathLike[str]) -> Run:
    """Read a run from its CSV (metadata from the JSON beside it), its JSON, or a text capture."""
    p = Path(path)
    if p.suffix == ".json" and p.with_suffix(".csv").exists():
        p = p.with_suffix(".csv")
    if not p.exists():
        raise RawDataError(f"{p}: no such file")
    if p.is_dir():
        raise RawDataError(f"{p}: is a directory, not a run file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RawDataError(f"{p}: not a text file (expected a CSV run or an http-timing "
                           "text capture)") from None
    except OSError as exc:
        raise RawDataError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if not text.strip():
        raise RawDataError(f"{p}: empty file")
    first = text.lstrip().splitlines()[0]
    if first.startswith("seq,") or "latency_ns" in first.split(","):
        records = list(_parse_csv(p, text))
    else:
        records = parse_legacy_text(text.splitlines(), source=str(p))
    metadata: dict[str, Any] = {}
    meta_path = p.with_suffix(".json")
    if meta_path.exists() and meta_path != p:
        try:
            metadata = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            metadata = {}  # a broken metadata file does not lose the requests
        if not isinstance(metadata, dict):
            metadata = {}
    return Run(p, records, metadata)


def _parse_csv(p: Path, text: str) -> Iterator[RequestRecord]:
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise RawDataError(f"{p}: not an http-timing CSV: missing column(s) {', '.join(missing)}")
    for line_no, row in enumerate(reader, start=2):
        values: dict[str, Any] = {}
        try:
            for name in _INT_COLUMNS:
                raw = (row.get(name) or "").strip()
                if raw == "":
                    if name in REQUIRED_COLUMNS:
                        raise ValueError(f"empty {name}")
                    continue
                number = float(raw)
                if not math.isfinite(number):
                    raise ValueError(f"{name} is not a finite number")
                values[name] = int(number)
        except ValueError as exc:
            raise RawDataError(f"{p}: line {line_no}: {exc}") from None
        yield RequestRecord(error=(row.get("error") or ""), **values)


def _legacy_error(status: int) -> str:
    if 200 <= status < 400:
        return ""
    return "transport error" if status == 0 else f"HTTP {status}"


def parse_legacy_text(lines: Iterable[str], source: str = "<text>") -> list[RequestRecord]:
    """Records from the original script's lines ``<ms since start> Status code <code> time <ns>``."""
    records: list[RequestRecord] = []
    for line in lines:
        match = LEGACY_LINE.match(line)
        if match:
            ms, status, latency = (int(g) for g in match.groups())
            records.append(RequestRecord(seq=len(records), start_ns=ms * 1_000_000,
                                         latency_ns=latency, status=status,
                                         error=_legacy_error(status)))
    if not records:
        raise RawDataError(f"{source}: neither an http-timing CSV nor text lines like "
                           "'26 Status code 200 time 5207306'")
    return records
