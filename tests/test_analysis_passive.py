"""``advise --passive``'s search (``client.analysis.passive``), on replays the tests make up:
the smallest limit whose replay meets the target, to advise's tolerance, shown beside the
limit 25 % lower; a target missed even without a limit gets no answer and says why."""

from __future__ import annotations

from collections.abc import Callable

from client.analysis.goal import LatencyGoal
from client.advise.passive import search
from client.analysis.replay import LimitRow, Replayed
from cpuquota.account import CpuStat

MS = 1_000_000


def row_with_p99(p99_ms: float) -> LimitRow:
    """A replay whose requests all took ``p99_ms``."""
    return LimitRow(Replayed(None, (), CpuStat(), (0, 10**9)), (round(p99_ms * MS),) * 10)


def replays(edge: int, free_ms: float = 20.0
            ) -> tuple[Callable[[int | None], LimitRow], list[int | None]]:
    """A service whose requests take ``free_ms`` from ``edge`` millicores up (and without a
    limit), 200 ms below; and the list of the limits replayed, in order."""
    tried: list[int | None] = []

    def replay_at(millicores: int | None) -> LimitRow:
        tried.append(millicores)
        return row_with_p99(free_ms if millicores is None or millicores >= edge else 200.0)
    return replay_at, tried


def test_the_answer_is_the_smallest_met_limit_within_the_tolerance() -> None:
    replay_at, tried = replays(edge=420)
    advice = search(replay_at, LatencyGoal(30.0), start=1000, floor=10, ceiling=2000)
    assert advice.at is not None and advice.at.millicores is not None
    assert 420 <= advice.at.millicores <= 420 * 1.1 and advice.at.met
    assert advice.less is not None and advice.less.millicores == round(advice.at.millicores * 0.75)
    assert not advice.less.met          # 25 % less misses: the answer is near the edge
    assert tried[0] is None             # first: the replay without a limit
    assert advice.reason is None


def test_a_target_missed_without_a_limit_gets_no_answer_and_says_why() -> None:
    replay_at, tried = replays(edge=420, free_ms=50.0)
    advice = search(replay_at, LatencyGoal(30.0), start=1000, floor=10, ceiling=2000)
    assert advice.at is None and tried == [None]   # no limit searched
    assert advice.reason is not None and "even without one" in advice.reason


def test_a_ceiling_that_misses_gets_no_answer() -> None:
    replay_at, _tried = replays(edge=5000)
    advice = search(replay_at, LatencyGoal(30.0), start=1000, floor=10, ceiling=2000)
    assert advice.at is None and advice.reason is not None
    assert "no limit up to 2 CPU met it" in advice.reason


def test_a_floor_that_meets_is_the_answer() -> None:
    replay_at, _tried = replays(edge=0)
    advice = search(replay_at, LatencyGoal(30.0), start=300, floor=10, ceiling=2000)
    assert advice.at is not None and advice.at.millicores == 10


def test_a_search_begun_near_its_answer_steps_a_tolerance_at_a_time() -> None:
    # a bound's search begins at the main answer: where its own answer is within one
    # tolerance of it, below or above, two limits bracket it; further up, a tolerance a step
    for edge, near, expect in ((420, 440, [None, 440, 400]), (460, 440, [None, 440, 484]),
                               (520, 440, [None, 440, 484, 532])):
        replay_at, tried = replays(edge=edge)
        advice = search(replay_at, LatencyGoal(30.0), start=1000, floor=10, ceiling=2000,
                        with_less=False, near=near)
        assert tried == expect, (edge, tried)
        assert advice.at is not None and advice.at.millicores == expect[-1 if edge > near else 1]
        assert advice.less is None


def test_a_search_begun_far_from_its_answer_finds_it_as_from_scratch() -> None:
    # the answer within the tolerance wherever the search begins, the floor and ceiling kept
    for edge in (15, 120, 420, 1500):
        for near in (10, 200, 440, 1999, 5000):
            replay_at, tried = replays(edge=edge)
            advice = search(replay_at, LatencyGoal(30.0), start=1000, floor=10, ceiling=2000,
                            with_less=False, near=near)
            assert advice.at is not None and advice.at.millicores is not None, (edge, near)
            assert edge <= advice.at.millicores <= max(10, edge * 1.1), (edge, near, tried)
            assert all(m is None or 10 <= m <= 2000 for m in tried), (edge, near, tried)
