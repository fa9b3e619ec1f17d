"""The timed path for plain ``http://``: HTTP/1.1 on a socket, with nothing in between.

Every latency ``http-timing`` reports carries the client's own time, so the request is encoded
once, before any clock starts, and a request is ``sendall`` of those bytes and reading the
answer into one reused buffer (``client.run.answer``: what curl reads, RFC 9112).
``Connection: close`` (and HTTP/1.0 without keep-alive) closes the socket after the answer,
and the next request connects again inside its timed path, as the original did. A keep-alive
connection the server has closed while idle is noticed before the clock starts (and a request
that finds it closed anyway is sent once more on a new connection, inside its time).
Redirects are followed only when asked (``client.run.redirects``).

Errors are named as httpx names them (``ConnectError``, ``ReadTimeout``,
``RemoteProtocolError``, ...), so records read the same whichever path timed them; an answer
that cannot be read says what was expected and what arrived (its first bytes, escaped: see
:func:`client.run.answer.answered`). TLS and everything that is not timed go through httpx
(``client.run.http``).
"""

from __future__ import annotations

import errno
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from client.data.record import DEFAULT_RULE, RequestRecord, status_error
from client.data.request import HttpRequest
from client.data.servertiming import server_fields
from client.data.status import StatusRule
from client.run.answer import NoResponse, ProtocolError, RawResponse, read_response
from client.run.redirects import REDIRECTS, redirected

__all__ = ["SocketSender", "encode_get", "encode_request"]

_CHUNK = 65536


def encode_request(request: HttpRequest, headers: dict[str, str]) -> tuple[str, int, bytes]:
    """``(host, port, request bytes)`` of ``request`` (``http://`` only): the client's
    ``headers`` (``User-Agent``, ``Connection``), then the request's own, which replace the
    client's of the same name; a body gets its ``Content-Length``."""
    parts = urlsplit(request.url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not a plain http:// URL: {request.url!r}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    authority = host if port == 80 else f"{host}:{port}"
    own = request.header_names()
    defaults = {"Host": authority, "Accept": "*/*", **headers}
    if request.body is not None:
        defaults["Content-Length"] = str(len(request.body))
        own -= {"content-length"}  # always the body's own length
    lines = [f"{request.method} {target} HTTP/1.1",
             *(f"{k}: {v}" for k, v in defaults.items() if k.lower() not in own),
             *(f"{k}: {v}" for k, v in request.headers if k.lower() != "content-length"
               or request.body is None)]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
    return parts.hostname, port, head + (request.body or b"")


def encode_get(url: str, headers: dict[str, str]) -> tuple[str, int, bytes]:
    """``(host, port, request bytes)`` of a GET of ``url`` (``http://`` only)."""
    return encode_request(HttpRequest(url), headers)


def _idle_connection_closed(sock: socket.socket) -> bool:
    """Whether a kept-alive connection has something to read before we asked: the server
    closed it (EOF) or sent something unasked. Either way it cannot carry a request."""
    poller = select.poll()   # not select(): it refuses a descriptor past 1023 (FD_SETSIZE)
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _error_name(exc: BaseException, connecting: bool) -> str:
    if isinstance(exc, ProtocolError):
        return "RemoteProtocolError"
    if isinstance(exc, TimeoutError):
        return "ConnectTimeout" if connecting else "ReadTimeout"
    if connecting:
        return "ConnectError"
    if isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.ECONNRESET):
        return "ReadError"
    return "ReadError" if isinstance(exc, OSError) else type(exc).__name__


@dataclass(frozen=True)
class _Pending:
    """A request on its way: what its record needs once the answer is read."""

    seq: int
    run_start_ns: int
    scheduled_ns: int | None
    which: int
    start: int
    reused: bool        # sent on a kept-alive connection (may be sent once more)


