"""Working out a throttled pod's demand passes over the rows its earlier throttles emptied
(``_take_after``'s ``skip``; each throttle rescanned every later row, the time growing with
the square of the rows): the same demand as reading every row, on random timelines, and
on a throttled pod's 10 m of 100 ms rows."""

from __future__ import annotations

import pytest

from client.analysis import replay as replay_module
from client.analysis.replay import _live, _take_after, demand_of
from client.data.timeline import CgroupSample
from tests.test_replay_steady_periods import PERIOD_NS, timeline


def throttled_pod(rows: int) -> list[CgroupSample]:
    """A pod held longer than it ran: throttled in most 100 ms rows, its later rows soon
    emptied by earlier throttles (4.2 s reading every row, 0.05 s passing over them)."""
    out, usage, throttled, throttled_ns = [CgroupSample(0, 0, 0, 0, 0)], 0, 0, 0
    for n in range(1, rows + 1):
        usage += 20_000_000 if n % 7 else 0
        if n % 3:
            throttled, throttled_ns = throttled + 1, throttled_ns + 90_000_000
        out.append(CgroupSample(n * PERIOD_NS, usage + 1, n, throttled, throttled_ns))
    return out


def every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "_take_after",
                        lambda wanted, starts, ends, at, amount, skip=None:
                        _take_after(wanted, starts, ends, at, amount))


@pytest.mark.parametrize("seed", range(60))
def test_passing_over_emptied_rows_gives_the_demand_reading_every_row(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = timeline(seed)
    fast = demand_of(rows, PERIOD_NS)
    with monkeypatch.context() as m:
        every_row(m)
        slow = demand_of(rows, PERIOD_NS)
    assert fast == slow


def test_a_throttled_pods_ten_minutes_give_the_same_demand(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = throttled_pod(6_000)
    fast = demand_of(rows, PERIOD_NS)
    with monkeypatch.context() as m:
        every_row(m)
        slow = demand_of(rows, PERIOD_NS)
    assert fast == slow
    assert fast.hidden_ns > 0


def test_rows_a_take_emptied_are_passed_over_after() -> None:
    wanted = [1.0] * 10
    starts, ends = list(range(10)), list(range(1, 11))
    skip = list(range(11))
    assert _take_after(wanted, starts, ends, 2, 100.0, skip) == pytest.approx(8.0)
    assert wanted[2:] == [0.0] * 8
    # the first row is read each time; every emptied row after it leads past the end
    assert all(_live(skip, i) == 10 for i in range(3, 11))
    assert _live(skip, 2) == 2
    assert all(skip[i] > i for i in range(3, 10))
    wanted[2] = 2.0   # refilled, as the next throttle's spread would: still read, as first
    assert _take_after(wanted, starts, ends, 2, 5.0, skip) == pytest.approx(2.0)
