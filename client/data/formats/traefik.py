"""Traefik's access log (``--accesslog=true``; Traefik v2 and v3, source
``pkg/middlewares/accesslog``), in its two formats:

- the default, Traefik's CLF (``CommonLogFormatter``)::

    <client> - <user> [<StartUTC, 02/Jan/2006:15:04:05 -0700>] "<method> <path> <protocol>"
    <status> <size> "<referer>" "<user agent>" <RequestCount> "<router>" "<ServiceURL>" <N>ms

  ``[...]`` is the request's **start** (``StartUTC``, or ``StartLocal`` when StartUTC is
  dropped), in **whole seconds** (Go's time format truncates); ``<N>ms`` is ``Duration`` in
  whole ms (truncated). The start is therefore known only to the second: the request began
  somewhere in ``[T, T + 1 s)``, ten 100 ms periods. That cannot say which periods' throttling
  a request met, so ``http-timing import`` leaves a CLF log's requests unmarked (their
  latencies, statuses and percentiles are still read) and skips the clock check (no shift
  finer than the second can be told apart); ``--accesslog.format=json`` gives the start in ns.
- JSON (``--accesslog.format=json``, logrus' JSON formatter, one object a line):
  ``StartUTC`` (RFC 3339 with ns, the request's start; ``StartLocal`` the same in the local
  zone), ``Duration`` (ns, until the response was written, not the log line),
  ``OriginDuration`` (ns, the upstream's part) and ``Overhead`` (Duration - OriginDuration),
  ``DownstreamStatus`` (the status the client got; ``OriginStatus`` the upstream's),
  ``ServiceAddr`` (the upstream's ``IP:port``: the pod's address behind an Ingress),
  ``ServiceURL``, ``RouterName``, ``RequestPath``, ``RequestCount``.

Each request's upstream (ServiceAddr; the host and port of the CLF's ServiceURL) is kept, so
``import --upstream IP[:PORT]`` can keep only the requests one pod served. When Traefik's
access log goes to its stdout (``kubectl logs``), its own log lines are in between: they are
passed over and counted.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, rfc3339_ns)

__all__ = ["CLF_TIME_FORMAT", "TraefikClf", "TraefikJson", "service_addr"]

CLF_TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"   # Go's "02/Jan/2006:15:04:05 -0700"
SECOND_NS = 1_000_000_000
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_CLF = re.compile(r'^\S+ - \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d+|-) '
                  r'\S+ (?:' + _QUOTED + r'|-) (?:' + _QUOTED + r'|-) (?P<count>\S+) '
                  r'(?P<router>' + _QUOTED + r'|-) (?P<url>' + _QUOTED + r'|-) (?P<ms>\d+)ms$')
# Traefik's own log lines (zerolog console, or JSON with "level"/"message"), passed over
_OWN_TEXT = re.compile(r"^(\S+ )?(TRC|DBG|INF|WRN|ERR|FTL|PNC) ")


def _error(status: int) -> str:
    return "" if 200 <= status < 400 else "no answer" if status == 0 else f"HTTP {status}"


def service_addr(url: str) -> str:
    """``http://10.42.0.7:8000`` -> ``10.42.0.7:8000`` (the port the scheme implies when
    absent); ``""`` for ``-`` or nothing."""
    url = url.strip().strip('"')
    if not url or url == "-":
        return ""
    parts = urlsplit(url if "://" in url else "//" + url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"https": 443, "http": 80}.get(parts.scheme)
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def _skipped(skipped: int) -> list[str]:
    return ([f"{skipped} lines of Traefik's own log passed over"] if skipped else [])


class TraefikClf:
    name = "traefik"
    use = RESULTS
    description = ("Traefik access log, default CLF (start = [time], whole seconds; <N>ms "
                   "= Duration): requests read, left unmarked (use --accesslog.format=json)")

    def recognises(self, head: bytes) -> bool:
        lines = head.decode("utf-8", "replace").splitlines()[:-1] or [
            head.decode("utf-8", "replace")]
        return any(_CLF.match(line) for line in lines[:50])

    def read(self, path: Path) -> Imported:
        requests, url, skipped = [], "", 0
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            match = _CLF.match(line)
            if not match:
                if _OWN_TEXT.match(line) or line.lstrip().startswith("{"):
                    skipped += 1
                    continue
                bad_line(path, line_no, "expected Traefik's CLF access log: CLIENT - USER "
                         '[TIME] "METHOD PATH PROTOCOL" STATUS SIZE "REFERER" "AGENT" COUNT '
                         '"ROUTER" "SERVICE_URL" <N>ms')
            try:
                start = int(datetime.strptime(match["time"], CLF_TIME_FORMAT).timestamp())
            except ValueError:
                bad_line(path, line_no, f"expected the time as 02/Jan/2006:15:04:05 -0700, got "
                         f"{match['time']!r}")
            status = 0 if match["status"] == "-" else int(match["status"])
            requests.append(ImportedRequest(start * SECOND_NS, int(match["ms"]) * 1_000_000,
                                            status, _error(status),
                                            service_addr(match["url"])))
            parts = match["request"].split()
            url = url or (parts[1] if len(parts) >= 2 else "")
        return Imported(self.name, EPOCH, requests, url=url, notes=_skipped(skipped),
                        start_step_ns=SECOND_NS, upstreams=True)


def _int(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class TraefikJson:
    name = "traefik-json"
    use = RESULTS
    description = ("Traefik access log, --accesslog.format=json (StartUTC = the start, ns; "
                   "Duration ns; ServiceAddr = the upstream)")

    def recognises(self, head: bytes) -> bool:
        for line in head.splitlines()[:50]:
            line = line.strip()
            if (line.startswith(b"{") and b'"Duration"' in line and
                    (b'"StartUTC"' in line or b'"StartLocal"' in line)):
                return True
        return False

    def read(self, path: Path) -> Imported:
        requests, url, skipped = [], "", 0
        expected = ("expected a JSON object with StartUTC (or StartLocal) and Duration "
                    "(Traefik's --accesslog.format=json)")
        for line_no, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                if _OWN_TEXT.match(line):
                    skipped += 1
                    continue
                bad_line(path, line_no, expected)
            if not isinstance(obj, dict):
                bad_line(path, line_no, expected)
            stamp = obj.get("StartUTC", obj.get("StartLocal"))
            duration = _int(obj, "Duration")
            if stamp is None and duration is None and ("msg" in obj or "message" in obj):
                skipped += 1   # Traefik's own log, in JSON
                continue
            try:
                start = rfc3339_ns(str(stamp))
            except ValueError:
                bad_line(path, line_no, f"{expected}; StartUTC is {stamp!r}")
            if duration is None or duration < 0:
                bad_line(path, line_no, f"{expected}; Duration (ns) is {obj.get('Duration')!r}")
            status = _int(obj, "DownstreamStatus") or _int(obj, "OriginStatus") or 0
            upstream = str(obj.get("ServiceAddr") or "") or service_addr(
                str(obj.get("ServiceURL") or ""))
            requests.append(ImportedRequest(start, duration, status, _error(status), upstream))
            url = url or str(obj.get("RequestPath") or "")
        return Imported(self.name, EPOCH, requests, url=url, notes=_skipped(skipped),
                        upstreams=True)
