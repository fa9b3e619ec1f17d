"""client.run.modes against a real server: sequential, closed loop, open loop, one recorder."""

from __future__ import annotations

import threading
import time

from client.data.record import RequestRecord
from client.run.modes import time_plan
from client.run.plan import LoadPlan, intended_send_ns
from tests.support import free_port, running_service

MS = 1_000_000


class Collector:
    """An on_record that fails the test if it is ever called by two threads at once."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.overlapped = False
        self._busy = threading.Lock()

    def __call__(self, record: RequestRecord) -> None:
        if not self._busy.acquire(blocking=False):
            self.overlapped = True
            return
        try:
            time.sleep(0.001)  # widen the window a concurrent call would hit
            self.records.append(record)
        finally:
            self._busy.release()


# --- closed loop ------------------------------------------------------------------------------

def test_closed_loop_runs_requests_at_the_same_time() -> None:
    collect = Collector()
    with running_service() as base:
        outcome = time_plan(base + "/cpuBurnFlow?iterations=3000",
                            LoadPlan.from_options(concurrency=3, requests=12), collect)
    assert not collect.overlapped
    assert outcome.records == collect.records and outcome.stop_reason is None
    assert sorted(r.seq for r in collect.records) == list(range(12))
    assert all(r.status == 200 and r.scheduled_ns is None for r in collect.records)
    assert all(r.server_cpu_ns for r in collect.records)
    spans = sorted((r.start_ns, r.start_ns + r.latency_ns) for r in collect.records)
    overlaps = sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)
    assert overlaps >= 1, spans  # three workers: some requests were in flight together


def test_closed_loop_for_a_duration_starts_nothing_after_it() -> None:
    collect = Collector()
    with running_service() as base:
        time_plan(base + "/cpuBurnFlow?iterations=500",
                  LoadPlan.from_options(concurrency=2, duration=0.4), collect)
    assert collect.records
    # the deadline is checked just before each send reads its clock: a thread preempted between
    # the two starts its request a little after 0.4 s (10 µs under CI's load), never 50 ms after
    # (without the check, requests of ~0.5 ms go on for as long as the tickets last)
    assert max(r.start_ns for r in collect.records) < 0.45e9, max(
        r.start_ns for r in collect.records)
    assert sorted(r.seq for r in collect.records) == list(range(len(collect.records)))


def test_failures_stop_a_concurrent_run_once() -> None:
    collect = Collector()
    url = f"http://127.0.0.1:{free_port()}/cpuBurnFlow"
    outcome = time_plan(url, LoadPlan.from_options(concurrency=3, requests=1000), collect,
                        max_consecutive_failures=5)
    assert len(collect.records) == 5  # nothing more reaches on_record after the stop
    assert all(r.status == 0 and "Connect" in r.error for r in collect.records)
    assert outcome.stop_reason == "stopped after 5 consecutive connection failures"


# --- open loop ----------------------------------------------------------------------------------

def test_open_loop_sends_each_request_when_it_is_due() -> None:
    collect = Collector()
    with running_service() as base:
        time_plan(base + "/cpuBurnFlow?iterations=500", LoadPlan.from_options(rate=40, requests=12),
                  collect)
    records = sorted(collect.records, key=lambda r: r.seq)
    assert [r.seq for r in records] == list(range(12))
    assert [r.scheduled_ns for r in records] == [intended_send_ns(i, 40) for i in range(12)]
    for r in records:
        assert r.scheduled_ns is not None and r.status == 200
        assert r.start_ns >= r.scheduled_ns - MS  # never sent early
        assert r.latency_ns > r.start_ns - r.scheduled_ns  # the wait to be sent is counted
    # a quiet server keeps up: most requests go out near their time (a generous bound, ten
    # of the plan's 25 ms intervals: on a busy 2-core machine, under the test suite's own
    # load, a thread's wake-up alone took up to 109 ms; punctuality is measured in
    # benchmarks/load_modes.py)
    lags = sorted(r.start_ns - r.scheduled_ns for r in records)
    assert lags[len(lags) // 2] < 250 * MS, lags


def test_open_loop_counts_the_time_a_stall_held_requests_back() -> None:
    """No coordinated omission: one connection, requests due faster than it can serve them.
    Each latency runs from the intended send, so the queue behind a slow request shows."""
    collect = Collector()
    with running_service() as base:
        time_plan(base + "/cpuBurnFlow?iterations=30000",
                  LoadPlan.from_options(rate=200, requests=20), collect, connections=1)
    records = sorted(collect.records, key=lambda r: r.seq)
    assert len(records) == 20
    last = records[-1]
    assert last.scheduled_ns == intended_send_ns(19, 200)
    held_back = last.start_ns - last.scheduled_ns
    assert held_back > 100 * MS  # 19 requests of >= 20 ms each went first
    for r in records:  # latency = held back + the request's own time (>= the server's part)
        assert r.server_wall_ns is not None
        assert r.latency_ns >= (r.start_ns - r.scheduled_ns) + r.server_wall_ns
    assert last.latency_ns > 5 * last.server_wall_ns  # what a closed loop would not show


def test_time_plan_dispatches_each_mode() -> None:
    with running_service() as base:
        url = base + "/cpuBurnFlow?iterations=100"
        seq = time_plan(url, LoadPlan.from_options(requests=3), lambda r: None)
        closed = time_plan(url, LoadPlan.from_options(concurrency=2, requests=4), lambda r: None)
        opened = time_plan(url, LoadPlan.from_options(rate=50, requests=3), lambda r: None)
    assert [r.seq for r in seq.records] == [0, 1, 2]
    assert len(closed.records) == 4 and all(r.scheduled_ns is None for r in closed.records)
    assert len(opened.records) == 3 and all(r.scheduled_ns is not None for r in opened.records)


def test_requests_are_spread_round_robin_over_replicas() -> None:
    collect = Collector()
    with running_service() as a, running_service() as b, running_service() as c:
        urls = [base + "/cpuBurnFlow?iterations=100" for base in (a, b, c)]
        time_plan(urls, LoadPlan.from_options(requests=9), collect)
        concurrent = Collector()
        time_plan(urls, LoadPlan.from_options(concurrency=2, requests=12), concurrent)
    assert [(r.seq, r.replica) for r in sorted(collect.records, key=lambda r: r.seq)] == [
        (i, i % 3) for i in range(9)]
    assert all(r.status == 200 for r in collect.records)
    assert sorted(r.replica or 0 for r in concurrent.records) == sorted(i % 3 for i in range(12))
