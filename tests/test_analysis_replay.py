"""A recorded timeline replayed at other limits (``client.analysis.replay``), on timelines a
group under the quota model writes on a fake clock: the replay at the recorded limit gives the
recorded periods throttled, a lower one throttles the periods whose demand exceeds it, a higher
one changes nothing; requests never get faster than their unthrottled part."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from client.analysis.replay import (ReplayError, Request, added_delay, demand_of, load_of,
                                    predicted_latency, replay, replay_limits)
from client.data.attribution import held
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


def sequential(cpus: float, cpu_ms: int, count: int = 30, gap_ms: int = 5
               ) -> tuple[list[CgroupSample], list[Request]]:
    """A one-thread group serving ``count`` requests one after another (``cpu_ms`` of CPU
    each, the next sent ``gap_ms`` after the last ended) under ``cpus`` of the quota model on
    a grid 37 ms off the clock's zero, sampled every 10 ms; with each request's hold as the
    commands read it from the timeline (``client.data.attribution.held``)."""
    account = QuotaAccount(round(cpus * PERIOD), PERIOD, origin_ns=37 * MS)
    usage, samples, spans = 0, [], []
    t, start, left, send_at, end_at = 0, None, 0, 50 * MS, None
    while end_at is None or t <= end_at:
        if t % (10 * MS) == 0:
            stats = account.stats(t)
            samples.append(CgroupSample(t, usage, stats.nr_periods, stats.nr_throttled,
                                        stats.throttled_ns))
        if start is None and len(spans) < count and t >= send_at:
            start, left = t, cpu_ms * MS
        if start is not None and account.throttled_until(t) == t:
            step = min(MS, left, account.remaining(t))
            account.charge(step, t + MS)
            usage, left = usage + step, left - step
            if left == 0:
                spans.append((start, t + MS))
                start, send_at = None, t + MS + gap_ms * MS
                end_at = t + 300 * MS if len(spans) == count else None
        t += MS
    holds = held(spans, [samples], [PERIOD])
    return samples, [Request(s, e - s, h) for (s, e), h in zip(spans, holds)]


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


@pytest.mark.parametrize("cpus, cpu_ms", [(0.1, 30), (0.3, 50), (0.3, 20)])
def test_replaying_requests_at_their_own_limit_gives_each_its_recorded_latency(
        cpus: float, cpu_ms: int) -> None:
    timeline, requests = sequential(cpus, cpu_ms)
    demand = demand_of(timeline, PERIOD)
    assert load_of(demand, requests).closed   # one after another
    (row,) = replay_limits(demand, [cpus], requests)
    assert row.latencies_ns is not None
    for request, latency in zip(requests, row.latencies_ns):
        assert abs(latency - request.latency_ns) < PERIOD, request   # within a period
    assert abs(row.replayed.stats.nr_throttled - demand.recorded.nr_throttled) <= 2


def test_a_closed_loop_at_a_higher_limit_is_faster_and_never_below_its_cpu() -> None:
    timeline, requests = sequential(0.1, 30)
    demand = demand_of(timeline, PERIOD)
    recorded, higher, free = replay_limits(demand, [0.1, 0.5, None], requests)
    assert free.replayed.stats.nr_throttled == 0 and free.latencies_ns is not None
    assert min(free.latencies_ns) >= 30 * MS                 # its CPU, run on one CPU
    assert higher.latency_ms(50) < recorded.latency_ms(50)   # less held
    assert higher.replayed.stats.nr_throttled < recorded.replayed.stats.nr_throttled


def test_requests_that_overlap_are_an_open_loop_kept_at_their_times() -> None:
    demand = demand_of(recorded(1.0, first_half), PERIOD)
    # two requests in each period's busy half, overlapping: each took half its CPU
    requests = [Request(p * PERIOD + d, 40 * MS, 0) for p in range(1, 18) for d in (0, 10 * MS)]
    load = load_of(demand, requests)
    assert not load.closed
    assert [j.arrival_ns for j in load.jobs] == sorted(r.start_ns for r in requests)
    assert sum(j.cpu_ns for j in load.jobs) + sum(load.background_ns) == pytest.approx(
        demand.usage_ns)   # every ns of the record's CPU once


def test_two_clients_each_sending_when_its_last_ended_are_a_closed_loop_of_two() -> None:
    demand = demand_of(recorded(1.0, always), PERIOD)
    # client a: 0-30, 31-61, ...; client b: 15-45, 46-76, ... (ms): each 1 ms after its last
    requests = [Request(first * MS + n * 31 * MS, 30 * MS, 0)
                for n in range(40) for first in (0, 15)]
    load = load_of(demand, requests)
    assert load.closed and load.lanes == 2
    first_two = [j for j in load.jobs if j.follows is None]
    assert [j.arrival_ns for j in first_two] == [0, 15 * MS]   # each client's first is sent
    assert {j.gap_ns for j in load.jobs if j.follows is not None} == {MS}   # the rest follow


def test_a_closed_loop_the_file_names_is_one_even_when_its_gaps_are_long() -> None:
    """A busy client sends its next request 50 ms after the last ended: read from the gaps
    that is an open loop; the run's own plan (one at a time) makes it one lane all the same,
    and an open loop the plan names keeps every request at its time."""
    timeline, requests = sequential(0.3, 20, count=20, gap_ms=50)
    demand = demand_of(timeline, PERIOD)
    assert not load_of(demand, requests).closed
    named = load_of(demand, requests, closed=True)
    assert named.closed and named.lanes == 1
    assert [j.gap_ns for j in named.jobs[1:]] and all(j.follows is not None
                                                      for j in named.jobs[1:])
    assert not load_of(demand, requests, closed=False).closed
    tight, = replay_limits(demand, [0.1], requests, closed=True)
    loose, = replay_limits(demand, [0.1], requests, closed=False)
    # an open loop at 0.1 CPU piles up behind the quota; the closed one sends each after the last
    assert tight.latencies_ns is not None and loose.latencies_ns is not None
    assert max(tight.latencies_ns) <= max(loose.latencies_ns)
