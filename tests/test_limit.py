"""cpuquota.limit: the one CPU limit type, its rules, units and words."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpuquota.limit import Limit, LimitError, kernel_limit


def test_the_kernels_numbers() -> None:
    limit = kernel_limit(0.3)
    assert (limit.quota_us, limit.period_us, limit.burst_us) == (30000, 100000, 0)
    assert (limit.quota_ns, limit.period_ns, limit.millicores) == (30_000_000, 100_000_000, 300)
    burst = kernel_limit(1.5, period_ms=50, burst_ms=20)
    assert (burst.quota_us, burst.period_us, burst.burst_us) == (75000, 50000, 20000)
    assert burst.describe_kernel() == "1.5 CPU (quota 75000 µs per 50000 µs period, burst 20000 µs)"


def test_the_rules_name_the_option_and_its_range() -> None:
    with pytest.raises(LimitError, match="--cpus must be > 0"):
        kernel_limit(0)
    with pytest.raises(ValueError, match="minimum is 1000 µs"):
        kernel_limit(0.005)
    with pytest.raises(ValueError, match=r"--period-ms must be in \[1, 1000\]"):
        kernel_limit(0.5, period_ms=2000)
    with pytest.raises(ValueError, match=r"--burst-ms must be in \[0, 30\]"):
        kernel_limit(0.3, burst_ms=31)
    with pytest.raises(ValueError, match="--cpus must be > 0"):
        kernel_limit(float("nan"))
    with pytest.raises(ValueError, match="--burst-ms"):
        Limit(1, burst_ms=-1)
    # the in-process throttle and the model take quotas the kernel would refuse
    assert Limit(0.005).kernel_problem() is not None and Limit(0.01).kernel_problem() is None


@given(cpus=st.floats(0.01, 64), period_ms=st.floats(1, 1000))
def test_the_kernel_quota_keeps_the_share(cpus: float, period_ms: float) -> None:
    try:
        limit = kernel_limit(cpus, period_ms)
    except ValueError as exc:
        assert "minimum is 1000" in str(exc) and cpus * period_ms * 1000 < 1000.5
        return
    assert limit.quota_us >= 1000 and 1000 <= limit.period_us <= 1_000_000
    assert abs(limit.quota_us / limit.period_us - cpus) <= 0.5 / limit.period_us + 1e-9 * cpus


def test_words() -> None:
    assert Limit(0.3).label() == "0.3 CPU"
    assert Limit(0.1, 50, 0, "kernel").label() == "0.1 CPU (kernel, period 50 ms)"
    assert Limit(0.3, burst_ms=10).label() == "0.3 CPU (burst 10 ms)"
    assert Limit(0.3).describe() == "0.3 CPU (30 ms per 100 ms period)"
    assert Limit(0.3, 100, 5).describe() == "0.3 CPU (30 ms per 100 ms period, burst 5 ms)"
    assert Limit(0.3, source="kernel") != Limit(0.3)
