"""The recorded load spread over N replicas (``client.analysis.spread``) and each count's
smallest limit (``client.advise.replicas``): round-robin exactly, random by its seed and its
balance, a closed loop's lanes whole, the background on every replica, one replica the plain
replay; on a hand-made capture whose requests carry all the CPU, N replicas each need about
1/N of one's limit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from client.advise.passive import Window, advise_timeline
from client.advise.replay import load_replay
from client.advise.replicas import Spread, replicas_timeline, spread_replays
from client.analysis.goal import LatencyGoal
from client.analysis.passive import judge
from client.analysis.replay import Job, LimitRow, Load, load_of, replay_load
from client.analysis.spread import (RANDOM, ROUND_ROBIN, Sizing, assign, least, pooled_rows,
                                    split_demand, spread_load)
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from tests.test_commands_import import GROUP, MS, ZERO, vegeta_csv

EVERY_MS, CPU_MS = 25, 10   # a request every 25 ms, each 10 ms of CPU: 0.4 CPU in all


def busy_capture(tmp_path: Path, seconds: int = 3) -> tuple[Path, Path]:
    """A timeline of ``seconds`` at 1 CPU, sampled every 5 ms, never throttled, whose CPU is
    all the requests': one every 25 ms from 50 ms, each running 10 ms on one CPU (its
    latency). The requests' file is vegeta's (an open loop)."""
    starts = list(range(50, seconds * 1000 - 50, EVERY_MS))
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    for t_ms in range(0, seconds * 1000 + 1, 5):
        used = sum(min(CPU_MS, max(0, t_ms - s)) for s in starts)
        rows.append(f"{t_ms * MS},{used * MS},{t_ms // 100},0,0")
    timeline = tmp_path / "t.cgroup.csv"
    timeline.write_text("\n".join(rows) + "\n")
    write_timeline_metadata(tmp_path / "t.json", TimelineMetadata(
        "t", TimelineClock(ZERO, 100), cgroup={**GROUP, "quota_us": 100000, "cpus": 1.0},
        host="here"))
    return timeline, vegeta_csv(tmp_path, starts, latency_ms=CPU_MS)


# ---- the spread --------------------------------------------------------------------------------

def test_round_robin_goes_in_turn() -> None:
    assert assign(7, 3, ROUND_ROBIN) == [0, 1, 2, 0, 1, 2, 0]
    assert assign(4, 1, ROUND_ROBIN) == [0, 0, 0, 0]


def test_random_is_its_seeds_and_balanced() -> None:
    picks = assign(4000, 4, RANDOM, seed=7)
    assert picks == assign(4000, 4, RANDOM, seed=7)          # the same seed, the same picks
    assert picks != assign(4000, 4, RANDOM, seed=8)
    assert set(picks) == {0, 1, 2, 3}
    # binomial(4000, 1/4): sd 27; every replica within 4 sd of 1000
    assert all(abs(n - 1000) < 110 for n in Counter(picks).values())
    assert picks[:8] != [i % 4 for i in range(8)] or picks[8:16] != [i % 4 for i in range(8)]


def test_bad_spreads_are_refused() -> None:
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        assign(3, 0)
    with pytest.raises(ValueError, match="spread must be one of"):
        assign(3, 2, "least-connections")


def lanes_load() -> Load:
    """A closed loop of 3 lanes, 3 jobs each (job i follows job i - 3)."""
    jobs = tuple(Job(i * 10, 5, 5.0, None if i < 3 else i - 3, 1) for i in range(9))
    return Load(jobs, 3, (1.0, 2.0))


def test_a_closed_loops_lanes_go_whole_and_each_replica_has_the_background() -> None:
    parts = spread_load(lanes_load(), 2, ROUND_ROBIN)
    # lanes 0 and 2 on replica 0, lane 1 on replica 1
    assert [[j.arrival_ns for j in p.jobs] for p in parts] == [[0, 20, 30, 50, 60, 80],
                                                               [10, 40, 70]]
    assert [p.lanes for p in parts] == [2, 1]
    assert [[j.follows for j in p.jobs] for p in parts] == [[None, None, 0, 1, 2, 3],
                                                            [None, 0, 1]]
    assert all(p.background_ns == (1.0, 2.0) for p in parts)
    assert spread_load(lanes_load(), 1) == [lanes_load()]


def test_an_open_loops_requests_go_one_by_one() -> None:
    load = Load(tuple(Job(i, 1, 1.0) for i in range(6)), 0, ())
    parts = spread_load(load, 3, ROUND_ROBIN)
    assert [[j.arrival_ns for j in p.jobs] for p in parts] == [[0, 3], [1, 4], [2, 5]]
    assert all(p.lanes == 0 for p in parts)
    randomly = spread_load(load, 3, RANDOM, seed=3)
    assert sorted(j.arrival_ns for p in randomly for j in p.jobs) == list(range(6))
    assert [len(p.jobs) for p in randomly] == [list(assign(6, 3, RANDOM, 3)).count(r)
                                               for r in range(3)]


def test_the_least_total_and_a_tie_to_the_fewer_replicas(tmp_path: Path) -> None:
    timeline, requests = busy_capture(tmp_path)
    replayed = load_replay(timeline, requests, None)
    goal = LatencyGoal(30.0, None, None)
    row = spread_replays(replayed, 1, Spread((1,)), 0)(replayed.demand, None)(500)
    judged = judge(500, row, goal)
    from client.analysis.passive import PassiveAdvice

    def sized(n: int, millicores: int | None) -> Sizing:
        at = None if millicores is None else judge(millicores, row, goal)
        return Sizing(n, PassiveAdvice(goal, judged, (), at, None, 10, 2000))

    rows = [sized(1, 600), sized(2, 300), sized(3, 250), sized(4, None)]
    best = least(rows)
    assert best is not None and best.replicas == 1   # 600 = 2 x 300: the fewer replicas
    assert least([sized(1, None)]) is None


def test_split_demand_and_pooled_rows(tmp_path: Path) -> None:
    timeline, requests = busy_capture(tmp_path)
    replayed = load_replay(timeline, requests, None)
    half = split_demand(replayed.demand, 0.5)
    assert sum(half.wanted_ns) == pytest.approx(sum(replayed.demand.wanted_ns) / 2)
    assert half.usage_ns == round(replayed.demand.usage_ns / 2)
    load = load_of(replayed.demand, replayed.requests or [], None)
    rows = [LimitRow(*replay_load(replayed.demand, part, 0.3))
            for part in spread_load(load, 2, ROUND_ROBIN)]
    pooled = pooled_rows(rows)
    assert sorted(pooled.latencies_ns or ()) == sorted(v for r in rows
                                                        for v in r.latencies_ns or ())
    assert pooled.replayed.stats.nr_periods == sum(r.replayed.stats.nr_periods for r in rows)


# ---- each replica count's answer ---------------------------------------------------------------

def test_one_replica_is_the_plain_replay(tmp_path: Path) -> None:
    timeline, requests = busy_capture(tmp_path)
    replayed = load_replay(timeline, requests, None)
    load = load_of(replayed.demand, replayed.requests or [], replayed.closed)
    for how in (RANDOM, ROUND_ROBIN):
        at = spread_replays(replayed, 1, Spread((1,), how), 0)(replayed.demand, replayed.closed)
        assert at(450).latencies_ns == replay_load(replayed.demand, load, 0.45)[1]
    goal = LatencyGoal(15.0, None, None)
    sized = replicas_timeline(timeline, goal, Window(requests), Spread((1,)))
    plain = advise_timeline(timeline, goal, Window(requests, data_dir=tmp_path / "runs"))
    assert plain.advice.at is not None
    assert sized.sizings[0].millicores == plain.advice.at.millicores


def test_n_replicas_each_need_about_one_nth(tmp_path: Path) -> None:
    """The requests carry all the CPU (0.4 CPU), open loop: a replica with 1/N of them
    needs about 1/N of one replica's limit, and the p99 meets the goal at each answer."""
    timeline, requests = busy_capture(tmp_path)
    goal = LatencyGoal(15.0, None, None)   # 10 ms of CPU each: 1.5 x its unthrottled time
    sized = replicas_timeline(timeline, goal, Window(requests), Spread((1, 2, 4), ROUND_ROBIN))
    one, two, four = sized.sizings
    assert [s.requests for s in sized.sizings] == [(116,), (58, 58), (29, 29, 29, 29)]
    assert one.millicores is not None and two.millicores is not None
    assert four.millicores is not None
    assert two.millicores < one.millicores and four.millicores < two.millicores
    for s in sized.sizings:   # each replica's share of 0.4 CPU, at least
        assert s.millicores is not None and s.millicores >= 400 / s.replicas
        at = s.advice.at
        assert at is not None and at.row.latency_ms(99) <= 15.0
        assert s.advice.range is not None and s.advice.range.low <= s.millicores
    # the totals stay within 2x of one replica's: the load is the same
    assert all((s.total or 0) <= 2 * (one.total or 0) for s in sized.sizings)
    said = sized.to_dict()
    assert [r["replicas"] for r in said["replicas"]] == [1, 2, 4]
    assert sum(r["least"] for r in said["replicas"]) == 1
    best = min((r for r in said["replicas"] if r["met"]),
               key=lambda r: (r["total_cpus"], r["replicas"]))
    assert best["least"] and said["least"]["total_cpus"] == best["total_cpus"]
    assert said["spread"]["how"] == ROUND_ROBIN and said["spread"]["seed"] is None
