"""An open loop (issue 57's matrix: the loop at 55/s, ~5 ms of CPU a request, recorded at
0.3 CPU; its bursts at 1 CPU) is replayed as the load was sent, not as the queue held it:

- each request from its intended send time (``scheduled_ns``, where an open loop's latency
  runs from): a client that fell behind the throttled server sent it late, and the replay
  would send it late again at every limit (``client.run.replay_input``);
- a request that ran beside others gets at most the wall a request alone takes for its CPU
  (one CPU's, with too few that ran alone to show it): its latency less its hold also held
  its wait behind the others queued, which the replay makes again where a limit builds a
  queue (``client.analysis.replay.load_of``). A closed loop keeps its walls.

The record is a fake clock's: rows 10 ms apart for 2 s, the group throttled in the first
periods, its own work 0.2 CPU throughout; four requests at once over [1.0 s, 1.1 s), each
5 ms of CPU (Server-Timing; the rows show 20 ms beside the own work) and 100 ms latency, none
held. Known answer: each runs its 5 ms alone, so its wall is 5 ms (within the rows' split); in a closed loop, 100 ms."""

from __future__ import annotations

import pytest

from client.analysis.replay import Request, demand_of, load_of
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample
from client.run.replay_input import _from_origin

MS = 1_000_000
PERIOD = 100 * MS
ROW = 10 * MS


def record() -> list[CgroupSample]:
    samples, usage, throttled, periods = [], 0, 0, 0
    for k in range(201):
        samples.append(CgroupSample(k * ROW, usage, k * ROW // PERIOD, periods, throttled))
        usage += 2 * MS + (2 * MS if 100 <= k < 110 else 0)   # the group's own, and theirs
        if k < 50 and k % 10 == 9:   # a throttle at the end of each of the first periods
            throttled += 5 * MS
            periods += 1
    return samples


def requests() -> list[Request]:
    return [Request(1000 * MS + i * MS, 100 * MS, 0, 5 * MS) for i in range(4)]


def test_an_open_loops_request_beside_others_runs_its_cpu_alone() -> None:
    demand = demand_of(record(), PERIOD)
    assert demand.throttled_wall_ns > 0
    walls = [j.wall_ns for j in load_of(demand, requests(), closed=False).jobs]
    assert walls == pytest.approx([5 * MS] * 4, rel=0.03), walls   # the rows' split


def test_unthrottled_too() -> None:
    samples = [CgroupSample(s.t_ns, s.usage_ns, s.nr_periods, 0, 0) for s in record()]
    demand = demand_of(samples, PERIOD)
    assert demand.throttled_wall_ns == 0
    walls = [j.wall_ns for j in load_of(demand, requests(), closed=False).jobs]
    assert walls == pytest.approx([5 * MS] * 4, rel=0.03), walls


def test_a_closed_loop_keeps_its_walls() -> None:
    demand = demand_of(record(), PERIOD)
    walls = [j.wall_ns for j in load_of(demand, requests(), closed=True).jobs]
    assert walls == [100 * MS] * 4, walls


def test_an_open_loops_request_is_placed_at_its_intended_send() -> None:
    late = RequestRecord(3, 250 * MS, 400 * MS, 200, scheduled_ns=54 * MS)
    assert _from_origin(late).start_ns == 54 * MS   # latency runs from the schedule
    closed = RequestRecord(3, 250 * MS, 400 * MS, 200)
    assert _from_origin(closed) == closed
