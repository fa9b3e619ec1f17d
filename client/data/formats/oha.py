"""oha's per-request results (src/printer.rs, src/db.rs): ``--output-format csv``
(``request-start,DNS,DNS+dialup,Response-delay,request-duration,bytes,status``; successes
only) and ``--db-url FILE`` (SQLite table ``oha``: ``start``, ``end``, ``duration``,
``status``, ``url``, ``run``). Times are seconds since **oha's own start**, so the import
needs ``--start EPOCH``; the SQLite ``run`` column (the launch time in whole Unix seconds) is
kept as a coarse hint, never used as the start."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from client.data.formats.base import (RELATIVE, RESULTS, ImportFileError, Imported,
                                      ImportedRequest, bad_line, read_bytes, read_text,
                                      seconds_ns, table_rows)

__all__ = ["OhaCsv", "OhaSqlite"]

_HEADER = "request-start,DNS,DNS+dialup,Response-delay,request-duration,bytes,status"
SQLITE_MAGIC = b"SQLite format 3\x00"


def _error(status: int) -> str:
    return "" if 200 <= status < 400 else f"HTTP {status}"


class OhaCsv:
    name = "oha-csv"
    use = RESULTS
    description = "oha --output-format csv (request-start: seconds since oha started: needs --start)"

    def recognises(self, head: bytes) -> bool:
        return head.lstrip().startswith(_HEADER.encode())

    def read(self, path: Path) -> Imported:
        requests = []
        for line_no, row in table_rows(path, read_text(path), tuple(_HEADER.split(",")),
                                       "oha --output-format csv"):
            try:
                start = seconds_ns(row["request-start"])
                latency = seconds_ns(row["request-duration"])
                status = int(row["status"])
            except ValueError:
                bad_line(path, line_no, "expected seconds in request-start and "
                         "request-duration and an integer status (oha csv)")
            requests.append(ImportedRequest(start, latency, status, _error(status)))
        return Imported(self.name, RELATIVE, requests)


class OhaSqlite:
    name = "oha-sqlite"
    use = RESULTS
    description = "oha --db-url FILE (SQLite; start: seconds since oha started: needs --start)"

    def recognises(self, head: bytes) -> bool:
        return head.startswith(SQLITE_MAGIC)

    def read(self, path: Path) -> Imported:
        if not read_bytes(path).startswith(SQLITE_MAGIC):
            raise ImportFileError(f"{path}: not an SQLite file (expected oha --db-url)")
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                rows = db.execute("SELECT start, duration, status, url, run FROM oha "
                                  "ORDER BY rowid").fetchall()
            db.close()
        except sqlite3.Error as exc:
            raise ImportFileError(f"{path}: expected oha's table oha(start, duration, status, "
                                  f"url, run): {exc}") from None
        requests, url, run = [], "", None
        for number, (start, duration, status, row_url, row_run) in enumerate(rows, start=1):
            if not all(isinstance(v, (int, float)) for v in (start, duration, status)):
                bad_line(path, None, f"row {number} of table oha: expected numbers in start, "
                         "duration and status")
            requests.append(ImportedRequest(round(start * 1e9), round(duration * 1e9),
                                            int(status), _error(int(status))))
            url, run = url or str(row_url or ""), run if run is not None else row_run
        anchor = int(run) * 1_000_000_000 if isinstance(run, int) else None
        return Imported(self.name, RELATIVE, requests, url=url, anchor_epoch_ns=anchor)
