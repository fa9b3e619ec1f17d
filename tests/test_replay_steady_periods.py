"""The replay through the quota's account (``_stepped``: with a burst, and what the replay
without one keeps in local variables, tests/test_replay_plain.py) serves whole periods of a
steady demand at once where none can run out (``QuotaAccount.serve_steady``; a 1 s row of an
idle pod was ten steps of the account): the same stretches and the same counters as a
period at a time, on rows of every spacing, idle, steady, bursty and throttled,
at limits above and below what they used, bunched too."""

from __future__ import annotations

import random

import pytest

from client.analysis.replay import _stepped, bunched, demand_of
from client.data.timeline import CgroupSample
from cpuquota.account import QuotaAccount

PERIOD_NS = 100_000_000


def timeline(seed: int) -> list[CgroupSample]:
    """Rows of a random spacing (the agent's 1 s and 100 ms, or a sampler's 10 ms, jittered),
    CPU in bursts and lulls (some rows none), throttled now and then."""
    rng = random.Random(seed)
    step = rng.choice([1_000_000_000, 100_000_000, 10_000_000, 250_000_000])
    t, usage, periods, throttled, throttled_ns = rng.randrange(PERIOD_NS), 0, 0, 0, 0
    rows = [CgroupSample(t, 0, 0, 0, 0)]
    mood = rng.random()
    for _ in range(max(rng.randrange(40, 160), 3_000_000_000 // step)):
        gap = max(1, step + rng.randrange(-step // 50, step // 50 + 1))
        if rng.random() < 0.1:
            mood = rng.random()
        rate = 0.0 if mood < 0.2 else mood * rng.choice([0.001, 0.05, 0.3, 1.5])
        usage += int(rate * gap)
        periods += gap // PERIOD_NS
        if rate > 0.25 and rng.random() < 0.3:
            held = rng.randrange(1, 3)
            throttled, throttled_ns = throttled + held, throttled_ns + held * PERIOD_NS // 4
        t += gap
        rows.append(CgroupSample(t, usage + 1, periods, throttled, throttled_ns))
    return rows


def one_period_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(QuotaAccount, "serve_steady",
                        lambda self, rate, start_ns, end_ns: start_ns)


@pytest.mark.parametrize("seed", range(60))
def test_whole_periods_at_once_replay_as_one_at_a_time(seed: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    demand = demand_of(timeline(seed), PERIOD_NS)
    demands = [demand, bunched(demand)] if demand.coarse else [demand]
    limits = [0.002, 0.01, 0.05, 0.2, 0.5, 1.0, 2.0]
    fast = [_stepped(d, cpus, 0, PERIOD_NS) for d in demands for cpus in limits]
    with monkeypatch.context() as m:
        one_period_at_a_time(m)
        slow = [_stepped(d, cpus, 0, PERIOD_NS) for d in demands for cpus in limits]
    assert fast == slow
    assert any(r.stretches for r in slow) or all(r.stats.nr_throttled == 0 for r in slow)


def test_an_idle_pods_coarse_rows_take_whole_periods_at_once() -> None:
    rows = [CgroupSample(i * 1_000_000_000, i * 30_000, i * 10, 0, 0) for i in range(121)]
    demand = demand_of(rows, PERIOD_NS)
    served = []
    real = QuotaAccount.serve_steady

    def counted(self: QuotaAccount, rate: float, start_ns: int, end_ns: int) -> int:
        served.append(real(self, rate, start_ns, end_ns) - start_ns)
        return start_ns + served[-1]
    QuotaAccount.serve_steady = counted   # type: ignore[method-assign]
    try:
        replayed = _stepped(demand, 0.2, 0, PERIOD_NS)
    finally:
        QuotaAccount.serve_steady = real   # type: ignore[method-assign]
    assert replayed.stretches == () and replayed.stats.nr_throttled == 0
    assert replayed.stats.nr_periods == 1200
    assert sum(served) >= 0.8 * demand.window_ns   # most of the window in whole periods


@pytest.mark.parametrize("seed", range(40))
def test_the_added_delay_is_the_wait_percentile_of_its_stretches(seed: int) -> None:
    """By its definition: P(wait > w) = sum(max(0, length - w)) / window falls to 1 - q."""
    from client.analysis.replay import Replayed, added_delay
    from cpuquota.account import CpuStat

    rng = random.Random(seed)
    t, stretches = 0, []
    for _ in range(rng.randrange(1, 400)):
        t += rng.randrange(1, PERIOD_NS)
        length = rng.choice([rng.randrange(1, PERIOD_NS), PERIOD_NS // 2, 1_000_000])
        stretches.append((t, t + length))
        t += length
    window = (0, t + rng.randrange(0, 10 * t))
    for q in (50.0, 90.0, 99.0, 99.9):
        got = added_delay(Replayed(0.1, tuple(stretches), CpuStat(), window), q)

        def above(w: float) -> float:
            return sum(max(0.0, e - s - w) for s, e in stretches) / window[1]
        if got == 0.0:
            assert above(0.0) <= 1 - q / 100 + 1e-12, (q, above(0.0))
        else:
            assert above(got) <= 1 - q / 100 + 1e-12 < above(got * (1 - 1e-9)) + 2e-12, q
