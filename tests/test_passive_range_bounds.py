"""What widens a passive answer's range, with known answers (``advise --passive``'s
``widened_by`` and ``range_says``): coarse rows (where in a row its CPU was wanted), a tail
decided by fewer requests than bound it (the order statistics' exact binomial ranks), and the
share of requests whose CPU the record hid."""

from __future__ import annotations

import math
from pathlib import Path

from client.advise.passive import Window, advise_timeline
from client.analysis.goal import LatencyGoal
from client.analysis.passive_range import tail_covered, tail_needs, tail_rank
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from tests.test_commands_import import GROUP, ZERO
from tests.test_replay_cpu_drawn import write_record

MS = 1_000_000
PERIOD_MS = 100


def unthrottled(tmp_path: Path, row_ms: int, seconds: float = 2.0) -> Path:
    """``t.cgroup.csv`` of a group at 1 CPU, never throttled, that used 60 ms of CPU in each
    200 ms (0.3 CPU), rows every ``row_ms``; usage grows evenly within each row."""
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    for t in range(0, round(seconds * 1000) + 1, row_ms):
        rows.append(f"{t * MS},{round(0.3 * t * MS)},{t // PERIOD_MS},0,0")
    path = tmp_path / "t.cgroup.csv"
    path.write_text("\n".join(rows) + "\n")
    write_timeline_metadata(tmp_path / "t.json", TimelineMetadata(
        "t", TimelineClock(ZERO, PERIOD_MS), cgroup={**GROUP, "quota_us": 100000, "cpus": 1.0},
        host="here"))
    return path


def test_coarse_rows_widen_the_range_to_each_rows_cpu_at_its_start(tmp_path: Path) -> None:
    # rows 200 ms apart, each with 60 ms of CPU. Spread evenly (0.3 CPU all along), 0.3 CPU
    # meets an added delay of 10 ms; wanted at the row's start on 1 CPU, any limit under 0.6
    # holds it 100 (1 - L) ms each row (a p99 wait of that less 2 ms), so 0.6 is the least
    answer = advise_timeline(unthrottled(tmp_path, 200), LatencyGoal(10.0), Window())
    span, at = answer.advice.range, answer.advice.at
    assert span is not None and at is not None and at.millicores is not None
    assert 300 <= at.millicores <= 330
    assert span.high is not None and 600 <= span.high <= 660 and not span.sure
    rows = [w for w in span.widened_by if w.startswith("the rows (200 ms apart, periods of "
                                                       "100 ms)")]
    assert rows == [f"the rows (200 ms apart, periods of 100 ms) (each row's CPU wanted at its "
                    f"start: {span.high / 1000:g} CPU)"]
    assert rows[0] in span.words()   # range_says, one line
    # rows 10 ms apart show where the CPU was wanted: nothing about rows
    fine = tmp_path / "fine"
    fine.mkdir()
    close = advise_timeline(unthrottled(fine, 10), LatencyGoal(10.0), Window())
    assert close.advice.range is not None
    assert not any(w.startswith("the rows") for w in close.advice.range.widened_by)


def test_the_tails_ranks_are_the_binomials_exact_quantiles_under_1000_requests() -> None:
    # 200 requests: the number below the p99 is binomial(200, 0.99); P(B >= 195) = 0.983 and
    # P(B >= 196) = 0.947, so the 195th smallest bounds it from below 97.5 % of the time;
    # P(B <= 199) = 1 - 0.99^200 = 0.866: no rank bounds it from above, the largest is taken
    assert [tail_rank(200, 99, side) for side in (-1, 0, 1)] == [194, 197, 199]
    assert math.isclose(tail_covered(200, 99), 1 - 0.99 ** 200)
    # 368 requests are the fewest whose largest lies above the p99 97.5 % of the time
    assert tail_needs(99) == 368 and tail_covered(367, 99) < 0.975 <= tail_covered(368, 99)
    # 500: P(B <= 498) (two or more above the p99) is 0.96: only their largest bounds it,
    # 99.3 % of the time
    assert tail_rank(500, 99, 1) == 499 and tail_covered(500, 99) > 0.99


def test_a_p99_of_few_requests_says_their_largest_may_lie_below_it(tmp_path: Path) -> None:
    starts = [i * 100 for i in range(20)]
    unthrottled(tmp_path, 10)
    (tmp_path / "r.csv").write_text("".join(
        f"{ZERO + s * MS},200,{5 * MS},0,78,,,,{i},GET,http://x/y,\n"
        for i, s in enumerate(starts)))
    answer = advise_timeline(tmp_path / "t.cgroup.csv", LatencyGoal(60.0),
                             Window(tmp_path / "r.csv", name="p", data_dir=tmp_path / "raw"))
    span = answer.advice.range
    assert span is not None
    note = ("the tail (20 requests decide the p99) (their largest lies above the p99 only "
            "18 % of the time: 368 requests bound it)")
    assert note in span.widened_by and note in answer.to_dict()["recommended"]["range_says"]


def test_the_share_of_requests_whose_cpu_is_not_known_widens_the_range(tmp_path: Path) -> None:
    write_record(tmp_path)
    answer = advise_timeline(tmp_path / "t.cgroup.csv", LatencyGoal(150.0),
                             Window(tmp_path / "r.csv", name="p", data_dir=tmp_path / "raw"))
    span, at = answer.advice.range, answer.advice.at
    assert span is not None and at is not None and at.millicores is not None
    named = [w for w in span.widened_by
             if w.startswith("the CPU of 30 of 60 requests (50 %) not known (")]
    assert len(named) == 1, span.widened_by
    # the ranks are placed where the rows' total puts them (mostly heavy); a quarter heavier,
    # all 30 are drawn from the heavy fifth and scaled to the rows: each gets the same share
    # of its period's 30 ms, and 0.3 CPU (the rows' rate) meets the goal; a little less may
    # too (the backlog it leaves over the window within the goal): a tolerance of it
    assert span.low < at.millicores
    assert 300 / 1.1 <= span.low <= 330
    assert f"drawn a quarter heavier: {span.low / 1000:g} CPU" in named[0]


def test_coarse_rows_with_requests_say_what_was_taken_of_each_hold(tmp_path: Path) -> None:
    # the node agent's rows, 70 ms apart, of a closed loop of 4 at 0.1 CPU
    # (tests/data/node_replay/c4): where in its row a throttle lay is not known
    data = Path(__file__).parent / "data" / "node_replay" / "c4"
    answer = advise_timeline(data / "agent.cgroup.csv", LatencyGoal(60.0),
                             Window(data / "run.csv", name="p", data_dir=tmp_path))
    span = answer.advice.range
    assert span is not None
    assert ("the rows (70 ms apart, periods of 100 ms) (where in its row each throttle lay is "
            "not known: a request a throttle may have held is taken to run only its own CPU, "
            "the least it can)") in span.widened_by
