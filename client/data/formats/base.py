"""What every file format is, and what the formats share.

A format is told a file's first bytes (``head``: at most :data:`HEAD_BYTES`), so it is
recognised by what the file holds, never by its name. It says what it is for (``use``):

- :data:`RUN`: a run file (:class:`RunFormat`): ``report``, ``plot`` and ``compare`` read it
  directly, as request records;
- :data:`RESULTS`: another tool's results or an access log (:class:`ResultsFormat`):
  ``import`` reads it as :class:`Imported` and joins it to a service's timeline.

The reading they share: a file's bytes (gzip too) and text (:func:`read_bytes`,
:func:`read_text`), lines of a head, CSV tables, one-line errors naming the file and the line
(:class:`ImportFileError`), RFC 3339 times and decimal seconds to ns.

Times of results: a format gives each request's **start** and latency in ns. ``clock`` says
what the start is counted from: ``"epoch"`` (Unix ns, the tool's wall clock) or
``"relative"`` (ns since the tool's own start, which the file does not say: hey, oha). A
format whose file has the request's end (k6, nginx) turns it into the start itself.
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import NoReturn, Protocol

from client.data.loadshape import LoadShape
from client.data.record import RawDataError, RequestRecord

__all__ = ["EPOCH", "HEAD_BYTES", "RELATIVE", "RESULTS", "RUN", "ImportFileError", "Imported",
           "ImportedRequest", "ResultsFormat", "RunFormat", "bad_line", "gunzipped_head",
           "head_lines", "read_bytes", "read_text", "rfc3339_ns", "seconds_ns", "table_rows"]

HEAD_BYTES = 64 * 1024   # what a format sees of a file to recognise it

RUN = "run"            # a run file: report, plot and compare read it directly
RESULTS = "results"    # another tool's results: import joins them to a timeline

EPOCH, RELATIVE = "epoch", "relative"


class ImportFileError(RawDataError):
    """A file that cannot be read as its format: one line naming the file (and the line) and
    what was expected. Its name is import's, which met it first; :func:`read_bytes` raises it
    for any format."""


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
    shape: LoadShape | None = None   # how the requests were sent, when the file says


class RunFormat(Protocol):
    name: str       # how the format is called (e.g. ``http-timing-csv``)
    use: str        # RUN
    expected: str   # what a file of this format looks like, for a file no format recognises

    def recognises(self, head: bytes) -> bool:
        """Whether ``head`` (the file's first bytes, possibly cut mid-line) is this format."""

    def read(self, path: Path) -> list[RequestRecord]:
        """Every request of the file; ``RawDataError`` (one line) when it cannot be read."""


class ResultsFormat(Protocol):
    name: str          # how the format is called, and import's ``--format`` (``vegeta-csv``)
    use: str           # RESULTS
    description: str   # the tool, the command that writes the file, and its time semantics

    def recognises(self, head: bytes) -> bool:
        """Whether a file starting with ``head`` (its first bytes, gunzipped) is this format."""

    def read(self, path: Path) -> Imported:
        """The requests (``ImportFileError``, one line naming the line, when it is not)."""


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


def read_text(path: Path, expected: str = "") -> str:
    """The whole file (gunzipped) as UTF-8 text; ``ImportFileError`` naming the file (and what
    was ``expected`` of it, if said) when it is not text."""
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        said = f" (expected {expected})" if expected else ""
        raise ImportFileError(f"{path}: not a text file{said}") from None


def gunzipped_head(head: bytes) -> bytes | None:
    """``head`` as a format sees it: gunzipped when it is gzip (at most :data:`HEAD_BYTES`);
    None when it is broken gzip."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, HEAD_BYTES)
        except zlib.error:
            return None
    return head[:HEAD_BYTES]


def head_lines(head: bytes) -> list[str]:
    """The lines of a file's first bytes as text (undecodable bytes replaced; the last line
    may be cut short)."""
    return head.decode("utf-8", errors="replace").splitlines()


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
