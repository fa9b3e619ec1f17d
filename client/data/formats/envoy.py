"""Envoy access logs (docs: configuration/observability/access_log/usage): the default format
``[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ...`` and a JSON
format (``json_format``) with the keys ``start_time`` (``%START_TIME%``, RFC 3339, or
``%START_TIME(%s.%6f)%``, Unix seconds), ``duration`` (``%DURATION%``, ms) and
``response_code`` (``%RESPONSE_CODE%``). ``START_TIME`` is the request's start; ``DURATION``
the ms until the last byte went out; code 0: no answer. Envoy does not run here: the tests
use lines written as its documentation shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, rfc3339_ns, seconds_ns)

__all__ = ["EnvoyDefault", "EnvoyJson"]

_LINE = re.compile(r'^\[(?P<start>[^\]]+)\] "(?P<request>[^"]*)" (?P<code>\d+) \S+ \d+ \d+ '
                   r'(?P<duration>\d+|-)(?: |$)')


def _error(status: int) -> str:
    return "" if 200 <= status < 400 else "no answer" if status == 0 else f"HTTP {status}"


def _start_ns(text: str) -> int:
    text = text.strip()
    return seconds_ns(text) if re.fullmatch(r"\d+(\.\d+)?", text) else rfc3339_ns(text)


class EnvoyDefault:
    name = "envoy"
    use = RESULTS
    description = "Envoy default access log ([START_TIME] ... DURATION ms)"

    def recognises(self, head: bytes) -> bool:
        first = head.decode("utf-8", "replace").lstrip().split("\n", 1)[0]
        return bool(_LINE.match(first))

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            match = _LINE.match(line)
            if not match or match["duration"] == "-":
                bad_line(path, line_no, "expected Envoy's default format: [START_TIME] "
                         '"METHOD PATH PROTOCOL" CODE FLAGS BYTES_RECEIVED BYTES_SENT DURATION')
            try:
                start = _start_ns(match["start"])
            except ValueError:
                bad_line(path, line_no, f"expected START_TIME as RFC 3339, got {match['start']!r}")
            status = int(match["code"])
            requests.append(ImportedRequest(start, int(match["duration"]) * 1_000_000, status,
                                            _error(status)))
            parts = match["request"].split()
            url = url or (parts[1] if len(parts) >= 2 else "")
        return Imported(self.name, EPOCH, requests, url=url)


class EnvoyJson:
    name = "envoy-json"
    use = RESULTS
    description = "Envoy JSON access log (start_time, duration ms, response_code)"

    def recognises(self, head: bytes) -> bool:
        first = head.lstrip().split(b"\n", 1)[0]
        return first.startswith(b"{") and b'"start_time"' in first and b'"duration"' in first

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                start = _start_ns(str(obj["start_time"]))
                latency = round(float(obj["duration"]) * 1_000_000)
                status = int(obj.get("response_code") or 0)
            except (ValueError, KeyError, TypeError, AttributeError):
                bad_line(path, line_no, "expected a JSON object with start_time (%START_TIME%), "
                         "duration (%DURATION%, ms) and response_code (Envoy json_format)")
            url = url or str(obj.get("path") or "")
            requests.append(ImportedRequest(start, latency, status, _error(status)))
        return Imported(self.name, EPOCH, requests, url=url)
