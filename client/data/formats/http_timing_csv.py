"""The CSV ``http-timing`` writes (:class:`client.data.files.RunWriter`): a header line of the
columns of :mod:`client.data.record`, then one row per request. Recognised by its header: a
first line that starts with ``seq,`` or has a ``latency_ns`` column.

Every row is written whole with its newline, so a last row without one is a row cut short (the
run was interrupted while writing it, or the file was copied while it was): it is skipped with
one line on stderr and the rows before it are read. A bad row anywhere else is an error."""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from client.data.formats.base import RUN, head_lines, read_text
from client.data.record import INT_COLUMNS, REQUIRED_COLUMNS, RawDataError, RequestRecord

__all__ = ["HttpTimingCsvReader"]


class HttpTimingCsvReader:
    name = "http-timing-csv"
    use = RUN
    expected = "an http-timing CSV (a header line like 'seq,start_ns,latency_ns,status,...')"

    def recognises(self, head: bytes) -> bool:
        lines = [line for line in head_lines(head) if line.strip()]
        if not lines:
            return False
        first = lines[0].strip()
        return first.startswith("seq,") or "latency_ns" in first.split(",")

    def read(self, path: Path) -> list[RequestRecord]:
        text = read_text(path, self.expected)
        lines = text.splitlines()
        header = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
        if lines and len(lines) - 1 > header and not text.endswith(("\n", "\r")):
            print(f"{path}: line {len(lines)} is cut short (the run was interrupted while "
                  "writing it): skipped", file=sys.stderr)
            lines.pop()
        return list(_rows(path, lines, header))


def _rows(path: Path, lines: list[str], blank: int) -> Iterator[RequestRecord]:
    reader = csv.DictReader(lines[blank:])
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise RawDataError(f"{path}: not an http-timing CSV: missing column(s) "
                           f"{', '.join(missing)}")
    for line_no, row in enumerate(reader, start=blank + 2):
        values: dict[str, Any] = {}
        try:
            for name in INT_COLUMNS:
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
            raise RawDataError(f"{path}: line {line_no}: {exc}") from None
        yield RequestRecord(error=(row.get("error") or ""), **values)
