"""An nginx access log with the request's time: the ``combined`` format plus ``$request_time``
and ``$msec`` at the end of the line. Add to the ``http`` block and use it::

    log_format timing '$remote_addr - $remote_user [$time_local] "$request" $status '
                      '$body_bytes_sent "$http_referer" "$http_user_agent" '
                      '$request_time $msec';
    access_log /var/log/nginx/access.log timing;

``$msec`` is when the log line was written (the request's end, Unix seconds with ms),
``$request_time`` the time since the first byte of the request was read (seconds with ms), so
the start is ``$msec - $request_time``. (The default ``combined`` has only ``$time_local``,
whole seconds: too coarse, refused.)"""

from __future__ import annotations

import re
from pathlib import Path

from client.data.imports.base import (EPOCH, Imported, ImportedRequest, bad_line, read_text,
                                      seconds_ns)

__all__ = ["LOG_FORMAT", "NginxTiming"]

LOG_FORMAT = ("log_format timing '$remote_addr - $remote_user [$time_local] \"$request\" "
              "$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" "
              "$request_time $msec';")
_LINE = re.compile(r'^\S+ - \S+ \[[^\]]+\] "(?P<request>(?:[^"\\]|\\.)*)" (?P<status>\d{3}) '
                   r'\S+ "(?:[^"\\]|\\.)*" "(?:[^"\\]|\\.)*" (?P<request_time>\d+\.\d+) '
                   r'(?P<msec>\d+\.\d+)$')
_COMBINED = re.compile(r'^\S+ - \S+ \[[^\]]+\] "[^"]*" \d{3} \S+ "[^"]*" "[^"]*"$')


class NginxTiming:
    name = "nginx"
    description = ("nginx access log, combined + $request_time $msec (start = $msec - "
                   "$request_time)")

    def recognises(self, head: bytes) -> bool:
        first = head.decode("utf-8", "replace").lstrip().split("\n", 1)[0]
        return bool(_LINE.match(first) or _COMBINED.match(first))

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            match = _LINE.match(line)
            if not match:
                bad_line(path, line_no, "expected the 'timing' log_format (combined + "
                         "$request_time $msec): " + LOG_FORMAT)
            end, latency = seconds_ns(match["msec"]), seconds_ns(match["request_time"])
            status = int(match["status"])
            error = "" if 200 <= status < 400 else f"HTTP {status}"
            requests.append(ImportedRequest(end - latency, latency, status, error))
            parts = match["request"].split()
            url = url or (parts[1] if len(parts) >= 2 else "")
        return Imported(self.name, EPOCH, requests, url=url)
