"""What an importer gives (:class:`Imported`, a list of :class:`ImportedRequest`) and the
helpers the readers share: reading a file (gzip too), one-line errors naming the file and the
line (:class:`ImportFileError`), RFC 3339 times to Unix ns.

Times: an importer gives each request's **start** and latency in ns. ``clock`` says what the
start is counted from: ``"epoch"`` (Unix ns, the tool's wall clock) or ``"relative"`` (ns since
the tool's own start, which the file does not say: hey, oha). An importer whose file has the
request's end (k6, nginx) turns it into the start itself.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from client.data.record import RawDataError, RequestRecord

__all__ = ["EPOCH", "RELATIVE", "ImportFileError", "Imported", "ImportedRequest", "bad_line",
           "table_rows",
           "rfc3339_ns", "read_bytes", "read_text", "seconds_ns"]

EPOCH, RELATIVE = "epoch", "relative"


class ImportFileError(RawDataError):
    """A results file that cannot be imported: one line naming the file, the line, and what
    was expected."""


@dataclass(frozen=True)
class ImportedRequest:
    start_ns: int          # Unix ns (clock "epoch") or ns since the tool's start ("relative")
    latency_ns: int
    status: int            # 0: no answer (transport error)
    error: str = ""
    upstream: str = ""     # the server that answered it (a proxy's log: "10.42.0.7:8000")
    kept: RequestRecord | None = None   # http-timing's own row, kept whole (start on its clock)


@dataclass
class Imported:
    format: str
    clock: str                      # EPOCH or RELATIVE
    requests: list[ImportedRequest]
    url: str = ""
    anchor_epoch_ns: int | None = None   # a relative file's coarse start (oha's ``run``), if any
    notes: list[str] = field(default_factory=list)
    # the starts are known only to this step (Traefik's CLF: whole seconds); 0: to the ns/µs/ms
    # the file writes, fine enough to place a request among a quota's periods
    start_step_ns: int = 0
    upstreams: bool = False   # whether the format names each request's upstream


def bad_line(path: Path, line: int | None, expected: str) -> NoReturn:
    where = f"{path}: line {line}" if line is not None else str(path)
    raise ImportFileError(f"{where}: {expected}")


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is gzip (k6 writes ``.gz`` when asked)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImportFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ImportFileError(f"{path}: is a directory, not a results file") from None
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ImportFileError(f"{path}: a broken gzip file ({exc})") from None
    return data


def read_text(path: Path) -> str:
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ImportFileError(f"{path}: not a text file") from None


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|z|[+-]\d\d:?\d\d)$")


def rfc3339_ns(text: str) -> int:
    """``2017-05-09T14:34:45.239531499+02:00`` -> Unix ns (``ValueError`` otherwise)."""
    match = _RFC3339.match(text.strip())
    if not match:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    main, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    seconds = int(datetime.fromisoformat(main.replace(" ", "T") + zone).timestamp())
    return seconds * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


def seconds_ns(text: str) -> int:
    """A decimal number of seconds (``"1.2345"``) -> ns, exactly (no float rounding)."""
    text = text.strip()
    if not re.fullmatch(r"-?\d+(\.\d*)?|-?\.\d+", text):
        raise ValueError(f"not a number of seconds: {text!r}")
    negative = text.startswith("-")
    whole, _, fraction = text.lstrip("-").partition(".")
    ns = int(whole or "0") * 1_000_000_000 + int((fraction[:9]).ljust(9, "0"))
    return -ns if negative else ns


def table_rows(path: Path, text: str, required: tuple[str, ...], what: str
               ) -> list[tuple[int, dict[str, str]]]:
    """A CSV with a header: ``(line number, row)`` for each data row; a one-line error when a
    ``required`` column is missing or a row has the wrong number of fields."""
    import csv

    lines = text.splitlines()
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        bad_line(path, None, f"empty (expected {what})")
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        bad_line(path, 1, f"expected {what}: a header with {', '.join(required)} "
                 f"(missing {', '.join(missing)})")
    rows: list[tuple[int, dict[str, str]]] = []
    for line_no, row in enumerate(reader, start=2):
        if not row or row == [""]:
            continue
        if len(row) != len(header):
            bad_line(path, line_no, f"{len(row)} fields, expected {len(header)} ({what})")
        rows.append((line_no, dict(zip(header, row))))
    return rows
