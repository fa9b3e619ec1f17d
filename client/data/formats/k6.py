"""k6's raw points: ``k6 run --out json=FILE`` and ``--out csv=FILE`` (``.gz``: gzipped).
Written from k6's documentation and source (internal/output/{json,csv}); k6 itself is not
installed here (AGPL).

Each request is an ``http_req_duration`` point: its value is the duration in ms (sending +
waiting + receiving: no DNS, connect or TLS), its time the request's **end** (the tracer's
``EndTime``), so the start is time - duration. The ``status`` tag is the HTTP status (0: no
answer). JSON: ``{"type":"Point","metric":"http_req_duration","data":{"time": RFC 3339 ns,
"value": ms, "tags": {...}}}``. CSV: ``metric_name,timestamp,metric_value,<tags...>``; the
``timestamp`` is whole Unix seconds by default, which cannot place a request in a 100 ms
period: such a file is refused (run k6 with ``K6_CSV_TIME_FORMAT=unix_nano``); ``unix_milli``,
``unix_micro``, ``unix_nano`` and ``rfc3339_nano`` are read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, rfc3339_ns, table_rows)

__all__ = ["K6Csv", "K6Json"]

METRIC = "http_req_duration"
_CSV_COLUMNS = ("metric_name", "timestamp", "metric_value")


def _request(end_ns: int, value_ms: float, tags: dict[str, str]) -> ImportedRequest:
    latency = round(value_ms * 1e6)
    status = int(tags.get("status") or 0)
    error = tags.get("error") or ("" if 200 <= status < 400 else
                                  "no answer" if status == 0 else f"HTTP {status}")
    return ImportedRequest(end_ns - latency, latency, status, " ".join(error.split()))


class K6Json:
    name = "k6-json"
    use = RESULTS
    description = ("k6 --out json (http_req_duration points; time = the request's END, "
                   "start = time - duration)")

    def recognises(self, head: bytes) -> bool:
        first = head.lstrip().split(b"\n", 1)[0]
        return first.startswith(b"{") and b'"type"' in first and b'"metric"' in first and (
            b'"Metric"' in first or b'"Point"' in first)

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if METRIC not in line:
                continue
            try:
                obj = json.loads(line)
                if obj.get("type") != "Point" or obj.get("metric") != METRIC:
                    continue
                data = obj["data"]
                tags = {str(k): str(v) for k, v in (data.get("tags") or {}).items()}
                requests.append(_request(rfc3339_ns(data["time"]), float(data["value"]), tags))
            except (ValueError, KeyError, TypeError, AttributeError):
                bad_line(path, line_no, f"expected a k6 JSON point of {METRIC} with "
                         "data.time (RFC 3339) and data.value (ms)")
            url = url or tags.get("url", "")
        return Imported(self.name, EPOCH, requests, url=url)


_UNITS = ((10**18, 1), (10**15, 1000), (10**12, 1_000_000))   # digits -> ns per unit


class K6Csv:
    name = "k6-csv"
    use = RESULTS
    description = ("k6 --out csv with K6_CSV_TIME_FORMAT=unix_nano (or unix_milli/micro, "
                   "rfc3339_nano); time = the request's END; whole seconds are refused")

    def recognises(self, head: bytes) -> bool:
        return head.lstrip().startswith(b"metric_name,timestamp,metric_value")

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, row in table_rows(path, read_text(path), _CSV_COLUMNS, "k6 --out csv"):
            if row["metric_name"] != METRIC:
                continue
            try:
                value = float(row["metric_value"])
            except ValueError:
                bad_line(path, line_no, "expected a number of ms in metric_value (k6 --out csv)")
            end = _end_ns(path, line_no, row["timestamp"])
            requests.append(_request(end, value, row))
            url = url or row.get("url", "")
        return Imported(self.name, EPOCH, requests, url=url)


def _end_ns(path: Path, line_no: int, text: str) -> int:
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        number = int(text)
        for floor, unit in _UNITS:
            if number >= floor:
                return number * unit
        bad_line(path, line_no, f"timestamp {text} is whole seconds (k6's default "
                 "timeFormat=unix): too coarse to place a request, and not guessed; run k6 "
                 "with K6_CSV_TIME_FORMAT=unix_nano")
    try:
        ns = rfc3339_ns(text)
    except ValueError:
        bad_line(path, line_no, f"expected a Unix timestamp or an RFC 3339 time, got {text!r}")
    if "." not in text:
        bad_line(path, line_no, f"timestamp {text} is whole seconds (timeFormat=rfc3339): "
                 "too coarse, not guessed; run k6 with K6_CSV_TIME_FORMAT=unix_nano")
    return ns
