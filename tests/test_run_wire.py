"""client.run.wire: the socket timed path and its HTTP/1.1 parser, against real sockets that
answer exactly what each test says (framing, closes, errors), and against a real uvicorn."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.data.record import RequestRecord
from client.run.answer import read_response
from client.run.wire import SocketSender, encode_get, encode_request
from tests.scripted import (Handler, answering, closing_the_second, read_request, scripted,
                            unanswered)
from tests.support import free_port, running_service


def once(url: str, **options: float) -> RequestRecord:
    with SocketSender(url, {}, **options) as sender:
        return sender.send(0, 0)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: burn;dur=1.5\r\n\r\nok"


def test_the_request_is_encoded_once() -> None:
    host, port, request = encode_get("http://127.0.0.1:7800/cpuBurnFlow?iterations=5",
                                     {"user-agent": "t", "connection": "close"})
    assert (host, port) == ("127.0.0.1", 7800)
    assert request == (b"GET /cpuBurnFlow?iterations=5 HTTP/1.1\r\nHost: 127.0.0.1:7800\r\n"
                       b"Accept: */*\r\nuser-agent: t\r\nconnection: close\r\n\r\n")
    assert encode_get("http://h/", {})[2].startswith(b"GET / HTTP/1.1\r\nHost: h\r\n")
    with pytest.raises(ValueError):
        encode_get("https://h/", {})


def test_keep_alive_content_length_and_server_timing() -> None:
    seen: list[bytes] = []

    def handle(conn: socket.socket, number: int) -> None:
        seen.append(b"connection %d" % number)
        for _ in range(3):
            if not read_request(conn):
                return
            conn.sendall(OK)

    with scripted(handle) as url:
        sender = SocketSender(url, {"user-agent": "t"})
        records = [sender.send(i, 0) for i in range(3)]
        sender.close()
    assert [r.status for r in records] == [200, 200, 200] and all(r.ok for r in records)
    assert records[0].server_wall_ns == 1_500_000
    assert seen == [b"connection 0"]  # one keep-alive connection for all three


@settings(max_examples=30, deadline=None)
@given(body=st.binary(max_size=300_000), cuts=st.lists(st.integers(1, 70_000), max_size=6),
       extension=st.booleans(), trailer=st.booleans())
def test_chunked_bodies_are_read_whole(body: bytes, cuts: list[int], extension: bool,
                                       trailer: bool) -> None:
    chunks, rest = [], body
    for cut in cuts:
        chunks.append(rest[:cut])
        rest = rest[cut:]
    chunks.append(rest)
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for chunk in (c for c in chunks if c):
        wire += b"%x%s\r\n%s\r\n" % (len(chunk), b";x=1" if extension else b"", chunk)
    wire += b"0\r\n" + (b"X-Trailer: t\r\n" if trailer else b"") + b"\r\n"
    left, right = socket.socketpair()
    with left, right:
        writer = threading.Thread(target=right.sendall, args=(wire,))
        writer.start()
        response = read_response(left, bytearray(1024))
        assert (response.status, response.body_bytes, response.keep_alive) == (
            200, len(body), True)
        writer.join(5)
        right.sendall(OK)
        follow = read_response(left, bytearray(1024))  # nothing of the first was left over
    assert follow.server_timing == "burn;dur=1.5"


def test_bytes_beyond_the_answer_close_the_connection() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.sendall(OK + b"HTTP/1.1 200 OK\r\n")  # an answer to a question never asked
        assert not read_response(left, bytearray(1024)).keep_alive


@pytest.mark.parametrize(("answer", "status", "kept"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", 200, True),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 204, True),
    (b"HTTP/1.1 200 OK\r\n\r\nbody until the end", 200, False),
])
def test_framing_and_connection_reuse(answer: bytes, status: int, kept: bool) -> None:
    left, right = socket.socketpair()
    with left, right:
        right.sendall(answer)
        if not kept and b"Content-Length" not in answer:
            right.shutdown(socket.SHUT_WR)
        response = read_response(left, bytearray(16))
    assert (response.status, response.keep_alive) == (status, kept)


def test_connection_close_connects_again_inside_the_timed_path() -> None:
    connections: list[int] = []

    def handle(conn: socket.socket, number: int) -> None:
        connections.append(number)
        answering(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                  keep=False)(conn, number)

    with scripted(handle) as url:
        with SocketSender(url, {"connection": "close"}) as sender:
            assert [sender.send(i, 0).status for i in range(3)] == [200, 200, 200]
    assert connections == [0, 1, 2]


def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    # the first connection answers once and closes (as uvicorn does after its keep-alive
    # timeout); the next request goes on a new connection and succeeds
    with scripted(answering(OK, keep=False)) as url:
        sender = SocketSender(url, {})
        first = sender.send(0, 0)
        import time

        time.sleep(0.1)
        second = sender.send(1, 0)
        sender.close()
    assert (first.status, second.status) == (200, 200)


def test_a_request_that_crosses_the_servers_close_is_sent_once_more() -> None:
    # the server reads the second request on the kept-alive connection and closes it
    # unanswered, as one whose idle timeout fires while the request is on the wire: the
    # request goes once more on a new connection, inside its time
    connections: list[int] = []
    with scripted(closing_the_second(OK, connections)) as url, SocketSender(url, {}) as sender:
        records = [sender.send(i, 0) for i in range(3)]
    assert [r.status for r in records] == [200, 200, 200], [r.error for r in records]
    assert connections == [0, 1]


def test_a_new_connection_closed_unanswered_is_an_error_not_a_retry() -> None:
    connections: list[int] = []
    with scripted(unanswered(connections)) as url:
        record = once(url)
    assert record.status == 0 and "without sending a response" in record.error
    assert connections == [0]


def test_redirects_are_timed_answers_not_followed() -> None:
    # as vegeta: a 3xx is a success by default (its own time is what was measured); with a
    # rule that counts it an error, the error says where it pointed
    from client.data.status import StatusRule

    moved = b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"
    with scripted(answering(moved)) as url:
        record = once(url)
    assert (record.status, record.error, record.ok) == (302, "", True)
    with scripted(answering(moved)) as url, \
            SocketSender(url, {}, ok_status=StatusRule.parse("200-299")) as sender:
        strict = sender.send(0, 0)
    assert (strict.status, strict.ok) == (302, False)
    assert strict.error == "HTTP 302: redirect to /elsewhere (not followed)"


@pytest.mark.parametrize(("handler", "error"), [
    (lambda conn, n: (read_request(conn), conn.sendall(b"garbage\r\n\r\n")),
     "RemoteProtocolError: expected an HTTP/1.x status line such as 'HTTP/1.1 200 OK'; "
     "received 'garbage\\r\\n\\r\\n'"),
    (lambda conn, n: read_request(conn), "RemoteProtocolError: Server disconnected without "
                                         "sending a response."),
    (lambda conn, n: (read_request(conn), conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9"
                                                       b"\r\n\r\nshort")),
     "RemoteProtocolError: Server disconnected before the end of the body (expected 4 more "
     "bytes); received 'HTTP/1.1 200 OK\\r\\nContent-Length: 9\\r\\n\\r\\nshort'"),
    (lambda conn, n: (read_request(conn),
                      conn.sendall(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")),
     "RemoteProtocolError: response headers larger than 64 KiB; received 'HTTP/1.1 200 OK\\r\\nX: "
     "aaaa"),
])
def test_broken_answers_are_recorded_as_transport_errors(handler: Handler, error: str) -> None:
    with scripted(handler) as url:
        record = once(url)
    assert record.status == 0 and record.error.startswith(error), record.error


def test_refused_and_timed_out() -> None:
    refused = once(f"http://127.0.0.1:{free_port()}/")
    assert refused.status == 0 and refused.error.startswith("ConnectError: ")
    with scripted(lambda conn, n: (read_request(conn), read_request(conn))) as url:
        slow = once(url, timeout=0.2)
    assert slow.status == 0 and slow.error.startswith("ReadTimeout: ")
    assert "received" not in slow.error   # nothing arrived
    stalled = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab"
    with scripted(lambda conn, n: (read_request(conn), conn.sendall(stalled),
                                   read_request(conn))) as url:
        partial = once(url, timeout=0.3)
    assert partial.status == 0 and partial.error == (
        "ReadTimeout: timed out; received 'HTTP/1.1 200 OK\\r\\nContent-Length: 10\\r\\n\\r\\nab'")


def test_against_uvicorn_the_records_match_httpx() -> None:
    from client.run.http import HttpxSender, request_headers

    with running_service() as base:
        url = base + "/cpuBurnFlow?iterations=100"
        raw, lean = SocketSender(url, request_headers(False)), HttpxSender(url)
        a, b = raw.send(0, 0), lean.send(0, 0)
        raw.close()
        lean.close()
    assert (a.status, a.error) == (b.status, b.error) == (200, "")
    assert a.server_cpu_ns is not None and b.server_cpu_ns is not None


def test_encode_request_puts_the_method_headers_and_body_on_the_wire() -> None:
    from client.data.request import HttpRequest

    request = HttpRequest("http://h:81/a/b?c=1&d", "PATCH",
                          (("User-Agent", "mine"), ("Content-Length", "999")), b"{}")
    host, port, data = encode_request(request, {"user-agent": "http-timing/x"})
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert (host, port, body) == ("h", 81, b"{}")
    assert lines[0] == "PATCH /a/b?c=1&d HTTP/1.1"
    assert sorted(lines[1:]) == ["Accept: */*", "Content-Length: 2", "Host: h:81",
                                 "User-Agent: mine"]


def test_the_answer_to_a_head_has_no_body_whatever_its_length_says() -> None:
    from client.data.request import HttpRequest

    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
    with scripted(answering(head, head)) as url:
        with SocketSender([HttpRequest(url, "HEAD")], {}) as sender:
            records = [sender.send(i, 0) for i in range(2)]
    assert [r.status for r in records] == [200, 200], [r.error for r in records]


@settings(max_examples=300, deadline=None)
@given(prefix=st.sampled_from([b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\n",
                               b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 204 X\n",
                               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                               b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"]),
       noise=st.binary(max_size=200), line_ends=st.booleans())
def test_any_bytes_are_an_answer_or_a_protocol_error(prefix: bytes, noise: bytes,
                                                     line_ends: bool) -> None:
    # whatever a server sends before it closes, the reader returns an answer or says why it
    # cannot read one (never another exception, never a wait past the close)
    from client.run.answer import ProtocolError

    if line_ends:
        noise = noise.replace(b"\x00", b"\n")
    left, right = socket.socketpair()
    with left, right:
        left.settimeout(5)
        right.sendall(prefix + noise)
        right.shutdown(socket.SHUT_WR)
        try:
            response = read_response(left, bytearray(16))
        except ProtocolError as exc:
            assert str(exc)
        else:
            assert response.status >= 100 and response.body_bytes >= 0
