"""Locust's per-request CSV (``locust.contrib.csv_request_logger.CsvRequestLogger``, Locust
>= 2.44): ``timestamp,request_type,name,response_time_ms,response_length,status_code,
exception``; ``timestamp`` Unix seconds (float) when the request was sent; ``status_code`` 0
when no answer came. (Locust's own ``--csv`` files are aggregates, not requests.)"""

from __future__ import annotations

from pathlib import Path

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, seconds_ns, table_rows)

__all__ = ["LocustCsv"]

_HEADER = ("timestamp", "request_type", "name", "response_time_ms", "response_length",
           "status_code", "exception")


class LocustCsv:
    name = "locust-csv"
    use = RESULTS
    description = "Locust CsvRequestLogger (timestamp: Unix s at send; response_time_ms)"

    def recognises(self, head: bytes) -> bool:
        return head.lstrip().startswith(",".join(_HEADER).encode())

    def read(self, path: Path) -> Imported:
        requests = []
        for line_no, row in table_rows(path, read_text(path), _HEADER, "Locust CsvRequestLogger"):
            try:
                start = seconds_ns(row["timestamp"])
                latency = round(float(row["response_time_ms"]) * 1e6)
                status = int(row["status_code"])
            except ValueError:
                bad_line(path, line_no, "expected Unix seconds in timestamp, ms in "
                         "response_time_ms and an integer status_code (Locust)")
            error = " ".join(row["exception"].split()) or (
                "" if 200 <= status < 400 else "no answer" if status == 0 else f"HTTP {status}")
            requests.append(ImportedRequest(start, latency, status, error))
        return Imported(self.name, EPOCH, requests)
