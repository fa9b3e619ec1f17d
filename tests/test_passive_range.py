"""How sure a passive answer is (``client.analysis.passive_range``, ``advise --passive``'s
``recommended.range``): the limits that meet the goal under what the record could not show,
on timelines the tests make up with known answers; a record that cannot show the demand the
quota hid (throttled throughout, and no requests to share the CPU the kernel counted) gets no
answer, one line, exit 3."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import client.advise.replay as replay_inputs
from client.advise.passive import Window, advise_timeline, bounds
from client.analysis.goal import LatencyGoal
from client.analysis.passive_range import Bound, range_of, tail_ms, tail_rank
from client.analysis.replay import Request, in_flight
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from tests.support import http_timing
from tests.test_commands_import import GROUP, ZERO, vegeta_csv

MS = 1_000_000
ROW_MS = 10
PERIOD_MS = 100


def timeline(tmp_path: Path, seconds: float, cpus: float,
             used_ms: Callable[[int], float], throttled: Callable[[int], bool],
             held_ms: float | None = None) -> Path:
    """``t.cgroup.csv`` and its JSON: rows every 10 ms; ``used_ms(ms)``: the group's usage
    (CPU ms) by that time; each 100 ms period for which ``throttled(period)`` holds is counted
    throttled at its end, for ``held_ms`` (None: its unused quota's share of the period)."""
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    nr = held = 0
    for i in range(round(seconds * 1000 / ROW_MS) + 1):
        t = i * ROW_MS
        periods = t // PERIOD_MS
        if t % PERIOD_MS == 0 and t and throttled(periods - 1):
            nr += 1
            held += round(((1 - cpus) * PERIOD_MS if held_ms is None else held_ms) * MS)
        rows.append(f"{t * MS},{round(used_ms(t) * MS)},{periods},{nr},{held}")
    path = tmp_path / "t.cgroup.csv"
    path.write_text("\n".join(rows) + "\n")
    group = {**GROUP, "quota_us": round(cpus * PERIOD_MS * 1000), "cpus": cpus}
    write_timeline_metadata(tmp_path / "t.json", TimelineMetadata(
        "t", TimelineClock(ZERO, PERIOD_MS), cgroup=group, host="here"))
    return path


def busy(spans: list[tuple[int, int]]) -> Callable[[int], float]:
    """Usage by ``t`` ms of a group that ran one CPU during each (start, end) ms span."""
    return lambda t: float(sum(max(0, min(t, e) - s) for s, e in spans))


def test_the_range_is_the_smallest_and_largest_answer_and_names_what_moved_it() -> None:
    bounds = [Bound("the hidden demand", "on 1 CPU", 900), Bound("the hidden demand",
                                                                   "on 4 CPUs", 500),
              Bound("the tail", "a higher one", 560)]
    span = range_of(500, bounds, 2000)
    assert (span.low, span.high) == (500, 900) and not span.sure
    assert span.widened_by[0].startswith("the hidden demand (on 1 CPU: 0.9 CPU)")
    assert span.widened_by[1].startswith("the tail")
    assert "not sure (wider than ±25 % of the answer)" in span.words()
    close = range_of(500, [Bound("the tail", "a lower one", 450)], 2000)
    assert close.sure and (close.low, close.high) == (450, 500)
    assert close.widened_by == ("the tail (a lower one: 0.45 CPU)",)
    unmet = range_of(500, [Bound("the load's shape (inferred)", "closed loop", None)], 2000)
    assert unmet.high is None and not unmet.sure and "over 2 CPU" in unmet.words()


def test_the_tails_order_statistics_span_the_ranks_few_requests_leave_open() -> None:
    # 1000 requests: the p99 is the 990th smallest, within 1.96 sqrt(1000 .99 .01) = 6.2 ranks
    assert [tail_rank(1000, 99, side) for side in (-1, 0, 1)] == [982, 989, 996]
    # 7 requests: the p99 is their largest; the one below it bounds it from below
    assert [tail_rank(7, 99, side) for side in (-1, 0, 1)] == [5, 6, 6]
    values = [float(v) for v in range(1, 101)]
    assert tail_ms(values, 99, -1) < tail_ms(values, 99, 0) <= tail_ms(values, 99, 1)


def test_an_unthrottled_record_with_many_requests_is_sure(tmp_path: Path) -> None:
    # 200 requests, 5 ms of CPU each, one every 15 ms, at 1 CPU: never throttled
    starts = [i * 15 for i in range(200)]
    timeline(tmp_path, 3.1, 1.0, busy([(s, s + 5) for s in starts]), lambda p: False)
    vegeta_csv(tmp_path, starts, latency_ms=5)
    answer = advise_timeline(tmp_path / "t.cgroup.csv", LatencyGoal(20.0),
                             Window(tmp_path / "r.csv", name="p", data_dir=tmp_path / "raw"))
    span = answer.advice.range
    assert answer.met and span is not None and span.sure
    recommended = answer.to_dict()["recommended"]
    assert recommended["sure"] is True
    low, high = recommended["range"]["low"], recommended["range"]["high"]
    assert low["cpus"] <= recommended["cpus"] <= high["cpus"] <= 1.25 * recommended["cpus"]
    assert set(low) == set(recommended) - {"range", "sure", "widened_by", "range_says"}


def test_a_tail_decided_by_few_requests_widens_the_range(tmp_path: Path) -> None:
    # 20 requests of 5 ms CPU, one of 40 ms: the p99 of 20 is that one alone
    starts = [i * 100 for i in range(20)]
    cpu = [40 if i == 19 else 5 for i in range(20)]
    timeline(tmp_path, 2.1, 1.0, busy([(s, s + c) for s, c in zip(starts, cpu)]),
             lambda p: False)
    path = tmp_path / "r.csv"
    path.write_text("".join(f"{ZERO + s * MS},200,{c * MS},0,78,,,,{i},GET,http://x/y,\n"
                            for i, (s, c) in enumerate(zip(starts, cpu))))
    answer = advise_timeline(tmp_path / "t.cgroup.csv", LatencyGoal(60.0),
                             Window(path, name="p", data_dir=tmp_path / "raw"))
    span = answer.advice.range
    assert answer.met and span is not None and answer.advice.at is not None
    assert span.low < answer.advice.at.millicores   # the next request down meets at less
    assert span.widened_by and span.widened_by[0].startswith("the tail (20 requests")


def test_a_record_throttled_throughout_without_its_requests_gets_no_answer(
        tmp_path: Path) -> None:
    # 0.3 CPU, every period throttled: the first 30 ms of each ran, the rest sat throttled
    timeline(tmp_path, 2.0, 0.3, lambda t: 30.0 * (t // PERIOD_MS) + min(30, t % PERIOD_MS),
             lambda p: True)
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv", "--p99", "60",
                         "--json", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    data = json.loads(result.stdout)
    assert data["recommended"] is None
    reason = data["reason"]
    assert "\n" not in reason and reason.startswith("t.cgroup.csv: throttled in 20 of its 20")
    assert "no unthrottled stretch" in reason and "no requests were given" in reason
    assert "--requests-from" in reason   # what to give
    text = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv", "--p99", "60",
                       cwd=tmp_path)
    assert text.returncode == 3
    assert [line for line in text.stdout.splitlines()
            if line.startswith("no recommendation: ")] == [f"no recommendation: {reason}"]


def test_a_record_throttled_throughout_with_its_requests_uses_the_cpu_the_kernel_counted(
        tmp_path: Path) -> None:
    # the same record, and its requests: one every 100 ms, each answered after 90 ms (30 ms
    # of CPU at the start of its period, then held until the refill); one at a time, so each
    # one's CPU is its rows' as the kernel counted it, 30 ms: 0.3 CPU runs each unthrottled
    timeline(tmp_path, 2.0, 0.3, lambda t: 30.0 * (t // PERIOD_MS) + min(30, t % PERIOD_MS),
             lambda p: True)
    vegeta_csv(tmp_path, [i * 100 for i in range(19)], latency_ms=90)
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv",
                         "--requests-from", "r.csv", "--p99", "60", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["recommended"]["cpus"] == pytest.approx(0.3, abs=0.005)
    assert data["requests"]["cpu"]["not_known"] == 0   # one at a time: each its rows' CPU


def test_a_throttled_record_with_unthrottled_stretches_gets_an_answer_and_a_range(
        tmp_path: Path) -> None:
    # 0.3 CPU; every other period the load wanted more than its quota and was throttled
    def period_throttled(p: int) -> bool:
        return p % 2 == 0

    def used(t: int) -> float:
        period, into = divmod(t, PERIOD_MS)
        done = sum(30 if period_throttled(p) else 10 for p in range(period))
        return done + min(30 if period_throttled(period) else 10, into)
    timeline(tmp_path, 2.0, 0.3, used, period_throttled)
    vegeta_csv(tmp_path, [i * 100 for i in range(19)], latency_ms=40)
    answer = advise_timeline(tmp_path / "t.cgroup.csv", LatencyGoal(100.0),
                             Window(tmp_path / "r.csv", name="p", data_dir=tmp_path / "raw"))
    assert answer.met and answer.advice.range is not None
    said = answer.to_dict()["recommended"]
    assert isinstance(said["sure"], bool) and said["range"]["low"]["cpus"] <= said["cpus"]


def test_in_flight_counts_the_requests_that_ran_at_once() -> None:
    reqs = [Request(0, 10 * MS, 0), Request(5 * MS, 10 * MS, 0), Request(10 * MS, 10 * MS, 0),
            Request(30 * MS, 1 * MS, 0)]
    assert in_flight(reqs) == 2   # one ends as the third starts: not three at once
    assert in_flight([]) == 0


def test_a_throttled_record_replays_on_the_cpus_its_requests_had_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # recorded at 1 CPU, every other period throttled (4 CPUs ran 25 ms, then sat 75 ms):
    # the group was never seen above 1 CPU, but 4 requests were in flight at once; on a
    # machine of 4 CPUs it could have used 4
    monkeypatch.setattr(replay_inputs.os, "cpu_count", lambda: 4)
    timeline(tmp_path, 2.0, 1.0, lambda t: float(t), lambda p: p % 2 == 0, held_ms=75)
    starts = [s for s in range(0, 1900, 100) for _ in range(4)]
    vegeta_csv(tmp_path, starts, latency_ms=80)
    replayed = replay_inputs.load_replay(tmp_path / "t.cgroup.csv", tmp_path / "r.csv", None)
    assert replayed.demand.cores == 4
    # the range replays the hidden demand on the 1 CPU the record was seen to use as well
    found = bounds(replayed, LatencyGoal(100.0), 0, start=1000, floor=10, ceiling=4000)
    assert [b.assumption for b in found if b.unknown == "the hidden demand"] == ["on 1 CPU"]
    unthrottled = tmp_path / "free"
    unthrottled.mkdir()
    timeline(unthrottled, 2.0, 1.0, lambda t: float(t), lambda p: False)
    vegeta_csv(unthrottled, starts, latency_ms=80)
    seen = replay_inputs.load_replay(unthrottled / "t.cgroup.csv", unthrottled / "r.csv", None)
    assert seen.demand.cores == 1   # not throttled: the rate it ran at is what it used


def test_clusters_recommended_limit_has_its_range_where_the_windows_were_throttled() -> None:
    from tests.test_cluster import TARGET, window

    from client.advise.cluster import row_of
    from client.analysis.cluster import WorkloadLimits

    row = row_of(WorkloadLimits("shop/deployment/web", 0.5, 0.5),
                 [window("shop_web-a"), window("shop_web-c")], TARGET)
    said = row.to_dict()
    span = said["recommended_range_cpus"]
    assert row.recommended_cpus is not None and span is not None
    assert span["low"] <= row.recommended_cpus
    assert span["high"] is None or span["high"] >= row.recommended_cpus
    assert isinstance(said["recommended_sure"], bool)
    # the windows were throttled: the CPUs their demand could run on bound the range
    assert all(w.startswith("the hidden demand") for w in said["recommended_widened_by"])
    if not said["recommended_sure"]:
        assert any("not sure (wider than ±25 %" in note for note in row.notes)
