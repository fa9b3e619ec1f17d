"""client.analysis.period: when stalls recur, and the idle share of a run."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.analysis.period import idle_fraction, infer_period
from client.data.record import RequestRecord
from tests.captures import MS


@settings(max_examples=40, deadline=None)
@given(period=st.floats(10, 500), phase=st.floats(0, 1000), jitter=st.floats(0, 0.05),
       steps=st.lists(st.integers(1, 2), min_size=8, max_size=60), seed=st.integers(0, 9999))
def test_period_is_found_from_when_stalls_end(period: float, phase: float, jitter: float,
                                              steps: list[int], seed: int) -> None:
    """Stalls end on the period grid (plus up to 5 % of it: the rest of the request); some
    periods have no stall. Stalls last at least half a period here (the lower bound). Fewer
    or sparser stalls may be refused: random times would align as well by chance."""
    rng = random.Random(seed)
    k, ends = 0, []
    for step in steps:
        k += step
        ends.append(phase + k * period + rng.uniform(0, jitter) * period)
    if all(s % 2 == 0 for s in steps[1:]):
        return  # every gap even: twice the period fits as well
    found = infer_period(ends, min_period_ms=0.5 * period)
    assert found is not None and found == pytest.approx(period, rel=0.01)


def test_period_needs_enough_stalls() -> None:
    assert infer_period([100.0, 200.0, 300.0]) is None
    assert infer_period([]) is None
    assert infer_period([0.0, 37.0, 51.3, 140.2, 171.9, 266.6, 333.3, 351.0]) is None


def test_idle_fraction() -> None:
    back_to_back = [RequestRecord(i, i * 5 * MS, 5 * MS, 200) for i in range(10)]
    assert idle_fraction(back_to_back) == 0
    gaps = [RequestRecord(i, i * 10 * MS, 5 * MS, 200) for i in range(10)]
    assert idle_fraction(gaps) == pytest.approx(45 / 95)
    assert idle_fraction([]) is None
