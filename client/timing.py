"""Time requests strictly one after another, like the original ``http-timing.py``.

The request is built once, before the clock starts, and sent over one keep-alive connection
(or, with ``new_connection``, a fresh connection each time as the original did: ``Connection:
close`` makes the server close it, so the next connect is inside the timed path, like the
original's). Latency is measured with the monotonic ns clock until the whole body is read.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from client import __version__
from client.rawdata import RequestRecord
from client.servertiming import server_fields

__all__ = ["RunOutcome", "build_url", "fetch_limits", "format_line", "limits_url",
           "request_headers", "send_timed", "time_sequential", "warm_up"]


def build_url(url: str, iterations: int) -> str:
    """Append ``?iterations=N`` when N > 0, as the original did (keeping any other query)."""
    if iterations <= 0:
        return url
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "iterations"]
    query.append(("iterations", str(iterations)))
    return urlunsplit(parts._replace(query=urlencode(query)))


def limits_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/limits", "", ""))


def fetch_limits(url: str, timeout: float = 2.0) -> dict[str, object] | None:
    """The service's ``/limits``, or None when it is not there (any other server works too)."""
    try:
        response = httpx.get(limits_url(url), timeout=timeout)
        if response.status_code == 200:
            body = response.json()
            return body if isinstance(body, dict) else None
    except (httpx.HTTPError, ValueError):
        pass
    return None


def format_line(record: RequestRecord) -> str:
    """The original's line: ``<ms since start> Status code <code> time <latency ns>``."""
    return f"{record.start_ns // 1_000_000} Status code {record.status} time {record.latency_ns}"


@dataclass
class RunOutcome:
    records: list[RequestRecord] = field(default_factory=list)
    stop_reason: str | None = None  # why the run ended before ``requests`` (None: it did not)

    @property
    def reached(self) -> bool:
        """Whether any request got an HTTP response at all."""
        return any(r.status > 0 for r in self.records)


def request_headers(new_connection: bool) -> dict[str, str]:
    """The client's headers; ``connection: close`` makes each request a new connection."""
    headers = {"user-agent": f"http-timing/{__version__}"}
    if new_connection:
        headers["connection"] = "close"
    return headers


def warm_up(url: str, requests: int, *, new_connection: bool = False,
            timeout: float = 30.0) -> int:
    """Send ``requests`` GETs that are not recorded (imports, caches and connection pools on the
    server warm up, as hyperfine's ``--warmup``); returns how many got an HTTP answer."""
    answered = 0
    with httpx.Client(timeout=timeout, headers=request_headers(new_connection)) as client:
        for _ in range(requests):
            try:
                client.get(url)
                answered += 1
            except httpx.TransportError:
                break  # the run itself records (and reports) a service that cannot be reached
    return answered


def send_timed(client: httpx.Client, request: httpx.Request, seq: int, run_start_ns: int,
               scheduled_ns: int | None = None) -> RequestRecord:
    """Send ``request``, read the whole body, return its record. Latency runs from the
    intended send time when ``scheduled_ns`` (since ``run_start_ns``) is given, else from
    the actual send."""
    start = time.perf_counter_ns()
    try:
        response = client.send(request)
    except httpx.TransportError as exc:
        end = time.perf_counter_ns()
        status, error, server = 0, f"{type(exc).__name__}: {exc}".strip(": "), {}
    else:
        end = time.perf_counter_ns()
        status = response.status_code
        error = "" if response.is_success or response.is_redirect else f"HTTP {status}"
        server = server_fields(response.headers.get("server-timing"))
    origin = start if scheduled_ns is None else run_start_ns + scheduled_ns
    return RequestRecord(seq, start - run_start_ns, end - origin, status, error=error,
                         scheduled_ns=scheduled_ns, **server)


class _HandOver:
    """Ctrl-C/SIGTERM land between requests, never while a completed request is being kept
    and handed to ``on_record`` (the CSV row, the printed line): a signal that arrives then is
    acted on right after. So a record is in the outcome exactly when ``on_record`` finished
    with it. Wraps the Python handlers of the main thread (elsewhere signals cannot arrive)."""

    def __init__(self) -> None:
        self._busy = False
        self._pending: tuple[int, FrameType | None] | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], Any]] = {}

    def __enter__(self) -> _HandOver:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handler = signal.getsignal(signum)
                if callable(handler):
                    self._previous[signum] = handler
                    signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._busy:
            self._pending = (signum, frame)
        else:
            self._previous[signum](signum, frame)

    @contextmanager
    def keeping(self) -> Iterator[None]:
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            if self._pending is not None:
                signum, frame = self._pending
                self._pending = None
                self._previous[signum](signum, frame)


def time_sequential(
    url: str,
    requests: int,
    on_record: Callable[[RequestRecord], None],
    *,
    new_connection: bool = False,
    timeout: float = 30.0,
    max_consecutive_failures: int = 5,
    outcome: RunOutcome | None = None,
) -> RunOutcome:
    """Send ``requests`` GETs one after another; call ``on_record`` as each completes.

    Transport failures are recorded (status 0 and the error) and the run goes on, until
    ``max_consecutive_failures`` in a row (0: never stop early). Pass ``outcome`` to keep what
    was collected when the caller interrupts the run (KeyboardInterrupt propagates).
    """
    outcome = outcome if outcome is not None else RunOutcome()
    consecutive_failures = 0
    with (httpx.Client(timeout=timeout, headers=request_headers(new_connection)) as client,
          _HandOver() as hand_over):
        request = client.build_request("GET", url)
        run_start = time.perf_counter_ns()
        for seq in range(requests):
            record = send_timed(client, request, seq, run_start)
            consecutive_failures = consecutive_failures + 1 if record.status == 0 else 0
            with hand_over.keeping():
                outcome.records.append(record)
                on_record(record)
            if max_consecutive_failures and consecutive_failures >= max_consecutive_failures:
                outcome.stop_reason = (f"stopped after {consecutive_failures} consecutive "
                                       f"connection failures")
                break
    return outcome
