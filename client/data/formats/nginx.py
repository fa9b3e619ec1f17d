"""An nginx access log with the request's time: the ``combined`` format plus ``$request_time``
and ``$msec`` at the end of the line. Add to the ``http`` block and use it::

    log_format timing '$remote_addr - $remote_user [$time_local] "$request" $status '
                      '$body_bytes_sent "$http_referer" "$http_user_agent" '
                      '$request_time $msec';
    access_log /var/log/nginx/access.log timing;

``$msec`` is when the log line was written (the request's end, Unix seconds with ms),
``$request_time`` the time since the first byte of the request was read (seconds with ms), so
the start is ``$msec - $request_time``. (The default ``combined`` has only ``$time_local``,
whole seconds: too coarse, refused.) Any other format with ``$msec`` and ``$request_time``
(ingress-nginx's ``upstreaminfo`` + ``$msec``...) is read with ``--log-format '...'``
(:class:`NginxLogFormat`)."""

from __future__ import annotations

import re
from pathlib import Path

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, seconds_ns)
from client.data.formats.nginx_format import parse_log_format

__all__ = ["LOG_FORMAT", "NginxLogFormat", "NginxTiming"]

LOG_FORMAT = ("log_format timing '$remote_addr - $remote_user [$time_local] \"$request\" "
              "$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" "
              "$request_time $msec';")
_LINE = re.compile(r'^\S+ - \S+ \[[^\]]+\] "(?P<request>(?:[^"\\]|\\.)*)" (?P<status>\d{3}) '
                   r'\S+ "(?:[^"\\]|\\.)*" "(?:[^"\\]|\\.)*" (?P<request_time>\d+\.\d+) '
                   r'(?P<msec>\d+\.\d+)$')
_COMBINED = re.compile(r'^\S+ - \S+ \[[^\]]+\] "[^"]*" \d{3} \S+ "[^"]*" "[^"]*"$')


class NginxTiming:
    name = "nginx"
    use = RESULTS
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


def _last_upstream(value: str) -> str:
    """``$upstream_addr`` -> the server that answered: the last of ``a, b`` (retries) or
    ``a : b`` (upstream groups); ``""`` for ``-``."""
    last = re.split(r", | : ", value.strip())[-1].strip()
    return "" if last == "-" else last


class NginxLogFormat:
    """An nginx access log in the user's own ``log_format`` (``--log-format``): any format
    with ``$msec`` and ``$request_time`` (``client.data.formats.nginx_format``)."""

    name = "nginx"
    use = RESULTS

    def __init__(self, log_format: str) -> None:
        self.format = parse_log_format(log_format)
        self.description = f"nginx access log, log_format {self.format.text!r}"

    def recognises(self, head: bytes) -> bool:
        first = head.decode("utf-8", "replace").lstrip().split("\n", 1)[0]
        return self.format.match(first) is not None

    def read(self, path: Path) -> Imported:
        requests, url = [], ""
        upstreams = "upstream_addr" in self.format.names
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            values = self.format.match(line)
            if values is None:
                bad_line(path, line_no, f"does not match the --log-format {self.format.text!r}")
            try:
                end, latency = seconds_ns(values["msec"]), seconds_ns(values["request_time"])
            except ValueError as exc:
                bad_line(path, line_no, str(exc))
            status = int(values["status"]) if values.get("status", "").isdigit() else 0
            error = "" if 200 <= status < 400 else "no status" if not status else f"HTTP {status}"
            requests.append(ImportedRequest(end - latency, latency, status, error,
                                            _last_upstream(values.get("upstream_addr", ""))))
            parts = values.get("request", "").split()
            url = url or values.get("request_uri", "") or (parts[1] if len(parts) >= 2 else "")
        return Imported(self.name, EPOCH, requests, url=url, upstreams=upstreams)
