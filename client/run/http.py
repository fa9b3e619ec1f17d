"""HTTP for a run: the timed request, and the untimed calls around it (``/limits``, warm-up).

The request is built once, before the clock starts, and sent over one keep-alive connection
(or, with ``new_connection``, a fresh connection each time as the original did: ``Connection:
close`` makes the server close it, so the next connect is inside the timed path, like the
original's). Latency is measured with the monotonic ns clock until the whole body is read.
Plain ``http://`` is timed on a bare socket (``client.run.wire``: as lean as wrk), ``https://``
through httpx; redirects are not followed (a 3xx is recorded as an error saying where to).
"""

from __future__ import annotations

import ssl
import time
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from client import __version__
from client.data.record import RequestRecord, status_error
from client.data.servertiming import server_fields
from client.run.wire import SocketSender

__all__ = ["HttpxSender", "Sender", "build_url", "fetch_limits", "limits_url", "make_sender",
           "request_headers", "warm_up"]


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


def request_headers(new_connection: bool) -> dict[str, str]:
    """The client's headers; ``connection: close`` makes each request a new connection."""
    headers = {"user-agent": f"http-timing/{__version__}"}
    if new_connection:
        headers["connection"] = "close"
    return headers


class Sender(Protocol):
    """One connection's timed requests to one URL: made once per worker thread, before any
    clock starts (a connection is not shared); closed when done."""

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None
             ) -> RequestRecord:
        """Send the request, read the whole body, return its record. Latency runs from the
        intended send time when ``scheduled_ns`` (since ``run_start_ns``) is given, else from
        the actual send."""

    def close(self) -> None:
        """Close the connection."""


def make_sender(url: str, *, new_connection: bool = False, timeout: float = 30.0,
                tls: ssl.SSLContext | None = None) -> Sender:
    """The leanest sender for ``url``: a plain socket for ``http://``
    (:class:`client.run.wire.SocketSender`), httpx for ``https://``."""
    headers = request_headers(new_connection)
    if url.startswith("http://"):
        return SocketSender(url, headers, timeout=timeout)
    return HttpxSender(url, new_connection=new_connection, timeout=timeout, tls=tls)


class HttpxSender:
    """A :class:`Sender` through httpx (TLS; the request built once). ``tls`` lets many senders
    share one TLS context (making one costs ~80 ms of CPU)."""

    def __init__(self, url: str, *, new_connection: bool = False, timeout: float = 30.0,
                 tls: ssl.SSLContext | None = None) -> None:
        self._client = httpx.Client(timeout=timeout, headers=request_headers(new_connection),
                                    verify=tls if tls is not None else True)
        self._request = self._client.build_request("GET", url)

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None) -> RequestRecord:
        start = time.perf_counter_ns()
        try:
            response = self._client.send(self._request)
        except httpx.TransportError as exc:
            end = time.perf_counter_ns()
            status, error, server = 0, f"{type(exc).__name__}: {exc}".strip(": "), {}
        else:
            end = time.perf_counter_ns()
            status = response.status_code
            error = status_error(status, response.headers.get("location"))
            server = server_fields(response.headers.get("server-timing"))
        origin = start if scheduled_ns is None else run_start_ns + scheduled_ns
        return RequestRecord(seq, start - run_start_ns, end - origin, status, error=error,
                             scheduled_ns=scheduled_ns, **server)

    def close(self) -> None:
        self._client.close()


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

