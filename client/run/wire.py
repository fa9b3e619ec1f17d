"""The timed path for plain ``http://``: HTTP/1.1 on a socket, with nothing in between.

Every latency ``http-timing`` reports carries the client's own time, so the request is encoded
once, before any clock starts, and a request is ``sendall`` of those bytes and reading the
answer into one reused buffer. The response parser reads what curl reads (RFC 9112): the
status line and headers with CRLF or bare-LF line ends (§2.2), folded header lines (§5.2),
1xx answers of any kind before the final one; a body framed by ``Content-Length`` (a list of
one repeated value too), by ``Transfer-Encoding: chunked`` (extensions and trailers allowed)
or by the end of the connection (HTTP/1.1 as 1.0); no body after HEAD, 1xx, 204 and 304
whatever the headers say. Invalid framing is refused with the reason (§6.3): conflicting
lengths, both ``Transfer-Encoding`` and ``Content-Length``. ``Connection: close`` (and
HTTP/1.0 without keep-alive) closes the socket after the answer, and the next request
connects again inside its timed path, as the original did. A keep-alive connection the
server has closed while idle is noticed before the clock starts (and a request that finds it
closed anyway is sent once more on a new connection, inside its time).

Errors are named as httpx names them (``ConnectError``, ``ReadTimeout``,
``RemoteProtocolError``, ...), so records read the same whichever path timed them; an answer
that cannot be read says what was expected and what arrived (its first bytes, escaped: see
:func:`answered`). TLS and everything that is not timed go through httpx
(``client.run.http``). tests/test_run_wire_corpus.py holds the answers real servers send.
"""

from __future__ import annotations

import errno
import re
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
from client.run.redirects import REDIRECTS, redirected

__all__ = ["MAX_HEAD_BYTES", "RECEIVED", "SHOWN", "NoResponse", "ProtocolError", "RawResponse",
           "SocketSender", "answered", "encode_get", "encode_request", "read_response"]

MAX_HEAD_BYTES = 64 * 1024
SHOWN = 64      # an unreadable answer's first bytes shown in its error
RECEIVED = "; received "   # in an error: the server answered, and this is what arrived
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
    """Bytes from a socket through one reused buffer (a response starts at its beginning)."""

    def __init__(self, sock: socket.socket, buffer: bytearray) -> None:
        self.sock, self.buf, self.start, self.end = sock, buffer, 0, 0
        self.view = memoryview(buffer)
        self.gone = bytearray()  # the first bytes already dropped from the buffer (up to SHOWN)

    def _drop(self, upto: int) -> None:
        """Forget ``buf[:upto]``, keeping the answer's first bytes for an error's message."""
        if len(self.gone) < SHOWN:
            self.gone += self.buf[:min(upto, SHOWN - len(self.gone))]

    def received(self) -> bytes:
        """The answer's first bytes (up to ``SHOWN + 1``: one more says it was cut short)."""
        return bytes(self.gone + self.buf[:self.end])[:SHOWN + 1]

    def fill(self) -> int:
        """Read more (compacting first); 0 at the end of the connection."""
        if self.start:
            self._drop(self.start)
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
        """The next line, without its end: CRLF, or a bare LF (RFC 9112 §2.2 lets a recipient
        take one as a line end, as curl, Go, Node and h11 do)."""
        while True:
            at = self.buf.find(b"\n", self.start, self.end)
            if at >= 0:
                stop = at - 1 if at > self.start and self.buf[at - 1] == 13 else at
                out = bytes(self.buf[self.start:stop])
                self.start = at + 1
                return out
            if self.end - self.start > limit:
                raise ProtocolError("response headers larger than 64 KiB")
            nothing_yet = self.end == 0 and not self.gone
            if not self.fill():
                if nothing_yet:
                    raise NoResponse("Server disconnected without sending a response.")
                raise ProtocolError("Server disconnected without sending a complete response "
                                    "(expected the rest of its head, up to an empty line)")

    def skip(self, count: int) -> None:
        """Consume ``count`` bytes of body."""
        while count > 0:
            if self.start == self.end and not self.fill():
                raise ProtocolError(f"Server disconnected before the end of the body "
                                    f"(expected {count} more bytes)")
            take = min(count, self.end - self.start)
            self.start += take
            count -= take

    def drain(self) -> int:
        """Consume everything until the server closes (a body framed by the connection)."""
        total = self.end - self.start
        self._drop(self.end)
        self.start = self.end = 0
        while (got := self.sock.recv_into(self.view)):
            total += got
        return total


def _shown(data: bytes) -> str:
    """``data`` escaped (CR, LF, control and non-ASCII bytes as Python writes them), cut to
    ``SHOWN`` bytes."""
    text = repr(data[:SHOWN])[1:]
    return text + "..." if len(data) > SHOWN else text


# "HTTP/1.1 200 OK", also as curl takes it: lower case, several spaces, no reason phrase
_STATUS_LINE = re.compile(rb"(HTTP/1\.[01]) +([1-9][0-9]{2})(?: |$)", re.IGNORECASE)
_FAST_VERSIONS = (b"HTTP/1.1 ", b"HTTP/1.0 ")
_FOLD = (32, 9)  # a line starting with SP or HTAB continues the one before (obs-fold)