class SocketSender:
    """One connection's timed requests to one origin over ``http://`` (see the module
    docstring): ``requests`` (a URL is a GET of it; several of one origin share the
    connection, ``send``'s ``which`` says which one goes); ``ok_status``: which statuses are
    successes, and how many redirects to follow (``client.data.status``,
    ``client.run.redirects``: only to ``http://``; on this connection when the origin is the
    same, else on one of their own)."""

    def __init__(self, requests: str | HttpRequest | Sequence[HttpRequest],
                 headers: dict[str, str], *, timeout: float = 30.0,
                 ok_status: StatusRule = DEFAULT_RULE) -> None:
        if isinstance(requests, str):
            requests = HttpRequest(requests)
        self._requests = [requests] if isinstance(requests, HttpRequest) else list(requests)
        encoded = [encode_request(request, headers) for request in self._requests]
        if len({(host, port) for host, port, _ in encoded}) != 1:
            raise ValueError("one SocketSender sends to one host and port")
        self.host, self.port = encoded[0][0], encoded[0][1]
        self._wire = [data for _, _, data in encoded]
        self._head = [request.head for request in self._requests]
        self.request = self._wire[0]
        self.timeout = timeout
        self.ok_status = ok_status
        self._headers = headers
        self._sock: socket.socket | None = None
        self._buffer = bytearray(_CHUNK)
        self._pending: _Pending | None = None   # the request sent, its answer not yet read
        self.last: RawResponse | None = None    # the last answer read (its body's length...)
        self.connects = 0                       # connections opened so far

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self.connects += 1
        return sock

    def _exchange(self, sock: socket.socket, which: int) -> RawResponse:
        sock.sendall(self._wire[which])
        return read_response(sock, self._buffer, self._head[which])

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None,
             which: int = 0) -> RequestRecord:
        """As :meth:`client.run.http.Sender.send`: one request (the ``which``-th), its
        record."""
        failed = self.begin(seq, run_start_ns, scheduled_ns, which)
        return failed if failed is not None else self.finish()

    @property
    def socket(self) -> socket.socket | None:
        """The connection (None between a close and the next request)."""
        return self._sock

    def begin(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None,
              which: int = 0) -> RequestRecord | None:
        """The first half of :meth:`send`: the clock starts, the request goes (connecting
        first if need be). None when it went (:meth:`finish` reads the answer), else the
        record of its failure."""
        if self._sock is not None and _idle_connection_closed(self._sock):
            self.close()  # found before the clock: reconnecting is part of the request
        start = time.perf_counter_ns()
        reused = self._sock is not None
        self._pending = _Pending(seq, run_start_ns, scheduled_ns, which, start, reused)
        connecting = False
        try:
            if self._sock is None:
                connecting = True
                self._connect()
                connecting = False
            assert self._sock is not None
            try:
                self._sock.sendall(self._wire[which])
            except ConnectionError:
                if not reused:
                    raise
                self.close()  # closed under us between the check and the send: once more
                self._pending = _Pending(seq, run_start_ns, scheduled_ns, which, start, False)
                connecting = True
                self._connect().sendall(self._wire[which])
        except OSError as exc:
            return self._failed(exc, connecting)
        return None

    def finish(self) -> RequestRecord:
        """The second half of :meth:`send`: read the whole answer, return the record."""
        pending = self._pending
        assert pending is not None and self._sock is not None, "finish() without begin()"
        connecting = False
        try:
            try:
                response = read_response(self._sock, self._buffer, self._head[pending.which])
            except (NoResponse, ConnectionError):
                if not pending.reused:
                    raise
                self.close()  # closed under us as the request arrived: once more
                connecting = True
                sock = self._connect()
                connecting = False
                response = self._exchange(sock, pending.which)
        except (OSError, ProtocolError) as exc:
            return self._failed(exc, connecting)
        error = None
        if self.ok_status.follow and response.status in REDIRECTS:
            try:
                response, error = self._follow(response, pending.which)
            except (OSError, ProtocolError) as exc:
                return self._failed(exc, False)
        end = time.perf_counter_ns()
        self._pending, self.last = None, response
        if not response.keep_alive:
            self.close()
        if error is None:
            error = status_error(response.status, response.location, self.ok_status)
        return self._record(pending, end, response.status, error, response.server_timing)

    def _follow(self, response: RawResponse, which: int) -> tuple[RawResponse, str | None]:
        """Follow up to ``ok_status.follow`` redirects from ``response`` (the answer to the
        ``which``-th request): the last answer, and its error when it is not the rule's to
        judge (a redirect beyond the count, or one that cannot be followed here)."""
        request = self._requests[which]
        for _ in range(self.ok_status.follow):
            step = redirected(request, response.status, response.location, ("http://",))
            if not isinstance(step, HttpRequest):
                return response, step
            if not response.keep_alive:
                self.close()
            request, response = step, self._at(step)
        if response.location and redirected(request, response.status, response.location):
            return response, self.ok_status.too_many(response.status, response.location)
        return response, None

    def _at(self, request: HttpRequest) -> RawResponse:
        """``request``'s answer: on this connection if it goes to this origin, else on one of
        its own (closed after; this connection stays as it was)."""
        host, port, data = encode_request(request, self._headers)
        if (host, port) == (self.host, self.port):
            sock = self._sock or self._connect()
            sock.sendall(data)
            return read_response(sock, self._buffer, request.head)
        with socket.create_connection((host, port), timeout=self.timeout) as other:
            other.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            other.sendall(data)
            response = read_response(other, self._buffer, request.head)
        return replace(response, keep_alive=self._sock is not None)

    def _failed(self, exc: OSError | ProtocolError, connecting: bool) -> RequestRecord:
        end = time.perf_counter_ns()
        pending, self._pending = self._pending, None
        assert pending is not None
        self.close()
        detail = str(exc) or type(exc).__name__
        return self._record(pending, end, 0, f"{_error_name(exc, connecting)}: {detail}", None)

    @staticmethod
    def _record(p: _Pending, end: int, status: int, error: str, server_timing: str | None
                ) -> RequestRecord:
        origin = p.start if p.scheduled_ns is None else p.run_start_ns + p.scheduled_ns
        return RequestRecord(p.seq, p.start - p.run_start_ns, end - origin, status, error=error,
                             scheduled_ns=p.scheduled_ns, **server_fields(server_timing))

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()

    def __enter__(self) -> SocketSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

