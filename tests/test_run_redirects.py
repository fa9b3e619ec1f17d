"""client.run.redirects and ``--follow-redirects``: which request a redirect asks for, and both
senders following it inside the request's time (the same origin on the same connection)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from client.data.request import HttpRequest
from client.data.status import StatusRule
from client.run.http import HttpxSender
from client.run.redirects import redirected
from client.run.wire import SocketSender
from tests.scripted import read_request, scripted

FOLLOW_3 = StatusRule(follow=3)


def test_the_request_a_redirect_asks_for() -> None:
    post = HttpRequest("http://h/a/b?q=1", "POST",
                       (("Authorization", "Bearer s"), ("Content-Type", "text/plain")), b"x")
    assert redirected(post, 200, "/c") is None and redirected(post, 302, None) is None
    same = redirected(post, 307, "c#frag")
    assert isinstance(same, HttpRequest)
    assert (same.url, same.method, same.body, same.headers) == \
        ("http://h/a/c", "POST", b"x", post.headers)        # 307: method and body kept
    for status in (301, 302, 303):
        got = redirected(post, status, "/d")
        assert isinstance(got, HttpRequest)
        assert (got.method, got.body, got.headers) == ("GET", None, (("Authorization",
                                                                        "Bearer s"),))
    head = redirected(HttpRequest("http://h/", "HEAD"), 303, "/e")
    assert isinstance(head, HttpRequest) and head.method == "HEAD"
    away = redirected(post, 308, "http://other:81/f")
    assert isinstance(away, HttpRequest)
    assert away.headers == (("Content-Type", "text/plain"),)   # no credentials elsewhere
    refused = redirected(post, 301, "https://h/", ("http://",))
    assert refused == ("HTTP 301: redirect to https://h/ not followed (this path follows "
                       "http:// only: time that URL)")


def redirecting(hops: int, connections: list[int], targets: list[bytes],
                elsewhere: str = "") -> Callable[[socket.socket, int], None]:
    """Answers ``/hop/N`` with a 302 to ``/hop/N+1`` until N = ``hops``, then 200 (to
    ``elsewhere`` + the next path, if given, once)."""
    def handle(conn: socket.socket, number: int) -> None:
        connections.append(number)
        while (request := read_request(conn)):
            target = request.split(b" ")[1]
            targets.append(target)
            step = int(target.rsplit(b"/", 1)[1]) if target.startswith(b"/hop/") else 0
            if target.startswith(b"/hop/") and step < hops:
                where = f"{elsewhere}/hop/{step + 1}".encode()
                conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: " + where +
                             b"\r\nContent-Length: 0\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    return handle


@pytest.mark.parametrize("sender", ["socket", "httpx"])
def test_redirects_are_followed_on_the_same_connection(sender: str) -> None:
    connections: list[int] = []
    targets: list[bytes] = []
    with scripted(redirecting(2, connections, targets)) as url:
        base = url.split("/x")[0]
        make = SocketSender([HttpRequest(base + "/hop/0")], {}, ok_status=FOLLOW_3) \
            if sender == "socket" else HttpxSender(base + "/hop/0", ok_status=FOLLOW_3)
        try:
            records = [make.send(i, 0) for i in range(2)]
        finally:
            make.close()
    assert [(r.status, r.error) for r in records] == [(200, "")] * 2
    assert targets == [b"/hop/0", b"/hop/1", b"/hop/2"] * 2
    assert connections == [0]


@pytest.mark.parametrize("sender", ["socket", "httpx"])
def test_too_many_redirects_say_so(sender: str) -> None:
    connections: list[int] = []
    targets: list[bytes] = []
    rule = StatusRule(follow=2)
    with scripted(redirecting(9, connections, targets)) as url:
        base = url.split("/x")[0]
        make = SocketSender([HttpRequest(base + "/hop/0")], {}, ok_status=rule) \
            if sender == "socket" else HttpxSender(base + "/hop/0", ok_status=rule)
        try:
            record = make.send(0, 0)
        finally:
            make.close()
    assert (record.status, record.ok) == (302, False)
    assert record.error == "HTTP 302: more than 2 redirects (the next to /hop/3)"
    assert targets == [b"/hop/0", b"/hop/1", b"/hop/2"]


def test_a_redirect_to_another_origin_keeps_this_connection() -> None:
    here: list[int] = []
    there: list[int] = []
    targets: list[bytes] = []
    with scripted(redirecting(0, there, targets)) as other:
        other_base = other.split("/x")[0]
        with scripted(redirecting(1, here, targets, elsewhere=other_base)) as url:
            base = url.split("/x")[0]
            with SocketSender([HttpRequest(base + "/hop/0")], {}, ok_status=FOLLOW_3) as s:
                records = [s.send(i, 0) for i in range(3)]
                assert s.connects == 1
    assert [(r.status, r.error) for r in records] == [(200, "")] * 3
    assert targets == [b"/hop/0", b"/hop/1"] * 3
    assert (here, there) == ([0], [0, 1, 2])  # this connection kept; the other one each time


def test_not_followed_unless_asked() -> None:
    connections: list[int] = []
    targets: list[bytes] = []
    with scripted(redirecting(2, connections, targets)) as url:
        with SocketSender([HttpRequest(url.split("/x")[0] + "/hop/0")], {}) as sender:
            record = sender.send(0, 0)
    assert (record.status, record.error, targets) == (302, "", [b"/hop/0"])
