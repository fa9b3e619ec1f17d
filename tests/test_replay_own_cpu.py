"""The replay with each request's own CPU (the server's ``Server-Timing``, a run's
``server_cpu_ns``): a row the requests shared is shared by what each one burned, not by how
long each one lasted; on rows a period apart, each request runs its own CPU, scaled by what
the group ran over what the requests said, and no request is given the CPU of the one beside
it. Fake clocks and the quota model (tests/test_analysis_replay.py's timelines)."""

from __future__ import annotations

import dataclasses

import pytest

from client.analysis.replay import Request, demand_of, load_of, replay_limits
from client.data.timeline import CgroupSample
from tests.test_analysis_replay import MS, PERIOD, first_half, recorded, sequential


def test_a_row_two_requests_shared_is_shared_by_each_ones_own_cpu() -> None:
    # 50 ms of CPU in periods 1-17, nothing outside the requests
    demand = demand_of(recorded(1.0, lambda t: first_half(t) and 1 <= t // PERIOD <= 17),
                       PERIOD)
    # in each period: 0-40 ms a request that burned 30 ms, 10-50 ms one that burned 10 ms
    heavy = [Request(p * PERIOD, 40 * MS, 0, 30 * MS) for p in range(1, 18)]
    light = [Request(p * PERIOD + 10 * MS, 40 * MS, 0, 10 * MS) for p in range(1, 18)]
    own = load_of(demand, heavy + light)
    by_overlap = load_of(demand, [dataclasses.replace(r, cpu_ns=None) for r in heavy + light])
    # 0-10 ms is the heavy one's alone, 40-50 the light one's; 10-40 shared 3 to 1
    assert [j.cpu_ns for j in own.jobs[:2]] == pytest.approx([32.5 * MS, 17.5 * MS])
    assert [j.cpu_ns for j in by_overlap.jobs[:2]] == pytest.approx([25 * MS, 25 * MS])
    for load in (own, by_overlap):   # every ns of the record's CPU once
        assert sum(j.cpu_ns for j in load.jobs) + sum(load.background_ns) == pytest.approx(
            demand.usage_ns)


def test_on_rows_a_period_apart_an_unthrottled_replay_runs_each_requests_own_cpu() -> None:
    timeline, requests = sequential(0.1, 5, count=40, gap_ms=1)   # throttled, one at a time
    rows = timeline[::7]   # 70 ms apart, as the node agent's: where a throttle lay is not known
    demand = demand_of(rows, PERIOD)
    assert demand.coarse and demand.recorded.nr_throttled > 0
    own = [dataclasses.replace(r, cpu_ns=5 * MS) for r in requests]
    (free,) = replay_limits(demand, [None], own)
    assert free.latencies_ns is not None
    ran = sum(b.usage_ns - a.usage_ns for a, b in zip(rows, rows[1:]))
    # the group ran nothing but the requests: each one its own 5 ms, none another's
    assert ran == pytest.approx(len(requests) * 5 * MS, rel=0.05)
    for latency in free.latencies_ns:
        assert latency == pytest.approx(5 * MS * ran / (len(requests) * 5 * MS), abs=2)


def steady(row_ms: int, background_ms: int) -> tuple[list[CgroupSample], list[Request]]:
    """Rows ``row_ms`` apart, never throttled: the group runs ``background_ms`` in every row
    (its own work, at a steady rate) and, in rows 5-24, one request of 20 ms of its own CPU."""
    rows, usage, requests = [], 0, []
    for i in range(31):
        rows.append(CgroupSample(i * row_ms * MS, usage, i, 0, 0))
        usage += background_ms * MS
        if 5 <= i < 25:
            requests.append(Request(i * row_ms * MS + 10 * MS, 30 * MS, 0, 20 * MS))
            usage += 20 * MS
    return rows, requests


@pytest.mark.parametrize("row_ms, background_ms", [(100, 5), (200, 10)])
def test_the_groups_own_steady_cpu_stays_beside_the_requests_however_long_they_lasted(
        row_ms: int, background_ms: int) -> None:
    # the same requests over a window twice as long (as a throttled record stretches them):
    # the rows with no request show the group's own rate, and the rows with requests run it
    # too, so a request's CPU is its own, not its own plus the window's length times that rate
    rows, requests = steady(row_ms, background_ms)
    demand = demand_of(rows, PERIOD)
    assert demand.coarse and demand.recorded.nr_throttled == 0
    for load in (load_of(demand, requests),
                 load_of(demand, [dataclasses.replace(r, cpu_ns=None) for r in requests])):
        assert [j.cpu_ns for j in load.jobs] == pytest.approx([20 * MS] * len(requests))
        assert load.background_ns == pytest.approx([background_ms * MS] * 30)
