"""client.analysis.latency: the fast mode and the gap above it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.analysis.latency import split_latencies


def test_split_latencies() -> None:
    assert split_latencies([]) is None and split_latencies([5.0]) is None
    one_mode = split_latencies([5.0, 5.2, 5.1, 6.0, 5.4, 5.3])
    assert one_mode is not None and one_mode.threshold_ms is None
    two = split_latencies([5.0, 5.2, 70.1, 5.1, 69.8, 5.3])
    assert two is not None and (two.threshold_ms, two.fast_count) == (69.8, 4)
    assert two.baseline_ms == pytest.approx(5.15)


@settings(max_examples=60, deadline=None)
@given(fast=st.floats(0.5, 30), stall_share=st.floats(0.5, 0.95),
       period=st.sampled_from([50.0, 100.0, 250.0]), n_fast=st.integers(3, 80),
       n_slow=st.integers(1, 40), seed=st.integers(0, 10_000))
def test_bimodal_latencies_are_split_exactly(fast: float, stall_share: float, period: float,
                                             n_fast: int, n_slow: int, seed: int) -> None:
    """Fast requests with 10 % jitter and requests stalled by most of a period are told apart."""
    rng = random.Random(seed)
    fast_values = [fast * rng.uniform(0.95, 1.05) for _ in range(n_fast)]
    stall = max(stall_share * period, 2 * fast, 3.0)
    slow_values = [fast + stall * rng.uniform(0.9, 1.0) for _ in range(n_slow)]
    split = split_latencies(fast_values + slow_values)
    assert split is not None and split.threshold_ms is not None
    assert split.fast_count == n_fast
    assert split.threshold_ms == pytest.approx(min(slow_values))


@settings(max_examples=40, deadline=None)
@given(mu=st.floats(1, 50), spread=st.floats(0.0, 0.1), n=st.integers(2, 300),
       seed=st.integers(0, 10_000))
def test_one_mode_with_jitter_is_never_throttled(mu: float, spread: float, n: int,
                                                 seed: int) -> None:
    rng = random.Random(seed)
    split = split_latencies([mu * (1 + rng.uniform(-spread, spread)) for _ in range(n)])
    assert split is not None and split.threshold_ms is None
