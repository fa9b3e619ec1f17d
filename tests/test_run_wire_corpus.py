"""client.run.answer (through client.run.wire) against the answers real servers send, byte for byte, side by side with curl.

Each case is the bytes of one answer, where they come from (a server, or the RFC 9112 section
that allows or forbids them), and what the client must make of it: a timed answer (its status
and body length, the kept-alive connection reused where the server keeps it) or a refusal
with the reason. A scripted server on 127.0.0.1 sends the same bytes to curl, and curl must
read them the same: the same status and body length, or a failure too. Where curl 7.88.1
(Debian 12) reads a message RFC 9112 calls invalid, the case says so (``curl``), and the client
refuses it anyway.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass

import pytest

from client.data.request import HttpRequest
from client.run.answer import RECEIVED, answered
from client.run.wire import SocketSender
from tests.scripted import read_request, scripted

CRLF = b"\r\n"


@dataclass(frozen=True)
class Case:
    name: str
    source: str          # the server that sends it, or the RFC section
    answer: bytes        # the whole answer to one request
    status: int = 200    # 0: refused
    body: int = 0        # the body's length in bytes
    closes: bool = False  # the server closes the connection after the answer
    refused: str = ""    # part of the error of a refused answer
    head: bool = False   # the answer to a HEAD
    curl: str = ""       # how curl 7.88.1 reads it differently, if it does

    @property
    def kept(self) -> bool:
        return not self.closes and not self.refused


CASES = [
    Case("content-length", "nginx 1.22 static file",
         b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Wed, 25 Nov 2026 08:00:00 GMT\r\n"
         b"Content-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\n"
         b"ETag: \"6565d1e0-5\"\r\nAccept-Ranges: bytes\r\n\r\nhello", body=5),
    Case("chunked", "uvicorn streaming response",
         b"HTTP/1.1 200 OK\r\ndate: Wed, 25 Nov 2026 08:00:00 GMT\r\nserver: uvicorn\r\n"
         b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", body=11),
    Case("chunked-extensions-trailer", "RFC 9112 §7.1.1, §7.1.2",
         b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
         b"5;name=value\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n", body=5),
    Case("busybox-cgi", "busybox 1.35 httpd: a CGI script's echo'd headers passed through "
         "with bare LFs, the body ended by the close (RFC 9112 §2.2, §6.3)",
         b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\n\nburnt iterations=5\n", body=19,
         closes=True),
    Case("busybox-cgi-status", "busybox 1.35 httpd: a CGI script's 'Status: 304' header",
         b"HTTP/1.1 304 Not Modified\n\n", status=304, closes=True),
    Case("python-cgi", "Python 3.11 http.server --cgi: its head, then the script's bare LFs",
         b"HTTP/1.0 200 Script output follows\r\nServer: SimpleHTTP/0.6 Python/3.11.2\r\n"
         b"Date: Wed, 25 Nov 2026 07:57:42 GMT\r\nContent-Type: text/plain\n\n"
         b"burnt iterations=5\n", body=19, closes=True),
    Case("bare-lf", "RFC 9112 §2.2: a server whose every line ends in a bare LF",
         b"HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok", body=2),
    Case("bare-lf-chunked", "RFC 9112 §2.2, §7.1: bare LFs in the chunk framing too",
         b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nok\n0\nX-T: 1\n\n", body=2),
    Case("close-delimited-1.1", "RFC 9112 §6.3 (8): HTTP/1.1 with neither length nor chunks",
         b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until the close",
         body=20, closes=True),
    Case("close-delimited-1.0", "Python 3.11 http.server (HTTP/1.0) without a length",
         b"HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3.11.2\r\n\r\nhello", body=5,
         closes=True),
    Case("http-1.0-keep-alive", "HTTP/1.0 with Connection: keep-alive (RFC 9112 §9.3)",
         b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", body=2),
    Case("connection-close", "Connection: close with a length (RFC 9112 §9.6)",
         b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", body=2,
         closes=True),
    Case("content-length-list", "RFC 9112 §6.3 (5): a list of one repeated value",
         b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", body=2),
    Case("content-length-twice", "RFC 9112 §6.3 (5): the same length in two fields",
         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", body=2),
    Case("obs-fold", "RFC 9112 §5.2: a folded header line (as old servers send)",
         b"HTTP/1.1 200 OK\r\nX-Long: first\r\n second\r\n\tthird\r\nContent-Length: 2\r\n\r\nok",
         body=2),
    Case("informational", "RFC 9110 §15.2: 100, 102 and a 103 Early Hints (RFC 8297) first",
         b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"
         b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body=2),
    Case("informational-bare-lf", "a 1xx of an unknown kind, bare LFs (RFC 9110 §15.2)",
         b"HTTP/1.1 199 Whatever\nX: 1\n\nHTTP/1.1 200 OK\nContent-Length: 2\n\nok", body=2),
    Case("informational-with-length", "RFC 9112 §6.3 (1): a 1xx has no body, whatever it says",
         b"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\n"
         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body=2),
    Case("head", "RFC 9110 §9.3.2: the length of the body a GET would get, and no body",
         b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", head=True),
    Case("204-with-length", "RFC 9112 §6.3 (1): 204 has no body, whatever it says",
         b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", status=204),
    Case("304-with-length", "RFC 9110 §8.6: a 304 may send the length of the body it spares",
         b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 5\r\n\r\n", status=304),
    Case("304-chunked", "RFC 9112 §6.3 (1): 304 has no body, even said to be chunked",
         b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", status=304),
    Case("no-reason-phrase", "RFC 9112 §4: the reason phrase may be empty",
         b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", body=2),
    Case("404", "any server: an answer, timed and kept with its status",
         b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found", status=404, body=9),
    Case("plain-http-to-https", "Go net/http TLS server answering a plain request",
         b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
         status=400, body=48, closes=True),
    Case("conflicting-lengths", "RFC 9112 §6.3 (5): invalid framing",
         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!",
         status=0, refused="conflicting Content-Length values",
         curl="takes the last Content-Length"),
    Case("both-lengths", "RFC 9112 §6.3 (3): Transfer-Encoding and Content-Length",
         b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"2\r\nok\r\n0\r\n\r\n", status=0, refused="both Transfer-Encoding and Content-Length",
         curl="reads the chunks, ignoring Content-Length"),
    Case("invalid-length", "RFC 9112 §6.3 (5): not a number",
         b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nok", status=0, closes=True,
         refused="an invalid Content-Length 'abc'"),
    Case("no-colon", "RFC 9112 §5: a header line without a colon",
         b"HTTP/1.1 200 OK\r\nnonsense\r\nContent-Length: 2\r\n\r\nok", status=0, closes=True,
         refused="a header line without a colon"),
    Case("bad-chunk-size", "RFC 9112 §7.1: a chunk size not in hex",
         b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
         status=0, closes=True, refused="expected a chunk size in hex, got 'zz'"),
    Case("short-body", "a server that dies mid-body",
         b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nok", status=0, closes=True,
         refused="before the end of the body (expected 7 more bytes)"),
    Case("ssh-server", "OpenSSH on the port (not HTTP at all)",
         b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n", status=0, closes=True,
         refused="expected an HTTP/1.x status line such as 'HTTP/1.1 200 OK'; received "
                 "'SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\\r\\n'"),
]


def serve(case: Case, connections: list[int]):  # type: ignore[no-untyped-def]
    """Answer every request with the case's bytes (one per connection if it closes)."""
    def handle(conn: socket.socket, number: int) -> None:
        connections.append(number)
        while read_request(conn):
            conn.sendall(case.answer)
            if case.closes or case.refused:
                return
    return scripted(handle)


