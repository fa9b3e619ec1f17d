"""The replay with each request's own CPU (the server's ``Server-Timing``, a run's
``server_cpu_ns``): a row the requests shared is shared by what each one burned, not by how
long each one lasted; on rows a period apart, each request runs its own CPU, scaled by what
the group ran over what the requests said, and no request is given the CPU of the one beside
it. Fake clocks and the quota model (tests/test_analysis_replay.py's timelines)."""

from __future__ import annotations

import dataclasses

import pytest

from client.analysis.replay import Request, demand_of, load_of, replay_limits
from tests.test_analysis_replay import MS, PERIOD, first_half, recorded, sequential


def test_a_row_two_requests_shared_is_shared_by_each_ones_own_cpu() -> None:
    demand = demand_of(recorded(1.0, first_half), PERIOD)   # 50 ms of CPU in every period
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
