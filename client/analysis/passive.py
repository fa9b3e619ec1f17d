"""``advise --passive``'s verdicts: a limit's replay of a recorded window judged against a
latency target, and the answer (pure: the replays are the caller's, ``client.analysis.replay``;
the search that calls them is ``client.advise.passive.search``).

The search is advise's own (``client.analysis.advise.next_millicores``: from a start, steps
down or up by a growing factor, then the geometric middle until the smallest limit that met
is within 10 % of the largest that missed below it), each limit judged by its replay instead
of a run: with the recorded requests, their predicted p99 (and p90); without them, the added
delay of a request arriving at a random instant (its p99 and p90). A target the replay without
any limit misses is no limit's to meet: no recommendation, and the reason.

The requests are judged as live advise judges a run's (``client.analysis.goal.judge_requests``):
a predicted request over the target that no throttle of its replay delayed (its replayed span
overlaps no stretch the replay sat throttled) is slow without throttling, what the record
showed of it (the machine's other load, a wait that is not the quota), and is taken as the
replay's median undelayed request.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.analysis.goal import LatencyGoal
from client.analysis.passive_range import Range, tail_ms
from client.analysis.replay import MS, LimitRow
from client.data.summary import percentile

__all__ = ["LESS", "JudgedReplay", "PassiveAdvice", "RowJudge", "judge", "judge_tail",
           "judged_latencies_ms"]

LESS = 0.75   # the answer is shown beside a limit 25 % lower


@dataclass(frozen=True)
class JudgedReplay:
    """One limit's replay (``millicores`` None: no limit) and what it missed of the target."""

    millicores: int | None
    row: LimitRow
    missed: tuple[str, ...]

    @property
    def met(self) -> bool:
        return not self.missed

    def to_dict(self) -> dict[str, Any]:
        return {**self.row.to_dict(), "met": self.met, "missed": list(self.missed)}


def delayed_in_replay(row: LimitRow) -> list[bool] | None:
    """Whether a throttle of the replay delayed each predicted request: its span (sent, sent
    plus its latency) overlaps a stretch the replay sat throttled (None: the row has no send
    times, so it cannot say)."""
    if row.latencies_ns is None or row.sent_ns is None:
        return None
    stretches = sorted(row.replayed.stretches)
    starts = [s for s, _e in stretches]
    ends = [e for _s, e in stretches]
    longest = [0] * len(ends)   # the latest end among the stretches up to each one
    for k, e in enumerate(ends):
        longest[k] = max(e, longest[k - 1]) if k else e
    out = []
    for sent, latency in zip(row.sent_ns, row.latencies_ns):
        k = bisect.bisect_left(starts, sent + latency) - 1   # the last stretch begun before
        out.append(k >= 0 and longest[k] > sent)             # its end, and ended after it began
    return out


def judged_latencies_ms(row: LimitRow, target: LatencyGoal) -> list[float]:
    """The row's predicted latencies (ms) as live advise judges a run's: each over the
    target's tightest bound that no throttle of the replay delayed set to the median of the
    undelayed ones (``client.analysis.goal.judge_requests``); without send times, as they
    are."""
    values = [v / MS for v in row.latencies_ns or ()]
    delayed = delayed_in_replay(row)
    if delayed is None or not values:
        return values
    free = [v for v, d in zip(values, delayed) if not d]
    if not free:
        return values
    typical = float(np.median(free))
    return [typical if v > target.tightest_ms and not d else v for v, d in zip(values, delayed)]


def judge(millicores: int | None, row: LimitRow, target: LatencyGoal) -> JudgedReplay:
    """The row against the target: the requests' predicted p90/p99 as live advise judges a
    run's (:func:`judged_latencies_ms`) when it has them, else the added delay's."""
    if row.latencies_ns is not None:
        values = judged_latencies_ms(row, target)
        missed = target.misses(percentile(values, 90), percentile(values, 99), None)
    else:
        p90, p99 = row.delays_ms(90, 99)
        missed = target.misses(p90, p99, None)
    return JudgedReplay(millicores, row, missed)


RowJudge = Callable[[int | None, LimitRow, LatencyGoal], JudgedReplay]


def judge_tail(side: int) -> RowJudge:
    """A judge whose p90 and p99 are the order statistics that bound them from below
    (``side`` -1) or above (+1), given how few requests decide them
    (``client.analysis.passive_range.tail_ms``); without requests, :func:`judge`."""
    def judged(millicores: int | None, row: LimitRow, target: LatencyGoal) -> JudgedReplay:
        if row.latencies_ns is None:
            return judge(millicores, row, target)
        values = judged_latencies_ms(row, target)
        return JudgedReplay(millicores, row, target.misses(
            tail_ms(values, 90, side), tail_ms(values, 99, side), None))
    return judged


@dataclass(frozen=True)
class PassiveAdvice:
    """The answer: every limit replayed in the order tried, the one recommended (None: see
    ``reason``) and the one 25 % below it."""

    target: LatencyGoal
    free: JudgedReplay
    tried: tuple[JudgedReplay, ...]
    at: JudgedReplay | None
    less: JudgedReplay | None
    floor: int
    ceiling: int
    reason: str | None = None
    range: Range | None = None   # the limits that meet it under what the record hid
