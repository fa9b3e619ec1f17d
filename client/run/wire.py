"""The timed path for plain ``http://``: HTTP/1.1 on a socket, with nothing in between.

Every latency ``http-timing`` reports carries the client's own time, so the request is encoded
once, before any clock starts, and a request is ``sendall`` of those bytes and reading the
answer into one reused buffer. The response parser is a real HTTP/1.1 one: the status line,
headers (several ``Server-Timing`` lines are joined), a body framed by ``Content-Length``, by
``Transfer-Encoding: chunked`` (chunk extensions and trailers allowed) or by the end of the
connection; ``Connection: close`` (and HTTP/1.0 without keep-alive) closes the socket after the
answer, and the next request connects again inside its timed path, as the original did. A
keep-alive connection the server has closed while idle is noticed before the clock starts (and
a request that finds it closed anyway is sent once more on a new connection, inside its time).

Errors are named as httpx names them (``ConnectError``, ``ReadTimeout``,
``RemoteProtocolError``, ...), so records read the same whichever path timed them; TLS and
everything that is not timed go through httpx (``client.run.http``).
"""

from __future__ import annotations

import errno
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from client.data.record import RequestRecord, status_error
from client.data.request import HttpRequest
from client.data.servertiming import server_fields

__all__ = ["MAX_HEAD_BYTES", "NoResponse", "ProtocolError", "RawResponse", "SocketSender",
           "encode_get", "encode_request", "read_response"]

MAX_HEAD_BYTES = 64 * 1024
_CHUNK = 65536


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 as it must be (named RemoteProtocolError)."""


class NoResponse(ProtocolError):
    """The connection ended before a single byte of an answer."""


@dataclass(frozen=True)
class RawResponse:
    status: int
    server_timing: str | None
    location: str | None
    keep_alive: bool
    body_bytes: int


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


class _Reader:
    """Bytes from a socket through one reused buffer."""

    def __init__(self, sock: socket.socket, buffer: bytearray) -> None:
        self.sock, self.buf, self.start, self.end = sock, buffer, 0, 0
        self.view = memoryview(buffer)

    def fill(self) -> int:
        """Read more (compacting first); 0 at the end of the connection."""
        if self.start:
            self.buf[:self.end - self.start] = self.buf[self.start:self.end]
            self.end -= self.start
            self.start = 0
        if self.end == len(self.buf):  # a long line or chunk header: grow the buffer
            self.view.release()
            self.buf.extend(bytes(len(self.buf)))
            self.view = memoryview(self.buf)
        got = self.sock.recv_into(self.view[self.end:])
        self.end += got
        return got

    def line(self, limit: int = MAX_HEAD_BYTES) -> bytes:
        while True:
            at = self.buf.find(b"\r\n", self.start, self.end)
            if at >= 0:
                out = bytes(self.buf[self.start:at])
                self.start = at + 2
                return out
            if self.end - self.start > limit:
                raise ProtocolError("header line too long")
            nothing_yet = self.end == 0
            if not self.fill():
                if nothing_yet:
                    raise NoResponse("Server disconnected without sending a response.")
                raise ProtocolError("Server disconnected without sending a complete response.")

    def skip(self, count: int) -> None:
        """Consume ``count`` bytes of body."""
        while count > 0:
            if self.start == self.end and not self.fill():
                raise ProtocolError("Server disconnected before the end of the body.")
            take = min(count, self.end - self.start)
            self.start += take
            count -= take

    def drain(self) -> int:
        """Consume everything until the server closes (a body framed by the connection)."""
        total = self.end - self.start
        self.start = self.end = 0
        while (got := self.sock.recv_into(self.view)):
            total += got
        return total


def _head(reader: _Reader) -> tuple[int, bytes, dict[bytes, list[bytes]]]:
    first = reader.line()
    parts = first.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {first[:80]!r}")
    headers: dict[bytes, list[bytes]] = {}
    size = len(first)
    while (line := reader.line()):
        size += len(line)
        if size > MAX_HEAD_BYTES:
            raise ProtocolError("response headers too large")
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolError(f"malformed header line: {line[:80]!r}")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return int(parts[1]), parts[0], headers


def _chunked(reader: _Reader) -> int:
    total = 0
    while True:
        size_line = reader.line().split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size: {size_line[:20]!r}") from None
        if size == 0:
            while reader.line():  # trailers, up to the empty line
                pass
            return total
        reader.skip(size)
        total += size
        if reader.line():
            raise ProtocolError("chunk not followed by CRLF")


def read_response(sock: socket.socket, buffer: bytearray, head: bool = False) -> RawResponse:
    """Read one whole response from ``sock`` (the body is counted, not kept); ``head``: the
    answer to a HEAD, which has no body whatever its headers say."""
    reader = _Reader(sock, buffer)
    try:
        return _response(reader, head)
    finally:
        reader.view.release()


def _response(reader: _Reader, head: bool) -> RawResponse:
    while True:
        status, version, headers = _head(reader)
        if status >= 200 or status == 101:
            break  # 1xx informational answers precede the real one
    connection = b",".join(headers.get(b"connection", [])).lower()
    keep_alive = (b"close" not in connection and
                  (version != b"HTTP/1.0" or b"keep-alive" in connection))
    encoding = b",".join(headers.get(b"transfer-encoding", [])).lower()
    lengths = headers.get(b"content-length")
    if head or status in (204, 304) or 100 <= status < 200:
        body = 0
    elif b"chunked" in encoding:
        body = _chunked(reader)
    elif lengths:
        try:
            body = int(lengths[0])
        except ValueError:
            raise ProtocolError(f"bad Content-Length: {lengths[0][:20]!r}") from None
        reader.skip(body)
    else:  # the body ends with the connection
        body, keep_alive = reader.drain(), False
    if reader.start != reader.end:
        keep_alive = False  # bytes beyond the answer: never reuse such a connection
    timing = headers.get(b"server-timing")
    location = headers.get(b"location")
    return RawResponse(status, b", ".join(timing).decode("latin-1") if timing else None,
                       location[0].decode("latin-1") if location else None, keep_alive, body)


def _idle_connection_closed(sock: socket.socket) -> bool:
    """Whether a kept-alive connection has something to read before we asked: the server
    closed it (EOF) or sent something unasked. Either way it cannot carry a request."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


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
    connection, ``send``'s ``which`` says which one goes)."""

    def __init__(self, requests: str | HttpRequest | Sequence[HttpRequest],
                 headers: dict[str, str], *, timeout: float = 30.0) -> None:
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
        self._sock: socket.socket | None = None
        self._buffer = bytearray(_CHUNK)
        self._pending: _Pending | None = None   # the request sent, its answer not yet read

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
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
        end = time.perf_counter_ns()
        self._pending = None
        if not response.keep_alive:
            self.close()
        return self._record(pending, end, response.status,
                            status_error(response.status, response.location),
                            response.server_timing)

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