def read_twice(case: Case) -> tuple[list[tuple[int, int, str]], list[int]]:
    """``(status, body length, error)`` of two requests, and the connections they took."""
    connections: list[int] = []
    with serve(case, connections) as url:
        with SocketSender([HttpRequest(url, "HEAD" if case.head else "GET")], {},
                          timeout=5) as sender:
            seen = []
            for seq in range(2):
                record = sender.send(seq, 0)
                body = sender.last.body_bytes if record.status and sender.last else 0
                seen.append((record.status, body, record.error))
    return seen, connections


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_client_reads_what_real_servers_send(case: Case) -> None:
    seen, connections = read_twice(case)
    for status, body, error in seen:
        assert (status, body) == (case.status, case.body), error
        if case.refused:
            assert case.refused in error and answered(error), error
        else:
            assert error == ("" if 200 <= status < 400 else f"HTTP {status}")
    assert connections == ([0] if case.kept else [0, 1])  # reused where the server keeps it


def curl_reads(case: Case) -> tuple[int, list[tuple[int, int, int]]]:
    """curl's exit code and ``(status, body length, new connections)`` of two requests."""
    connections: list[int] = []
    with serve(case, connections) as url:
        done = subprocess.run(
            ["curl", "-sS", "--max-time", "5", *(["--head"] if case.head else []),
             "-o", "/dev/null", "-o", "/dev/null",
             "-w", "%{http_code} %{size_download} %{num_connects}\\n", url, url],
            capture_output=True, text=True, timeout=30)
    rows = [tuple(int(v) for v in line.split()) for line in done.stdout.splitlines()]
    return done.returncode, rows  # type: ignore[return-value]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_curl_reads_the_same(case: Case) -> None:
    if shutil.which("curl") is None:
        pytest.skip("no curl (scripts/install-system-deps.sh installs it)")
    code, rows = curl_reads(case)
    if case.curl:  # a message RFC 9112 calls invalid, which curl 7.88.1 reads anyway
        assert code == 0, rows
        return
    if case.refused:
        assert code != 0, rows
        return
    assert code == 0 and [(status, body) for status, body, _ in rows] == \
        [(case.status, case.body)] * 2
    assert rows[1][2] == (0 if case.kept else 1)  # curl reused the connection where we did


def test_an_unreadable_answer_is_cut_short_and_escaped() -> None:
    noise = bytes(range(256))
    connections: list[int] = []
    with serve(Case("noise", "", noise, closes=True), connections) as url:
        with SocketSender(url, {}) as sender:
            error = sender.send(0, 0).error
    shown = error.split(RECEIVED, 1)[1]
    assert shown.startswith("'\\x00\\x01\\x02") and shown.endswith("'...")
    assert len(shown) < 300 and "\x00" not in error
