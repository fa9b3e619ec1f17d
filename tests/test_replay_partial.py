"""A request the window holds only part of (``Demand.partial``: the record ended, or began,
while it ran) is left out of the replay, and the CPU the rows show during it is its own:
neither the replayed requests' beside it nor the group's own work
(``client.analysis.replay.load_of``). An open loop recorded at its limit ends with a queue
of such requests, and shared among those beside them their CPU made each replayed request
heavier (issue 57's matrix: go's open loop at 0.3 CPU advised 0.753 CPU where live met the
goal at 0.384).

The record is a fake clock's: rows 10 ms apart for 2 s, unthrottled, the group idle but for
two requests, each using half a CPU while it runs: A over [1.90 s, 1.98 s), wholly inside;
B from 1.94 s for 160 ms, past the window's end. Known answer: A used 40 ms (half of its
80 ms); given B's 20 ms beside it too, it was 60 ms."""

from __future__ import annotations

from dataclasses import replace

import pytest

from client.analysis.replay import Request, demand_of, load_of
from client.data.timeline import CgroupSample

MS = 1_000_000
PERIOD = 100 * MS
ROW = 10 * MS
A = (1900 * MS, 80 * MS)
B = (1940 * MS, 160 * MS)


def record() -> list[CgroupSample]:
    samples, usage = [], 0
    for k in range(201):
        samples.append(CgroupSample(k * ROW, usage, k * ROW // PERIOD, 0, 0))
        lo, hi = k * ROW, (k + 1) * ROW
        for start, latency in (A, B):
            usage += max(0, min(hi, start + latency) - max(lo, start)) // 2
    return samples


def test_a_request_the_window_holds_part_of_keeps_its_cpu() -> None:
    demand = demand_of(record(), PERIOD)
    requests = [Request(A[0], A[1], 0)]
    without = load_of(demand, requests, closed=False)
    assert without.jobs[0].cpu_ns == pytest.approx(60 * MS)   # B's share given to A
    load = load_of(replace(demand, partial=((B[0], B[1], 0),)), requests, closed=False)
    assert load.jobs[0].cpu_ns == pytest.approx(40 * MS)
    # B's CPU is not the group's own work either
    assert sum(load.background_ns) == pytest.approx(0.0)


def test_with_the_servers_cpu_the_share_is_by_it() -> None:
    demand = demand_of(record(), PERIOD)
    requests = [Request(A[0], A[1], 0, 40 * MS)]
    load = load_of(replace(demand, partial=((B[0], B[1], 80 * MS),)), requests, closed=False)
    assert load.jobs[0].cpu_ns == pytest.approx(40 * MS)
