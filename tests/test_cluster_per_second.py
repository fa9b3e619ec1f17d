"""A pod's CPUs in each second of its window (``client.analysis.cluster._per_second``, the
usage that krr's and VPA's rules read): on all of the window's edges at once, the same floats
as an edge at a time in Python's ints, and an edge at a time where its products would not be
exact in 64 bits."""

from __future__ import annotations

import random
from typing import NamedTuple

from client.analysis import cluster
from client.analysis.cluster import EXACT, _per_second, _per_second_each


class Sample(NamedTuple):
    t_ns: int
    usage_ns: int
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_ns: int = 0


def window(rng: random.Random, step_ns: int, grow_ns: int, start_usage: int) -> list[Sample]:
    """Rows about ``step_ns`` apart (some at the same instant), usage growing up to
    ``grow_ns`` a row."""
    t, u, rows = rng.randrange(0, 10**12), start_usage, []
    for _ in range(rng.randrange(2, 150)):
        rows.append(Sample(t, u))
        if rng.random() > 0.03:
            t += step_ns + rng.randrange(-step_ns // 50, step_ns // 50 + 1)
        u += rng.randrange(0, grow_ns + 1)
    return rows


def test_all_edges_at_once_give_the_floats_of_one_at_a_time(monkeypatch) -> None:
    each_calls = []
    monkeypatch.setattr(cluster, "_per_second_each",
                        lambda samples: each_calls.append(1) or _per_second_each(samples))
    rng = random.Random(59)
    for trial in range(2000):
        step = rng.choice([10**8, 10**9, 5 * 10**8, 3 * 10**9, 7 * 10**7])
        rows = window(rng, step, rng.choice([10**4, 10**8, 2 * 10**9]),
                      rng.choice([0, rng.randrange(0, 10**16)]))
        assert _per_second(rows) == _per_second_each(rows), trial
    # both ways taken: the arrays (where every product is exact), and the ints
    assert 0 < len(each_calls) < 1500, len(each_calls)


def test_a_product_past_exact_goes_an_edge_at_a_time(monkeypatch) -> None:
    each_calls = []
    monkeypatch.setattr(cluster, "_per_second_each",
                        lambda samples: each_calls.append(1) or _per_second_each(samples))
    # one row of 10 s in which the usage grew by 10**7 s: 10**16 ns over 5 * 10**9 ns into it
    rows = [Sample(0, 0), Sample(10 * 10**9, 10**16), Sample(11 * 10**9, 10**16 + 10**9)]
    assert 10**16 * 5 * 10**9 >= EXACT
    assert _per_second(rows) == _per_second_each(rows) and each_calls
    each_calls.clear()
    # rows out of time order: the same answer as before (bisect's), one at a time
    rows = [Sample(0, 0), Sample(2 * 10**9, 10**9), Sample(10**9, 2 * 10**9)]
    assert _per_second(rows) == _per_second_each(rows) and each_calls


def test_a_second_is_the_usage_between_its_edges() -> None:
    rows = [Sample(0, 0), Sample(2 * 10**9, 10**9), Sample(2 * 10**9, 10**9),
            Sample(3 * 10**9, 10**9 + 250_000_000)]
    assert _per_second(rows) == (0.5, 0.5, 0.25)
