"""The replay on the node agent's rows (a row about a period: where each throttle lay in its
row is not known) and the runs they recorded (tests/data/node_replay/README.md): what is
exact there. Every ns of the rows' CPU goes to one request or the background, by the
requests' own CPU (the server's, in the run) when the run has it, else by overlap; a request
runs its CPU, never longer than its latency, and all of its unheld latency when no throttle
could have held it; a higher limit never predicts slower percentiles; at the recorded limit
the percentiles come back within a period."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from client.analysis.replay import (Demand, Request, demand_of, held_at_most, load_of,
                                    replay_limits)
from client.advise.replay import ReplayInputs, load_replay
from client.data.timeline import CgroupSample

DATA = Path(__file__).parent / "data" / "node_replay"
SHAPES = ["sequential", "c4", "bursts"]
PERIOD_NS = 100_000_000


def replayed(shape: str) -> ReplayInputs:
    return load_replay(DATA / shape / "agent.cgroup.csv", DATA / shape / "run.csv", None)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_agents_rows_are_coarse_and_the_answer_says_so(shape: str) -> None:
    demand = replayed(shape).demand
    assert demand.coarse and demand.resolution_ns * 2 >= demand.period_ns == PERIOD_NS
    assert demand.throttles   # each growth of the throttled time, as its row bounds it
    assert sum(longest for _lo, _hi, longest in demand.throttles) <= demand.recorded.throttled_ns


def without_server_cpu(requests: list[Request]) -> list[Request]:
    """The requests as an access log gives them: no CPU of their own."""
    return [dataclasses.replace(q, cpu_ns=None) for q in requests]


@pytest.mark.parametrize("own", [True, False], ids=["own CPU", "overlap"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_ns_of_the_rows_cpu_goes_to_a_request_or_the_background(shape: str,
                                                                      own: bool) -> None:
    r = replayed(shape)
    assert r.requests is not None
    load = load_of(r.demand, r.requests if own else without_server_cpu(r.requests))
    cpu = sum(j.cpu_ns for j in load.jobs) + sum(load.background_ns)
    assert cpu == pytest.approx(r.demand.usage_ns)
    cores = r.demand.cores
    for q, job in zip(sorted(r.requests, key=lambda q: q.start_ns), load.jobs):
        assert job.cpu_ns <= q.latency_ns * cores   # never more than it could have run


@pytest.mark.parametrize("shape", SHAPES)
def test_with_the_servers_cpu_each_request_runs_its_own_times_one_ratio(shape: str) -> None:
    r = replayed(shape)
    assert r.requests is not None and all(q.cpu_ns for q in r.requests)  # the run's column
    load = load_of(r.demand, r.requests)
    requests = sorted(r.requests, key=lambda q: q.start_ns)
    ratios = {round(job.cpu_ns / q.cpu_ns, 6) for q, job in zip(requests, load.jobs)
              if q.cpu_ns and job.cpu_ns < q.latency_ns * r.demand.cores}
    assert len(ratios) == 1   # what the group ran around the requests, over what they ran
    assert min(ratios) >= 1   # the server's CPU is part of the group's


def may_be_held(demand: Demand, start_ns: int, latency_ns: int) -> bool:
    return held_at_most(demand, start_ns, start_ns + latency_ns) > 0


@pytest.mark.parametrize("own", [True, False], ids=["own CPU", "overlap"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_request_runs_its_cpu_unless_no_throttle_could_have_held_it(shape: str,
                                                                      own: bool) -> None:
    r = replayed(shape)
    assert r.requests is not None
    load = load_of(r.demand, r.requests if own else without_server_cpu(r.requests))
    requests = sorted(r.requests, key=lambda q: q.start_ns)
    held = [q for q in requests if may_be_held(r.demand, q.start_ns, q.latency_ns)]
    assert held   # the load was throttled at 100m
    for q, job in zip(requests, load.jobs):
        unheld = q.latency_ns - q.held_ns
        assert 0 <= q.held_ns <= held_at_most(r.demand, q.start_ns, q.start_ns + q.latency_ns)
        if q in held:
            # its CPU, on one CPU: the hold's place in its row is not known
            assert job.wall_ns == min(q.latency_ns, -(-job.cpu_ns // 1))
        else:
            assert job.wall_ns == unheld   # all of it: no throttle reached it


@pytest.mark.parametrize("own", [True, False], ids=["own CPU", "overlap"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_higher_limit_never_predicts_slower_percentiles(shape: str, own: bool) -> None:
    r = replayed(shape)
    assert r.requests is not None
    rows = replay_limits(r.demand, [0.1, 0.2, 0.4, 0.8, 1.6, None],
                         r.requests if own else without_server_cpu(r.requests))
    for q in (50, 99):
        latencies = [row.latency_ms(q) for row in rows]
        assert latencies == sorted(latencies, reverse=True), (q, latencies)
    throttled = [row.replayed.throttled_ns for row in rows]
    assert throttled == sorted(throttled, reverse=True) and throttled[-1] == 0


@pytest.mark.parametrize("shape", SHAPES)
def test_at_the_recorded_limit_the_percentiles_come_back_within_a_period(shape: str) -> None:
    r = replayed(shape)
    assert r.placed is not None and r.recording.limits == (0.1,)
    (row,) = replay_limits(r.demand, [0.1], r.requests)
    recorded = sorted(q.latency_ns for q in r.placed.records)
    assert abs(row.latency_ms(50) * 1e6 - recorded[len(recorded) // 2]) < PERIOD_NS
    assert row.replayed.stats.nr_throttled > 0   # the quota model holds it again


def test_a_throttle_counted_before_its_time_may_have_held_the_requests_in_its_row() -> None:
    # rows 70 ms apart at 0.1 CPU: in 420-490 ms the kernel counts a period throttled, and
    # the throttled time it lasted comes only with the row after the next
    rows, usage, throttled, counted = [], 0, 0, 0
    for i in range(20):
        t = i * 70_000_000
        counted += i == 7
        throttled += 80_000_000 if i == 9 else 0
        rows.append(CgroupSample(t, usage, i, counted, throttled))
        usage += 7_000_000
    demand = demand_of(rows, PERIOD_NS)
    assert demand.coarse
    assert held_at_most(demand, 440_000_000, 480_000_000) == 40_000_000   # all of it
    uncounted = dataclasses.replace(demand, counted=())
    assert held_at_most(uncounted, 440_000_000, 480_000_000) == 0   # by the time alone
    assert held_at_most(demand, 1_200_000_000, 1_240_000_000) == 0        # nothing counted
