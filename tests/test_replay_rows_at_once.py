"""What a replay works out over all of a window's rows at once (numpy) is what it was a row
at a time: the bunched demand (tests/replay_before.py's ``bunched_before``), and the periods
counted where no limit throttles (the account stepped through, ``replay_before``), on random
rows with the awkward cases: empty rows, rows on a boundary, pieces of about half a ns."""

from __future__ import annotations

import random

import pytest

from client.analysis.replay import Demand, Replayer, _most_charged, bunched
from cpuquota.account import CpuStat
from tests.replay_before import bunched_before, replay_before

PERIOD_NS = 100_000_000


def random_demand(rng: random.Random) -> Demand:
    p = PERIOD_NS
    t = rng.randrange(0, 3 * p)
    starts = []
    for _ in range(rng.randrange(2, 40)):
        starts.append(t)
        t += rng.choice([1, 2, p, p - 1, p + 1, p // 2, rng.randrange(1, 4 * p),
                         rng.randrange(1, p // 10)])
    wanted = tuple(rng.choice([0.0, 0.5, 0.49, 0.51, 1.0, 1.5, rng.random() * 1e6,
                               rng.random() * p * 0.6, rng.random() * 2]) for _ in starts)
    used = rng.choice([(), tuple(rng.choice([0.0, 1.0, rng.random() * p]) for _ in starts)])
    origin = rng.choice([starts[0] - starts[0] % p, starts[0] - rng.randrange(0, p)])
    return Demand(tuple(starts), t + rng.choice([1, p, rng.randrange(1, 3 * p)]), wanted, p,
                  origin, rng.choice([1, 2]), CpuStat(), 1, 0.0, 0, used)


@pytest.mark.parametrize("seed", range(4))
def test_the_bunched_rows_are_the_row_at_a_time_ones(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        demand = random_demand(rng)
        got, before = bunched(demand), bunched_before(demand)
        assert (got.starts_ns, got.wanted_ns, got.used_ns) == (
            before.starts_ns, before.wanted_ns, before.used_ns), demand
        assert all(type(s) is int for s in got.starts_ns), got.starts_ns
        assert all(type(w) is float for w in got.wanted_ns + got.used_ns), got.wanted_ns


@pytest.mark.parametrize("seed", range(4))
def test_the_periods_counted_unthrottled_are_the_accounts(seed: int) -> None:
    rng = random.Random(100 + seed)
    checked = 0
    for _ in range(300):
        demand = random_demand(rng)
        most = _most_charged(demand, PERIOD_NS, demand.origin_ns)
        if most is None:
            continue
        replayer = Replayer(demand)
        for cpus in ((most + 1) / PERIOD_NS, (most + 1000) / PERIOD_NS):
            assert replayer.never_throttled(cpus)
            got, before = replayer(cpus).stats, replay_before(demand, cpus).stats
            assert got == before, (demand, cpus, got, before)
            checked += 1
    assert checked > 100, checked
