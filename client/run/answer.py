"""Reading one HTTP/1.1 answer from a socket, as curl reads it (RFC 9112), for the timed path.

The answer goes into one reused buffer and its body is counted, not kept. Read: the status line
and headers with CRLF or bare-LF line ends (§2.2), folded header lines (§5.2), 1xx answers of
any kind before the final one; a body framed by ``Content-Length`` (a list of one repeated
value too), by ``Transfer-Encoding: chunked`` (extensions and trailers allowed) or by the end
of the connection (HTTP/1.1 as 1.0); no body after HEAD, 1xx, 204 and 304 whatever the headers
say. Refused with the reason (§6.3): conflicting lengths, both ``Transfer-Encoding`` and
``Content-Length``, a length or chunk size that is no number. An answer that cannot be read
says what was expected and what arrived, its first bytes escaped (:func:`answered`).
tests/test_run_wire_corpus.py holds the answers real servers send, read side by side with curl.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

__all__ = ["MAX_HEAD_BYTES", "RECEIVED", "SHOWN", "NoResponse", "ProtocolError", "RawResponse",
           "answered", "read_response"]

MAX_HEAD_BYTES = 64 * 1024
SHOWN = 64      # an unreadable answer's first bytes shown in its error
RECEIVED = "; received "   # in an error: the server answered, and this is what arrived


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
