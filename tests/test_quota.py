"""The kernel's quota accounting on a simulated clock (cpuquota.account)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpuquota.account import QuotaAccount, CpuStat

MS = 1_000_000


def test_fresh_account_has_one_quota_and_no_counts() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    assert a.remaining(0) == 30 * MS
    assert a.throttled_until(5 * MS) == 5 * MS
    assert a.stats(0) == CpuStat()


def test_spent_quota_throttles_until_the_next_period() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(30 * MS, 40 * MS)
    assert a.remaining(40 * MS) == 0
    assert a.throttled_until(40 * MS) == 100 * MS
    assert a.is_throttled(99 * MS)
    assert not a.is_throttled(100 * MS)
    assert a.remaining(100 * MS) == 30 * MS
    s = a.stats()
    assert (s.nr_periods, s.nr_throttled, s.throttled_ns) == (1, 1, 60 * MS)


def test_throttled_time_counts_only_when_the_throttle_has_ended() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(30 * MS, 30 * MS)
    a.throttled_until(30 * MS)
    assert a.stats(90 * MS).throttled_ns == 0
    assert a.stats(100 * MS).throttled_ns == 70 * MS


def test_overshoot_is_debt_paid_from_the_next_refill() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(35 * MS, 35 * MS)
    assert a.remaining(35 * MS) == -5 * MS
    assert a.throttled_until(35 * MS) == 100 * MS
    assert a.remaining(100 * MS) == 25 * MS


def test_debt_larger_than_a_quota_waits_several_periods() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(100 * MS, 100 * MS - 1)  # 70 ms owed: two refills pay 60, the third leaves 20
    assert a.throttled_until(100 * MS - 1) == 300 * MS
    assert a.remaining(300 * MS) == 20 * MS
    s = a.stats()
    assert (s.nr_throttled, s.throttled_ns) == (3, 200 * MS + 1)


def test_debt_is_not_forgiven_by_idle_periods() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(35 * MS, 35 * MS)      # nobody asks to run afterwards: not throttled, but owes 5
    assert a.remaining(10_000 * MS) == 25 * MS


def test_long_run_share_is_the_quota_even_with_overshoot() -> None:
    # 1 % with a check every 0.3 ms: each period overshoots by up to 0.3 ms. With the debt
    # carried, 1 s of CPU takes 100 s; a throttle that forgave it would finish in ~77 s.
    a = QuotaAccount(1 * MS, 100 * MS)
    r = a.run(1000 * MS, 0, overshoot_ns=MS * 3 // 10)
    assert 99_000 * MS <= r.end_ns <= 100_100 * MS
    assert r.paused_ns == r.end_ns - 1000 * MS


def test_work_longer_than_a_period_is_paused_each_period() -> None:
    a = QuotaAccount(50 * MS, 100 * MS)
    r = a.run(250 * MS, 0)
    assert (r.end_ns, r.paused_ns) == (450 * MS, 200 * MS)
    assert a.stats(r.end_ns).nr_throttled == 4


def test_sequential_requests_at_30_percent_one_in_five_waits_a_period() -> None:
    # The original demo: ~5 ms requests (6 ms here, 1 ms apart) under 0.3 CPU: five fit in
    # the 30 ms of a period, the sixth waits for the next one.
    a = QuotaAccount(30 * MS, 100 * MS)
    t, latencies = 0, []
    for _ in range(60):
        r = a.run(6 * MS, t)
        latencies.append(r.end_ns - r.start_ns)
        t = r.end_ns + MS
    slow = [x for x in latencies if x > 20 * MS]
    assert len(slow) == 11 and all(x == 71 * MS for x in slow)
    assert sorted(latencies)[30] == 6 * MS


def test_full_quota_never_throttles_one_cpu_and_halves_two() -> None:
    one = QuotaAccount(100 * MS, 100 * MS)
    assert one.run(1000 * MS, 5 * MS).paused_ns == 0
    two = QuotaAccount(100 * MS, 100 * MS)
    r = two.run(1000 * MS, 5 * MS, cpus=2.0)
    assert r.paused_ns == pytest.approx(r.end_ns - r.start_ns - r.paused_ns, rel=0.15)


def test_tiny_quota_still_gets_its_share() -> None:
    a = QuotaAccount(10_000, 100 * MS)  # 10 us per 100 ms = 0.01 %
    r = a.run(2 * MS, 0, overshoot_ns=200_000)
    # 2 ms at 0.01 % is 20 s; the debt of the last overshoot (<= 0.2 ms) is still unpaid
    assert 18_000 * MS <= r.end_ns <= 20_000 * MS


def test_periods_stay_on_the_grid_and_idle_periods_are_not_counted() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(1 * MS, 5 * MS)
    assert a.stats(10_000 * MS).nr_periods == 2  # the busy one, and the idle one that stops it
    a.charge(30 * MS, 12_345 * MS)
    assert a.throttled_until(12_345 * MS) == 12_400 * MS  # the grid, not 12_345 + 100
    assert a.stats(12_400 * MS).nr_periods == 3


def test_a_charge_landing_on_a_boundary_counts_in_the_period_before_it() -> None:
    # Work that starts with the period timer stopped and is charged exactly at the next
    # boundary ran before that boundary: one charge there is the same as stopping 1 ns short
    # and charging the last nanosecond on the boundary (what a simulator need not do).
    whole, split = QuotaAccount(30 * MS, 100 * MS), QuotaAccount(30 * MS, 100 * MS)
    whole.charge(30 * MS, 100 * MS)
    split.charge(30 * MS - 1, 100 * MS - 1)
    split.charge(1, 100 * MS)
    for a in (whole, split):
        assert a.throttled_until(100 * MS) == 100 * MS  # the boundary at 100 ms refilled it
        assert a.remaining(100 * MS) == 30 * MS
        assert a.stats(100 * MS).nr_periods == 1
        assert a.next_boundary(100 * MS) == 200 * MS


def test_burst_saves_unused_quota_and_counts_its_use() -> None:
    a = QuotaAccount(30 * MS, 100 * MS, burst_ns=20 * MS)
    a.charge(1, 1)
    assert a.remaining(250 * MS) == 50 * MS
    r = a.run(50 * MS, 250 * MS)
    assert r.paused_ns == 0
    s = a.stats(300 * MS)
    assert (s.nr_bursts, s.burst_ns) == (1, 20 * MS)
    assert a.throttled_until(300 * MS) == 300 * MS


def test_after_a_long_pause_a_large_burst_holds_at_most_two_refills() -> None:
    # The period timer stops after one idle period, so only two refills are saved.
    a = QuotaAccount(10 * MS, 100 * MS, burst_ns=50 * MS)
    a.charge(10 * MS, 1 * MS)
    assert a.remaining(5_000 * MS) == 20 * MS


def test_time_going_backwards_is_taken_as_the_latest_time() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    a.charge(30 * MS, 50 * MS)
    assert a.throttled_until(40 * MS) == 100 * MS


@pytest.mark.parametrize("kwargs", [
    {"quota_ns": 0, "period_ns": 100}, {"quota_ns": 1, "period_ns": 0},
    {"quota_ns": 1, "period_ns": 100, "burst_ns": -1},
])
def test_bad_parameters_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        QuotaAccount(**kwargs)


def test_bad_charges_and_runs_are_refused() -> None:
    a = QuotaAccount(30 * MS, 100 * MS)
    with pytest.raises(ValueError, match="cpu_ns"):
        a.charge(-1, 0)
    with pytest.raises(ValueError, match="cpus"):
        a.run(1, 0, cpus=0)


@settings(max_examples=60, deadline=None)
@given(quota_ms=st.integers(1, 100), burst_ms=st.integers(0, 50),
       overshoot_us=st.integers(0, 2000),
       jobs=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 250)), min_size=1,
                     max_size=25))
def test_cpu_never_exceeds_the_quota_of_the_periods_elapsed(
        quota_ms: int, burst_ms: int, overshoot_us: int, jobs: list[tuple[int, int]]) -> None:
    period = 100 * MS
    a = QuotaAccount(quota_ms * MS, period, burst_ns=burst_ms * MS)
    t = used = 0
    for cpu_ms, gap_ms in jobs:
        r = a.run(cpu_ms * MS, t + gap_ms * MS, overshoot_ns=overshoot_us * 1000)
        assert r.end_ns - r.start_ns >= cpu_ms * MS  # work never runs faster than one CPU
        used += cpu_ms * MS
        t = r.end_ns
    periods = math.ceil(t / period) + 1
    assert used <= quota_ms * MS * periods + burst_ms * MS + overshoot_us * 1000 + 1
