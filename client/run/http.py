"""HTTP for a run: the timed request, and the untimed calls around it (``/limits``, warm-up).

The request is built once, before the clock starts, and sent over one keep-alive connection
(or, with ``new_connection``, a fresh connection each time as the original did: ``Connection:
close`` makes the server close it, so the next connect is inside the timed path, like the
original's). Latency is measured with the monotonic ns clock until the whole body is read.
Plain ``http://`` is timed on a bare socket (``client.run.wire``: as lean as wrk), ``https://``
through httpx; redirects are not followed (a 3xx is timed as the answer it is; which statuses
are successes is ``client.data.status``).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, Union
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from client import __version__
from client.data.record import DEFAULT_RULE, RequestRecord, status_error
from client.data.request import DEFAULT_ITERATIONS, HttpRequest, is_burn_service_url
from client.data.servertiming import server_fields
from client.data.status import StatusRule
from client.run.redirects import REDIRECTS, redirected
from client.run.wire import SocketSender

__all__ = ["HttpxSender", "Requests", "RoundRobinSender", "Sender", "TlsError", "Verify",
           "as_requests", "build_url", "fetch_limits", "limits_url", "make_sender",
           "make_senders", "request_headers", "timed_url", "tls_verify", "url_iterations",
           "warm_up", "warm_up_all"]

# what a run sends: one URL (a GET), one request, or several sent round-robin (replicas'
# URLs, or the targets of a --targets file)
Requests = Union[str, HttpRequest, Sequence[Union[str, HttpRequest]]]


def as_requests(what: Requests) -> list[HttpRequest]:
    """The requests of ``what`` (a URL is a GET of it)."""
    items = [what] if isinstance(what, (str, HttpRequest)) else list(what)
    return [HttpRequest(item) if isinstance(item, str) else item for item in items]


def build_url(url: str, iterations: int) -> str:
    """Append ``?iterations=N`` when N > 0, as the original did (keeping any other query)."""
    if iterations <= 0:
        return url
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "iterations"]
    query.append(("iterations", str(iterations)))
    return urlunsplit(parts._replace(query=urlencode(query)))


def url_iterations(url: str) -> str | None:
    """The ``iterations`` a URL's own query already asks for (None: it asks for none)."""
    for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if key == "iterations":
            return value
    return None


def timed_url(url: str, iterations: int | None) -> str:
    """The URL a run times: ``url`` exactly as given, unless ``iterations`` is given or it is
    burn-service's ``/cpuBurnFlow`` without an ``iterations`` of its own (then
    ``?iterations=5000``, as the original)."""
    if iterations is None:
        burn = is_burn_service_url(url) and url_iterations(url) is None
        iterations = DEFAULT_ITERATIONS if burn else 0
    return build_url(url, iterations)


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
    """One connection's timed requests to one origin: made once per worker thread, before any
    clock starts (a connection is not shared); closed when done."""

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None
             ) -> RequestRecord:
        """Send the request, read the whole body, return its record. Latency runs from the
        intended send time when ``scheduled_ns`` (since ``run_start_ns``) is given, else from
        the actual send."""

    def close(self) -> None:
        """Close the connection."""


class OriginSender(Sender, Protocol):
    """A :class:`Sender` of several requests to one origin over one connection."""

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None,
             which: int = 0) -> RequestRecord:
        """As :meth:`Sender.send`, sending the ``which``-th of its requests."""


def make_sender(requests: str | HttpRequest | Sequence[HttpRequest], *,
                new_connection: bool = False, timeout: float = 30.0,
                verify: Verify = True, ok_status: StatusRule = DEFAULT_RULE) -> OriginSender:
    """The leanest sender of ``requests`` (one origin): a plain socket for ``http://``
    (:class:`client.run.wire.SocketSender`), httpx for ``https://``."""
    headers = request_headers(new_connection)
    first = as_requests(requests)[0]
    if first.url.startswith("http://"):
        return SocketSender(requests, headers, timeout=timeout, ok_status=ok_status)
    return HttpxSender(requests, new_connection=new_connection, timeout=timeout, verify=verify,
                       ok_status=ok_status)


class RoundRobinSender:
    """Sends request ``seq`` as the ``seq % N``-th of ``requests``: one keep-alive connection
    per origin (replicas: one each; the targets of a file on one server share one), and its
    record says which (``label``: ``replica`` or ``target``)."""

    def __init__(self, requests: Sequence[HttpRequest],
                 make: Callable[[Sequence[HttpRequest]], OriginSender] | None = None,
                 label: str = "replica") -> None:
        if not requests:
            raise ValueError("no replicas to send to")
        if label not in ("replica", "target"):
            raise ValueError(f"a record has no {label!r} to fill")
        origins: dict[tuple[str, str, int], list[HttpRequest]] = {}
        self._route: list[tuple[int, int]] = []  # request -> (its origin, its place there)
        for request in requests:
            group = origins.setdefault(request.origin, [])
            self._route.append((list(origins).index(request.origin), len(group)))
            group.append(request)
        self._senders = [(make or make_sender)(group) for group in origins.values()]
        self._label = label

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None) -> RequestRecord:
        which = seq % len(self._route)
        origin, place = self._route[which]
        record = self._senders[origin].send(seq, run_start_ns, scheduled_ns, place)
        setattr(record, self._label, which)
        return record

    def close(self) -> None:
        for sender in self._senders:
            sender.close()


