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
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from client import __version__
from client.data.record import RequestRecord, status_error
from client.data.servertiming import server_fields
from client.run.wire import SocketSender

__all__ = ["HttpxSender", "RoundRobinSender", "Sender", "TlsError", "Verify", "build_url",
           "fetch_limits", "limits_url", "make_sender", "make_senders", "request_headers",
           "tls_verify", "warm_up", "warm_up_all"]


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


Verify = ssl.SSLContext | bool  # httpx's ``verify``: a context, True (the CAs), False (none)


class TlsError(ValueError):
    """``--cacert`` cannot be used (a one-line message)."""


def tls_verify(cacert: str | Path | None = None, insecure: bool = False) -> Verify:
    """How the server's certificate is checked: against ``cacert`` (a PEM file of the CA(s)
    that signed it, e.g. a private CA or a self-signed certificate), not at all
    (``insecure``, as ``curl -k``), or against the usual CAs (True)."""
    if insecure:
        return False
    if cacert is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(cacert))
    except ssl.SSLError as exc:   # read, but not PEM certificates
        raise TlsError(f"cannot use --cacert {cacert}: no PEM certificate in it "
                       f"({exc.library or 'SSL'}: {exc.reason or exc})") from None
    except OSError as exc:
        raise TlsError(f"cannot use --cacert {cacert}: {exc.strerror or exc}") from None


def fetch_limits(url: str, timeout: float = 2.0, verify: Verify = True
                 ) -> dict[str, object] | None:
    """The service's ``/limits``, or None when it is not there (any other server works too)."""
    try:
        response = httpx.get(limits_url(url), timeout=timeout, verify=verify)
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
                verify: Verify = True) -> Sender:
    """The leanest sender for ``url``: a plain socket for ``http://``
    (:class:`client.run.wire.SocketSender`), httpx for ``https://``."""
    headers = request_headers(new_connection)
    if url.startswith("http://"):
        return SocketSender(url, headers, timeout=timeout)
    return HttpxSender(url, new_connection=new_connection, timeout=timeout, verify=verify)


class RoundRobinSender:
    """Spreads requests over several replicas from the client: request ``seq`` goes to replica
    ``seq % N`` over that replica's own keep-alive connection (one per replica), and its record
    says which (``replica``)."""

    def __init__(self, senders: Sequence[Sender]) -> None:
        if not senders:
            raise ValueError("no replicas to send to")
        self._senders = list(senders)

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None) -> RequestRecord:
        replica = seq % len(self._senders)
        record = self._senders[replica].send(seq, run_start_ns, scheduled_ns)
        record.replica = replica
        return record

    def close(self) -> None:
        for sender in self._senders:
            sender.close()


def make_senders(url: str | Sequence[str], count: int, *, new_connection: bool = False,
                 timeout: float = 30.0, verify: Verify = True) -> list[Sender]:
    """``count`` senders (one per worker): to ``url``, or round-robin over the replicas'
    URLs when given a sequence (even of one: its records then say replica 0)."""
    urls = [url] if isinstance(url, str) else list(url)
    # one TLS context for all (each costs ~80 ms of CPU to make)
    if verify is True and any(u.startswith("https://") for u in urls):
        verify = httpx.create_ssl_context()

    def one(url: str) -> Sender:
        return make_sender(url, new_connection=new_connection, timeout=timeout, verify=verify)

    if isinstance(url, str):
        return [one(url) for _ in range(count)]
    return [RoundRobinSender([one(u) for u in urls]) for _ in range(count)]


def _unanswered(exc: httpx.TransportError) -> bool:
    """Whether the server closed or reset the connection without a byte of an answer: what a
    kept-alive connection that the server closed while idle looks like when the close crossed
    the request on the wire."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    return isinstance(exc, (httpx.ReadError, httpx.WriteError))


class HttpxSender:
    """A :class:`Sender` through httpx (TLS; the request built once). ``verify`` as httpx's: one
    TLS context shared by many senders (making one costs ~80 ms of CPU), or True / False.

    A request that finds its kept-alive connection closed under it (no answer at all) is sent
    once more on a new connection, inside its time, as :class:`client.run.wire.SocketSender`
    does: servers close idle connections (uvicorn and Node after 5 s), and a request that
    crosses that close on the wire is the client's race, not the server's failure."""

    def __init__(self, url: str, *, new_connection: bool = False, timeout: float = 30.0,
                 verify: Verify = True) -> None:
        self._client = httpx.Client(timeout=timeout, headers=request_headers(new_connection),
                                    verify=verify)
        self._request = self._client.build_request("GET", url)
        self._kept_alive = False  # the last answer left a connection in the pool

    def _exchange(self) -> httpx.Response:
        kept_alive, self._kept_alive = self._kept_alive, False
        try:
            response = self._client.send(self._request)
        except httpx.TransportError as exc:
            if not (kept_alive and _unanswered(exc)):
                raise
            response = self._client.send(self._request)  # the pool dropped that connection
        self._kept_alive = response.headers.get("connection", "").lower() != "close" \
            and response.http_version != "HTTP/1.0"
        return response

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None) -> RequestRecord:
        start = time.perf_counter_ns()
        try:
            response = self._exchange()
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
            timeout: float = 30.0, verify: Verify = True) -> int:
    """Send ``requests`` GETs that are not recorded (imports, caches and connection pools on the
    server warm up, as hyperfine's ``--warmup``); returns how many got an HTTP answer."""
    answered = 0
    with httpx.Client(timeout=timeout, headers=request_headers(new_connection),
                      verify=verify) as client:
        for _ in range(requests):
            try:
                client.get(url)
                answered += 1
            except httpx.TransportError:
                break  # the run itself records (and reports) a service that cannot be reached
    return answered


def warm_up_all(urls: Sequence[str], requests: int, *, new_connection: bool = False,
                timeout: float = 30.0, verify: Verify = True) -> int:
    """``warm_up`` every URL (each replica's) at the same time; the answers in all."""
    if requests <= 0:
        return 0
    if len(urls) == 1:
        return warm_up(urls[0], requests, new_connection=new_connection, timeout=timeout,
                       verify=verify)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(urls), 64)) as pool:
        return sum(pool.map(lambda url: warm_up(url, requests, new_connection=new_connection,
                                                timeout=timeout, verify=verify), urls))
