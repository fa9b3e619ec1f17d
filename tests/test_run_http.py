"""client.run.http: the httpx sender (``https://``), the sender chosen per URL, round-robin over
replicas, and the URL helpers; against scripted sockets and a real uvicorn."""

from __future__ import annotations

import pytest

from client.data.record import RequestRecord
from client.run.http import (HttpxSender, RoundRobinSender, build_url, limits_url, make_sender,
                             make_senders, request_headers)
from client.run.wire import SocketSender
from tests.scripted import Handler, answering, closing_the_second, scripted, unanswered
from tests.support import running_service

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: burn;dur=1.5\r\n\r\nok"


def httpx_sends(handler: Handler, count: int) -> list[RequestRecord]:
    """``count`` requests in a row through one :class:`HttpxSender` to a scripted server."""
    with scripted(handler) as url:
        sender = HttpxSender(url)
        try:
            return [sender.send(i, 0) for i in range(count)]
        finally:
            sender.close()


def test_build_url_sets_iterations_and_keeps_the_rest() -> None:
    assert build_url("http://h/cpuBurnFlow", 0) == "http://h/cpuBurnFlow"
    assert build_url("http://h/cpuBurnFlow?iterations=5&x=1", 7) == \
        "http://h/cpuBurnFlow?x=1&iterations=7"
    assert limits_url("https://h:8443/a/b?c=1") == "https://h:8443/limits"
    assert request_headers(True)["connection"] == "close"
    assert "connection" not in request_headers(False)


def test_plain_http_is_timed_on_a_socket_and_tls_through_httpx() -> None:
    plain, tls = make_sender("http://h/"), make_sender("https://h/")
    try:
        assert isinstance(plain, SocketSender) and isinstance(tls, HttpxSender)
    finally:
        plain.close(), tls.close()


def test_httpx_sender_records_status_and_server_timing() -> None:
    records = httpx_sends(answering(OK, OK), 2)
    assert [r.status for r in records] == [200, 200] and all(r.ok for r in records)
    assert records[0].server_wall_ns == 1_500_000


def test_httpx_sender_sends_once_more_when_the_server_closed_its_kept_alive_connection() -> None:
    # the close crosses the request: read, then closed without an answer (a server whose idle
    # timeout fires as the request arrives); the request goes again on a new connection
    connections: list[int] = []
    records = httpx_sends(closing_the_second(OK, connections), 3)
    assert [r.status for r in records] == [200, 200, 200], [r.error for r in records]
    assert connections == [0, 1]


def test_httpx_sender_does_not_retry_a_first_request_nobody_answered() -> None:
    connections: list[int] = []
    [record] = httpx_sends(unanswered(connections), 1)
    assert record.status == 0 and "without sending a response" in record.error
    assert connections == [0]


def test_httpx_sender_applies_the_status_rule_as_the_socket_sender() -> None:
    # a redirect is a timed answer, not followed: a success by default (as vegeta), an error
    # saying where it pointed under a rule that counts only 2xx
    from client.data.status import StatusRule

    moved = b"HTTP/1.1 301 Moved\r\nLocation: /there\r\nContent-Length: 0\r\n\r\n"
    [record] = httpx_sends(answering(moved), 1)
    assert (record.status, record.error, record.ok) == (301, "", True)
    with scripted(answering(moved)) as url:
        sender = HttpxSender(url, ok_status=StatusRule.parse("200-299"))
        try:
            strict = sender.send(0, 0)
        finally:
            sender.close()
    assert (strict.status, strict.ok) == (301, False)
    assert strict.error == "HTTP 301: redirect to /there (not followed)"


def test_round_robin_over_replicas_against_real_services() -> None:
    with running_service() as first, running_service() as second:
        senders = make_senders([f"{first}/healthz", f"{second}/healthz"], 1)
        assert len(senders) == 1 and isinstance(senders[0], RoundRobinSender)
        try:
            records = [senders[0].send(i, 0) for i in range(4)]
        finally:
            senders[0].close()
    assert [r.replica for r in records] == [0, 1, 0, 1]
    assert all(r.status == 200 for r in records)
    with pytest.raises(ValueError):
        RoundRobinSender([])


def test_the_httpx_sender_sends_the_request_as_asked() -> None:
    from client.data.request import HttpRequest
    from tests.recording import recording_server

    with recording_server() as (base, app):
        request = HttpRequest(f"{base}/a?b=1", "DELETE", (("X-Key", "k"), ("User-Agent", "u")),
                              b"gone")
        sender = HttpxSender([request])
        try:
            assert sender.send(0, 0).status == 200
        finally:
            sender.close()
    got = app.received[0]
    assert (got.method, got.target, got.body) == ("DELETE", "/a?b=1", b"gone")
    assert (got.header("x-key"), got.header("user-agent"), got.header("content-length")) == \
        ("k", "u", "4")


def test_timed_url_touches_only_burn_service() -> None:
    from client.run.http import timed_url

    assert timed_url("http://h/api?x=1", None) == "http://h/api?x=1"
    assert timed_url("http://h/api", 3) == "http://h/api?iterations=3"
    assert timed_url("http://h/cpuBurnFlow", None) == "http://h/cpuBurnFlow?iterations=5000"
    # the URL's own iterations are sent as given, even a value the service will refuse
    assert timed_url("http://h/cpuBurnFlow?iterations=-1", None) == \
        "http://h/cpuBurnFlow?iterations=-1"
    assert timed_url("http://h/cpuBurnFlow?iterations=9", 3) == \
        "http://h/cpuBurnFlow?iterations=3"   # --iterations says otherwise
