"""vegeta's results, encoded: ``vegeta encode --to csv`` and ``--to json`` (lib/results.go).

CSV, no header: ``timestamp`` (Unix ns, taken before the request was sent), ``code``,
``latency`` (ns, until the body was read), ``bytes_out``, ``bytes_in``, ``error``, ``body``
(base64), ``attack``, ``seq``, ``method``, ``url``, ``headers`` (base64). JSON, one object per
line: the same fields, ``timestamp`` in RFC 3339 with ns. Code 0 = no answer.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, rfc3339_ns)

__all__ = ["VegetaCsv", "VegetaJson"]

_CSV_FIELDS = 12
_CSV_START = re.compile(rb"^\d{18,20},\d{1,3},\d+,\d+,\d+,")


class VegetaCsv:
    name = "vegeta-csv"
    use = RESULTS
    description = "vegeta encode --to csv (start: Unix ns before sending; latency ns)"

    def recognises(self, head: bytes) -> bool:
        return bool(_CSV_START.match(head))

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, row in enumerate(csv.reader(read_text(path).splitlines()), start=1):
            if not row:
                continue
            if len(row) != _CSV_FIELDS:
                bad_line(path, line_no, f"{len(row)} fields, expected {_CSV_FIELDS} "
                         "(vegeta encode --to csv)")
            try:
                start, code, latency = int(row[0]), int(row[1]), int(row[2])
            except ValueError:
                bad_line(path, line_no, "expected integer timestamp (ns), code and latency "
                         "(ns) (vegeta encode --to csv)")
            url = url or row[10]
            requests.append(ImportedRequest(start, latency, code, _error(code, row[5])))
        return Imported(self.name, EPOCH, requests, url=url)


class VegetaJson:
    name = "vegeta-json"
    use = RESULTS
    description = "vegeta encode --to json (timestamp RFC 3339 ns, the start; latency ns)"

    def recognises(self, head: bytes) -> bool:
        first = head.lstrip().split(b"\n", 1)[0]
        return first.startswith(b"{") and all(
            key in first for key in (b'"attack"', b'"seq"', b'"latency"', b'"timestamp"'))

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                start, latency = rfc3339_ns(obj["timestamp"]), int(obj["latency"])
                code = int(obj["code"])
            except (ValueError, KeyError, TypeError):
                bad_line(path, line_no, "expected a JSON object with timestamp (RFC 3339), "
                         "latency (ns) and code (vegeta encode --to json)")
            url = url or str(obj.get("url") or "")
            requests.append(ImportedRequest(start, latency, code,
                                            _error(code, str(obj.get("error") or ""))))
        return Imported(self.name, EPOCH, requests, url=url)


def _error(code: int, error: str) -> str:
    if error:
        return " ".join(error.split())
    return "" if 200 <= code < 400 else ("no answer" if code == 0 else f"HTTP {code}")
