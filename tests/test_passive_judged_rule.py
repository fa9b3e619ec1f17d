"""``advise --passive`` judges a replay's predicted requests as live advise judges a run's
(``client.analysis.goal.judge_requests``): a request over the target that no throttle of the
replay delayed is slow without throttling (what the record showed of the machine's other
load) and is taken as the median undelayed request; one a replay's throttle delayed counts."""

from __future__ import annotations

from client.analysis.goal import LatencyGoal, judge_requests
from client.analysis.passive import delayed_in_replay, judge, judge_tail, judged_latencies_ms
from client.analysis.replay import LimitRow, Replayed
from client.analysis.spread import pooled_rows
from cpuquota.account import CpuStat

MS = 1_000_000
TARGET = LatencyGoal(40.0)


def row(stretches: tuple[tuple[int, int], ...]) -> LimitRow:
    """100 requests sent 10 ms apart: 97 take 5 ms, three (the 20th, 50th, 80th) take 80 ms."""
    sent = tuple(i * 10 * MS for i in range(100))
    slow = {20, 50, 80}
    latencies = tuple((80 if i in slow else 5) * MS for i in range(100))
    return LimitRow(Replayed(0.5, stretches, CpuStat(), (0, 1000 * MS)), latencies, sent)


def test_slow_requests_no_throttle_delayed_are_counted_apart() -> None:
    free = row(())                        # the replay sat throttled nowhere
    assert free.latency_ms(99) > 40       # the p99 as predicted misses 40 ms
    judged = judge(None, free, TARGET)
    assert judged.met                     # as live judges it: the three are set aside
    assert judged_latencies_ms(free, TARGET) == [5.0] * 100


def test_slow_requests_a_replay_throttle_delayed_count() -> None:
    # stretches inside the 50th's and 80th's spans (500 to 580 ms, 800 to 880 ms), one
    # before the 20th's start
    held = row(((520 * MS, 560 * MS), (150 * MS, 190 * MS), (820 * MS, 860 * MS)))
    assert delayed_in_replay(held) == [i in (15, 16, 17, 18, 50, 52, 53, 54, 55, 80, 82, 83,
                                             84, 85) for i in range(100)]
    values = judged_latencies_ms(held, TARGET)
    assert values.count(80.0) == 2 and values[50] == values[80] == 80.0   # the 20th set apart
    # the same figures as live's judge of the same requests and marks
    live = judge_requests([v / MS for v in held.latencies_ns or ()],
                          delayed_in_replay(held) or [], TARGET)
    assert abs(live.p99_ms - _p99(values)) < 1e-9 and not judge(None, held, TARGET).met
    assert live.slow_unthrottled == 1 and live.throttled_over == 2


def _p99(values: list[float]) -> float:
    from client.data.summary import percentile
    return percentile(values, 99)


def test_the_tail_bounds_judge_the_same_requests() -> None:
    # 200 requests, 4 slow: with none delayed every side of the tail meets; delayed, none does
    sent = tuple(i * 10 * MS for i in range(200))
    latencies = tuple((80 if i % 50 == 7 else 5) * MS for i in range(200))
    free = LimitRow(Replayed(0.5, (), CpuStat(), (0, 2000 * MS)), latencies, sent)
    spans = tuple((s + MS, s + 2 * MS) for s, v in zip(sent, latencies) if v > 40 * MS)
    held = LimitRow(Replayed(0.5, spans, CpuStat(), (0, 2000 * MS)), latencies, sent)
    for side in (-1, 1):
        assert judge_tail(side)(None, free, TARGET).met
    assert not judge_tail(1)(None, held, TARGET).met and not judge(None, held, TARGET).met


def test_without_send_times_the_latencies_are_judged_as_they_are() -> None:
    bare = LimitRow(Replayed(0.5, (), CpuStat(), (0, 10**9)), row(()).latencies_ns, None)
    assert delayed_in_replay(bare) is None and not judge(None, bare, TARGET).met


def test_pooled_replicas_send_times_move_with_their_stretches() -> None:
    # two replicas' windows, each 1 s from its own clock's 5 s: the second's stretch and its
    # request land together one window later
    def replica() -> LimitRow:
        return LimitRow(Replayed(0.5, ((5100 * MS, 5180 * MS),), CpuStat(),
                                 (5000 * MS, 6000 * MS)), (80 * MS, 80 * MS),
                        (5100 * MS, 5500 * MS))
    pooled = pooled_rows([replica(), replica()])
    assert pooled.sent_ns == (100 * MS, 500 * MS, 1100 * MS, 1500 * MS)
    assert pooled.replayed.stretches == ((100 * MS, 180 * MS), (1100 * MS, 1180 * MS))
    assert delayed_in_replay(pooled) == [True, False, True, False]