def _status_line(first: bytes) -> tuple[int, bytes]:
    """``(status, version)`` of a status line, or ``ProtocolError``."""
    if first[:9] in _FAST_VERSIONS and first[9:12].isdigit() and first[12:13] in (b" ", b""):
        status = int(first[9:12])
        if status >= 100:
            return status, first[:8]
    match = _STATUS_LINE.match(first)
    if not match:
        raise ProtocolError("expected an HTTP/1.x status line such as 'HTTP/1.1 200 OK'")
    return int(match.group(2)), match.group(1).upper()


def _head(reader: _Reader) -> tuple[int, bytes, dict[bytes, list[bytes]]]:
    first = reader.line()
    status, version = _status_line(first)
    headers: dict[bytes, list[bytes]] = {}
    size = len(first)
    values: list[bytes] | None = None  # the last field's values, for a folded line
    while (line := reader.line()):
        size += len(line)
        if size > MAX_HEAD_BYTES:
            raise ProtocolError("response headers larger than 64 KiB")
        if line[0] in _FOLD:  # obs-fold (RFC 9112 §5.2): replaced by a space, as curl does
            if values is None:
                raise ProtocolError("a folded header line with no header line before it "
                                    "(RFC 9112 §5.2)")
            values[-1] += b" " + line.strip()
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolError(f"a header line without a colon: {_shown(line)}")
        values = headers.setdefault(name.rstrip().lower(), [])
        values.append(value.strip())
    return status, version, headers


def _chunked(reader: _Reader) -> int:
    total = 0
    while True:
        size_line = reader.line().split(b";", 1)[0].strip()
        if not size_line or size_line.strip(b"0123456789abcdefABCDEF"):
            raise ProtocolError(f"expected a chunk size in hex, got {_shown(size_line)}")
        size = int(size_line, 16)
        if size == 0:
            while reader.line():  # trailers, up to the empty line
                pass
            return total
        reader.skip(size)
        total += size
        if reader.line():
            raise ProtocolError("a chunk not followed by its line end")


def _content_length(values: list[bytes]) -> int:
    """The length of ``Content-Length`` field values: one number, or a list (several fields,
    or commas) of one repeated number (RFC 9112 §6.3); anything else is invalid framing."""
    if len(values) == 1 and values[0].isdigit():
        return int(values[0])
    numbers = [item.strip() for value in values for item in value.split(b",")]
    if not all(number.isdigit() for number in numbers):
        raise ProtocolError(f"an invalid Content-Length {_shown(b', '.join(values))} "
                            "(RFC 9112 §6.3: digits only)")
    if len({int(number) for number in numbers}) > 1:
        raise ProtocolError(f"conflicting Content-Length values {_shown(b', '.join(values))} "
                            "(RFC 9112 §6.3: invalid framing)")
    return int(numbers[0])


def read_response(sock: socket.socket, buffer: bytearray, head: bool = False) -> RawResponse:
    """Read one whole response from ``sock`` (the body is counted, not kept); ``head``: the
    answer to a HEAD, which has no body whatever its headers say. An answer that cannot be
    read raises ``ProtocolError`` (or ``TimeoutError``) saying what was expected and what
    arrived (:data:`RECEIVED` and its first bytes, escaped)."""
    reader = _Reader(sock, buffer)
    try:
        return _response(reader, head)
    except NoResponse:
        raise
    except ProtocolError as exc:
        raise ProtocolError(f"{exc}{RECEIVED}{_shown(reader.received())}") from None
    except TimeoutError as exc:
        if not (reader.end or reader.gone):
            raise
        raise TimeoutError(f"{exc or 'timed out'}{RECEIVED}"
                           f"{_shown(reader.received())}") from None
    finally:
        reader.view.release()


def _response(reader: _Reader, head: bool) -> RawResponse:
    while True:
        status, version, headers = _head(reader)
        if status >= 200 or status == 101:
            break  # 1xx informational answers of any kind precede the final one
    connection = b",".join(headers.get(b"connection", [])).lower()
    keep_alive = (b"close" not in connection and
                  (version != b"HTTP/1.0" or b"keep-alive" in connection))
    if head or status < 200 or status in (204, 304):
        body = 0  # no body, whatever the headers say (RFC 9112 §6.3)
        keep_alive = keep_alive and status != 101  # 101: the connection speaks another protocol
    elif (encoding := headers.get(b"transfer-encoding")) is not None:
        if b"content-length" in headers:
            raise ProtocolError("both Transfer-Encoding and Content-Length (RFC 9112 §6.3: "
                                "ambiguous framing, to be handled as an error)")
        if b",".join(encoding).rsplit(b",", 1)[-1].strip().lower() == b"chunked":
            body = _chunked(reader)
        else:  # chunked is not the last coding: the body ends with the connection (§6.3)
            body, keep_alive = reader.drain(), False
    elif (lengths := headers.get(b"content-length")) is not None:
        body = _content_length(lengths)
        reader.skip(body)
    else:  # the body ends with the connection
        body, keep_alive = reader.drain(), False
    if reader.start != reader.end:
        keep_alive = False  # bytes beyond the answer: never reuse such a connection
    timing = headers.get(b"server-timing")
    location = headers.get(b"location")
    return RawResponse(status, b", ".join(timing).decode("latin-1") if timing else None,
                       location[0].decode("latin-1") if location else None, keep_alive, body)


def answered(error: str) -> bool:
    """Whether a failed request's ``error`` says the server did answer, with bytes that could
    not be read as HTTP/1.1 (so it was reached: the error names what arrived)."""
    return RECEIVED in error


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

