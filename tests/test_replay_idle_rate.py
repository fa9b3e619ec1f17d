"""The group's own work (CPU no request overlaps) runs beside the requests at its rate, the
median request-free row's (``client.analysis.replay.load_of``): a few rows beside the
requests that hold their CPU (the counters read a row late) do not set it for every row.

The record is a fake clock's: rows 10 ms apart for 2 s, unthrottled; the group's own work
uses 1 ms of every row; a request every 100 ms for 9 ms, the first row it lies in showing
2 ms of its CPU and the next row (which no request overlaps) the other 3 ms. Known answer:
the own work's rate is 0.1 CPU, so each request row's background is 1 ms and each request
is given the rest of its row, 2 ms."""

from __future__ import annotations

import pytest

from client.analysis.replay import Request, demand_of, load_of
from client.data.timeline import CgroupSample

MS = 1_000_000
PERIOD = 100 * MS
ROW = 10 * MS


def record() -> tuple[list[CgroupSample], list[Request], set[int]]:
    """The record (see the module docstring): its rows, its requests, the rows they lie in."""
    per_row = []
    rows_with = set()
    for k in range(200):
        used = 1 * MS
        if k % 10 == 0:
            used += 2 * MS
            rows_with.add(k)
        elif k % 10 == 1:
            used += 3 * MS   # the request's CPU the counters showed a row late
        per_row.append(used)
    samples, usage = [], 0
    for k in range(201):
        samples.append(CgroupSample(k * ROW, usage, k * ROW // PERIOD, 0, 0))
        if k < 200:
            usage += per_row[k]
    requests = [Request(k * ROW + MS // 2, 9 * MS, 0) for k in sorted(rows_with)]
    return samples, requests, rows_with


def test_the_own_works_rate_is_the_median_request_free_rows() -> None:
    samples, requests, rows_with = record()
    demand = demand_of(samples, PERIOD)
    load = load_of(demand, requests, closed=False)
    for k in rows_with:
        assert load.background_ns[k] == pytest.approx(1 * MS)
    assert [j.cpu_ns for j in load.jobs] == pytest.approx([2 * MS] * len(requests))
    # every ns of the rows' CPU is a request's or the background's
    assert sum(j.cpu_ns for j in load.jobs) + sum(load.background_ns) == pytest.approx(
        demand.usage_ns)
