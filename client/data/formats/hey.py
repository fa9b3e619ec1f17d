"""hey's ``-o csv`` (requester/print.go): ``response-time,DNS+dialup,DNS,Request-write,
Response-delay,Response-read,status-code,offset``, seconds with 4 decimals. ``offset`` is the
request's start since **hey's own start**, which the file does not say: the import needs
``--start EPOCH`` (or takes the estimate's advice). Errored requests are not in the file."""

from __future__ import annotations

from pathlib import Path

from client.data.formats.base import (RELATIVE, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, seconds_ns, table_rows)

__all__ = ["HeyCsv"]

_HEADER = "response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset"


class HeyCsv:
    name = "hey-csv"
    use = RESULTS
    description = "hey -o csv (offset: seconds since hey started: needs --start)"

    def recognises(self, head: bytes) -> bool:
        return head.lstrip().startswith(_HEADER.encode())

    def read(self, path: Path) -> Imported:
        requests = []
        for line_no, row in table_rows(path, read_text(path), tuple(_HEADER.split(",")),
                                       "hey -o csv"):
            try:
                latency, offset = seconds_ns(row["response-time"]), seconds_ns(row["offset"])
                status = int(row["status-code"])
            except ValueError:
                bad_line(path, line_no, "expected seconds in response-time and offset and an "
                         "integer status-code (hey -o csv)")
            error = "" if 200 <= status < 400 else f"HTTP {status}"
            requests.append(ImportedRequest(offset, latency, status, error))
        return Imported(self.name, RELATIVE, requests)