def make_senders(what: Requests, count: int, *, new_connection: bool = False,
                 timeout: float = 30.0, verify: Verify = True, label: str = "replica",
                 ok_status: StatusRule = DEFAULT_RULE) -> list[Sender]:
    """``count`` senders (one per worker) of ``what``: one URL or request, or round-robin over
    several when given a sequence (even of one: its records then say ``label`` 0)."""
    requests = as_requests(what)
    # one TLS context for all (each costs ~80 ms of CPU to make)
    if verify is True and any(r.url.startswith("https://") for r in requests):
        verify = httpx.create_ssl_context()

    def one(group: Sequence[HttpRequest]) -> OriginSender:
        return make_sender(group, new_connection=new_connection, timeout=timeout, verify=verify,
                           ok_status=ok_status)

    if isinstance(what, (str, HttpRequest)):
        return [one(requests) for _ in range(count)]
    return [RoundRobinSender(requests, one, label) for _ in range(count)]


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

    def __init__(self, requests: str | HttpRequest | Sequence[HttpRequest], *,
                 new_connection: bool = False, timeout: float = 30.0,
                 verify: Verify = True, ok_status: StatusRule = DEFAULT_RULE) -> None:
        self.ok_status = ok_status
        self._client = httpx.Client(timeout=timeout, headers=request_headers(new_connection),
                                    verify=verify)
        self._asked = as_requests(requests)
        self._requests = [_build(self._client, request) for request in self._asked]
        self._request = self._requests[0]
        self._kept_alive = False  # the last answer left a connection in the pool

    def _exchange(self, request: httpx.Request) -> httpx.Response:
        kept_alive, self._kept_alive = self._kept_alive, False
        try:
            response = self._client.send(request)
        except httpx.TransportError as exc:
            if not (kept_alive and _unanswered(exc)):
                raise
            response = self._client.send(request)  # the pool dropped that connection
        self._kept_alive = response.headers.get("connection", "").lower() != "close" \
            and response.http_version != "HTTP/1.0"
        return response

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None,
             which: int = 0) -> RequestRecord:
        start = time.perf_counter_ns()
        try:
            response = self._exchange(self._requests[which])
            followed = None
            if self.ok_status.follow and response.status_code in REDIRECTS:
                response, followed = self._follow(response, which)
        except httpx.TransportError as exc:
            end = time.perf_counter_ns()
            status, error, server = 0, f"{type(exc).__name__}: {exc}".strip(": "), {}
        else:
            end = time.perf_counter_ns()
            status = response.status_code
            error = followed if followed is not None else \
                status_error(status, response.headers.get("location"), self.ok_status)
            server = server_fields(response.headers.get("server-timing"))
        origin = start if scheduled_ns is None else run_start_ns + scheduled_ns
        return RequestRecord(seq, start - run_start_ns, end - origin, status, error=error,
                             scheduled_ns=scheduled_ns, **server)

    def _follow(self, response: httpx.Response, which: int
                ) -> tuple[httpx.Response, str | None]:
        """As :meth:`client.run.wire.SocketSender._follow` (``client.run.redirects``)."""
        request = self._asked[which]
        for _ in range(self.ok_status.follow):
            step = redirected(request, response.status_code, response.headers.get("location"))
            if not isinstance(step, HttpRequest):
                return response, step
            request, response = step, self._exchange(_build(self._client, step))
        location = response.headers.get("location")
        if location and redirected(request, response.status_code, location):
            return response, self.ok_status.too_many(response.status_code, location)
        return response, None

    def close(self) -> None:
        self._client.close()


def _build(client: httpx.Client, request: HttpRequest) -> httpx.Request:
    """``request`` as httpx sends it: the request's headers replace the client's."""
    built = client.build_request(request.method, request.url, content=request.body)
    for name, value in request.headers:
        if name.lower() != "content-length" or request.body is None:
            built.headers[name] = value
    return built


def warm_up(what: str | HttpRequest | Sequence[HttpRequest], requests: int, *,
            new_connection: bool = False, timeout: float = 30.0, verify: Verify = True) -> int:
    """Send ``requests`` requests (round-robin over ``what``) that are not recorded (imports,
    caches and connection pools on the server warm up, as hyperfine's ``--warmup``); returns
    how many got an HTTP answer."""
    answered = 0
    with httpx.Client(timeout=timeout, headers=request_headers(new_connection),
                      verify=verify) as client:
        built = [_build(client, request) for request in as_requests(what)]
        for seq in range(requests):
            try:
                client.send(built[seq % len(built)]).read()
                answered += 1
            except httpx.TransportError:
                break  # the run itself records (and reports) a service that cannot be reached
    return answered


def warm_up_all(urls: Sequence[str | HttpRequest], requests: int, *,
                new_connection: bool = False, timeout: float = 30.0,
                verify: Verify = True) -> int:
    """``warm_up`` every replica's URL at the same time; the answers in all."""
    if requests <= 0:
        return 0
    items = as_requests(urls)
    if len(items) == 1:
        return warm_up(items[0], requests, new_connection=new_connection, timeout=timeout,
                       verify=verify)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(items), 64)) as pool:
        return sum(pool.map(lambda item: warm_up(item, requests, new_connection=new_connection,
                                                 timeout=timeout, verify=verify), items))
