"""client.run.eventloop: the open loop on one thread and one select, against real servers."""

from __future__ import annotations

import threading

from client.data.record import RequestRecord
from client.data.request import HttpRequest
from client.run.eventloop import eligible
from client.run.modes import time_plan
from client.run.plan import LoadPlan, intended_send_ns
from tests.recording import recording_server
from tests.support import free_port, running_service


def test_only_plain_http_to_one_origin_goes_through_one_thread() -> None:
    assert eligible([HttpRequest("http://h/a"), HttpRequest("http://h:80/b", "POST")])
    assert not eligible([HttpRequest("http://h/a"), HttpRequest("http://h:81/a")])
    assert not eligible([HttpRequest("https://h/a")])
    assert not eligible([])


def test_an_open_loop_runs_on_one_worker_thread_and_sends_everything_on_time() -> None:
    seen: set[str] = set()
    records: list[RequestRecord] = []

    def keep(record: RequestRecord) -> None:
        seen.add(threading.current_thread().name)
        records.append(record)

    with running_service() as base:
        time_plan(base + "/healthz", LoadPlan.from_options(rate=400, requests=200), keep)
    assert len(seen) == 1  # one thread sent and read every request
    assert sorted(r.seq for r in records) == list(range(200))
    assert all(r.status == 200 for r in records), {r.error for r in records}
    for r in records:
        assert r.scheduled_ns == intended_send_ns(r.seq, 400)
        assert r.start_ns >= r.scheduled_ns  # never early
        assert r.latency_ns >= r.start_ns - r.scheduled_ns


def test_new_connections_and_targets_round_robin() -> None:
    records: list[RequestRecord] = []
    with recording_server() as (base, app):
        targets = [HttpRequest(f"{base}/a"), HttpRequest(f"{base}/b", "POST", body=b"x")]
        time_plan(targets, LoadPlan.from_options(rate=200, requests=10), records.append,
                  new_connection=True, label="target")
    assert sorted((r.seq, r.target) for r in records) == [(i, i % 2) for i in range(10)]
    assert all(r.status == 200 for r in records), {r.error for r in records}
    assert sorted((g.method, g.target, g.body) for g in app.received) == sorted(
        [("GET", "/a", b""), ("POST", "/b", b"x")] * 5)
    assert all(g.header("connection") == "close" for g in app.received)


def test_failures_are_recorded_and_stop_the_loop() -> None:
    records: list[RequestRecord] = []
    url = f"http://127.0.0.1:{free_port()}/"
    outcome = time_plan(url, LoadPlan.from_options(rate=1000, requests=500), records.append,
                        max_consecutive_failures=5)
    assert len(records) == 5 and all(r.status == 0 and "ConnectError" in r.error
                                     for r in records)
    assert outcome.stop_reason == "stopped after 5 consecutive connection failures"
