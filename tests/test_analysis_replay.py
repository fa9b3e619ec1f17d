"""A recorded timeline replayed at other limits (``client.analysis.replay``), on timelines a
group under the quota model writes on a fake clock: the replay at the recorded limit gives the
recorded periods throttled, a lower one throttles the periods whose demand exceeds it, a higher
one changes nothing; requests never get faster than their unthrottled part."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from client.analysis.replay import (ReplayError, added_delay, demand_of, predicted_latency,
                                    replay)
from client.data.timeline import CgroupSample
from cpuquota.account import QuotaAccount

MS = 1_000_000
PERIOD = 100 * MS


def recorded(cpus: float | None, busy: Callable[[int], bool], seconds: float = 2.0
             ) -> list[CgroupSample]:
    """The timeline of a one-thread group that wants the CPU whenever ``busy(t)``, under
    ``cpus`` of the quota model (None: no limit), sampled every 10 ms."""
    account = QuotaAccount(round(cpus * PERIOD), PERIOD) if cpus else None
    usage, samples, t = 0, [], 0
    while t <= seconds * 1e9:
        if t % (10 * MS) == 0:
            stats = account.stats(t) if account else None
            samples.append(CgroupSample(t, usage, stats.nr_periods if stats else 0,
                                        stats.nr_throttled if stats else 0,
                                        stats.throttled_ns if stats else 0))
        if busy(t):
            if account is None:
                usage += MS
            elif account.throttled_until(t) == t:
                step = min(MS, account.remaining(t))
                account.charge(step, t + MS)
                usage += step
        t += MS
    return samples


def always(t: int) -> bool:
    return True


def first_half(t: int) -> bool:   # 50 ms of CPU at the start of every period
    return t % PERIOD < 50 * MS


def test_replaying_a_throttled_record_at_its_limit_gives_its_periods_throttled() -> None:
    timeline = recorded(0.3, always)
    demand = demand_of(timeline, PERIOD)
    assert demand.recorded.nr_throttled == 20 and demand.hidden_ns > 0   # estimated
    assert replay(demand, 0.3).stats.nr_throttled == demand.recorded.nr_throttled


def test_an_unthrottled_record_is_exact_and_a_lower_limit_throttles_where_demand_exceeds_it(
) -> None:
    demand = demand_of(recorded(1.0, first_half), PERIOD)
    assert demand.recorded.nr_throttled == 0 and demand.hidden_ns == 0   # exact
    assert demand.throttled_fraction == 0
    assert replay(demand, 0.4).stats.nr_throttled == 20    # 50 ms wanted > 40 ms of quota
    assert replay(demand, 0.6).stats.nr_throttled == 0     # 50 ms wanted <= 60 ms
    higher = replay(demand, 2.0)
    assert higher.stretches == () and higher.stats.nr_throttled == 0   # nothing changes


def test_no_throttling_adds_no_delay() -> None:
    demand = demand_of(recorded(None, first_half), PERIOD)
    free = replay(demand, 1.0)
    assert added_delay(free, 50) == added_delay(free, 99) == 0
    unlimited = replay(demand, None)
    assert unlimited.stretches == () and added_delay(unlimited, 99) == 0


def test_the_added_delay_is_the_wait_until_the_group_runs_again() -> None:
    tight = replay(demand_of(recorded(1.0, first_half), PERIOD), 0.4)
    # each period: 40 ms run, then 60 ms held; a random instant waits 0 (40 %) or up to 60 ms
    assert added_delay(tight, 30) == 0
    assert 0 < added_delay(tight, 50) < added_delay(tight, 99) <= 60 * MS


def test_a_request_is_never_faster_than_its_unthrottled_part() -> None:
    stretches = [(40 * MS, 100 * MS), (140 * MS, 200 * MS)]
    assert predicted_latency(0, 30 * MS, 0, stretches) == 30 * MS       # done before the hold
    assert predicted_latency(20 * MS, 30 * MS, 0, stretches) == 90 * MS  # held 60 ms
    assert predicted_latency(20 * MS, 90 * MS, 60 * MS, []) == 30 * MS   # its hold taken out
    for start in range(0, 200 * MS, 7 * MS):
        assert predicted_latency(start, 50 * MS, 10 * MS, stretches) >= 40 * MS


@pytest.mark.parametrize("timeline, reason", [
    (recorded(1.0, always, seconds=0.5), "too short"),
    (recorded(1.0, lambda t: False), "used no CPU"),
])
def test_a_window_that_says_nothing_is_refused(timeline: list[CgroupSample],
                                               reason: str) -> None:
    with pytest.raises(ReplayError, match=reason):
        demand_of(timeline, PERIOD)
