"""The replay on the node agent's rows (a row about a period: where each throttle lay in its
row is not known) and the runs they recorded (tests/data/node_replay/README.md): what is
exact there. Every ns of the rows' CPU goes to one request or the background; a request runs
its share of the CPU, never longer than its latency less its recorded hold, and all of that
when no throttle could have held it; a higher limit never predicts slower percentiles; at the
recorded limit the percentiles come back within a period."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.analysis.replay import Demand, held_at_most, load_of, replay_limits
from client.commands.predict_replay import Replayed, load_replay

DATA = Path(__file__).parent / "data" / "node_replay"
SHAPES = ["sequential", "c4", "bursts"]
PERIOD_NS = 100_000_000


def replayed(shape: str) -> Replayed:
    return load_replay(DATA / shape / "agent.cgroup.csv", DATA / shape / "run.csv", None)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_agents_rows_are_coarse_and_the_answer_says_so(shape: str) -> None:
    demand = replayed(shape).demand
    assert demand.coarse and demand.resolution_ns * 2 >= demand.period_ns == PERIOD_NS
    assert demand.throttles   # each growth of the throttled time, as its row bounds it
    assert sum(longest for _lo, _hi, longest in demand.throttles) <= demand.recorded.throttled_ns


@pytest.mark.parametrize("shape", SHAPES)
def test_every_ns_of_the_rows_cpu_goes_to_a_request_or_the_background(shape: str) -> None:
    r = replayed(shape)
    assert r.requests is not None
    load = load_of(r.demand, r.requests)
    cpu = sum(j.cpu_ns for j in load.jobs) + sum(load.background_ns)
    assert cpu == pytest.approx(r.demand.usage_ns)


def may_be_held(demand: Demand, start_ns: int, latency_ns: int) -> bool:
    return held_at_most(demand, start_ns, start_ns + latency_ns) > 0


@pytest.mark.parametrize("shape", SHAPES)
def test_a_request_runs_its_cpu_unless_no_throttle_could_have_held_it(shape: str) -> None:
    r = replayed(shape)
    assert r.requests is not None
    load = load_of(r.demand, r.requests)
    requests = sorted(r.requests, key=lambda q: q.start_ns)
    held = [q for q in requests if may_be_held(r.demand, q.start_ns, q.latency_ns)]
    assert held   # the load was throttled at 100m
    for q, job in zip(requests, load.jobs):
        unheld = q.latency_ns - q.held_ns
        assert 0 <= q.held_ns <= held_at_most(r.demand, q.start_ns, q.start_ns + q.latency_ns)
        if q in held:
            assert job.wall_ns == min(unheld, -(-job.cpu_ns // 1))   # its CPU, on one CPU
        else:
            assert job.wall_ns == unheld   # all of it: no throttle reached it


@pytest.mark.parametrize("shape", SHAPES)
def test_a_higher_limit_never_predicts_slower_percentiles(shape: str) -> None:
    r = replayed(shape)
    rows = replay_limits(r.demand, [0.1, 0.2, 0.4, 0.8, 1.6, None], r.requests)
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
