"""The quota model (client.analysis.model) against hand-computed cases; pure and deterministic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.analysis.model import Prediction, Scenario, predict
from cpuquota.account import QuotaAccount

MS = 1_000_000


def latencies(prediction: Prediction) -> list[float]:
    return [r.latency_ns / MS for r in prediction.records]


def test_one_cpu_never_throttles() -> None:
    p = predict(Scenario(service_ms=5, cpus=1))
    assert latencies(p) == [5.0] * 100
    assert p.throttled_fraction == 0 and p.stall_ms is None
    assert p.throughput_rps == pytest.approx(200)
    assert p.stats.nr_throttled == 0


def test_5ms_at_0_3_cpu_one_in_six_waits_70ms() -> None:
    # 30 ms of quota per 100 ms: six 5 ms requests fit, the seventh waits 70 ms for the next
    # period (latency 75); from then on every sixth: seq 6, 12, ..., 96 -> 16 of 100.
    p = predict(Scenario(service_ms=5, cpus=0.3))
    lat = latencies(p)
    slow = [i for i, x in enumerate(lat) if x > 5]
    assert slow == list(range(6, 100, 6))
    assert all(lat[i] == 75.0 for i in slow)
    d = p.to_dict()
    assert d["throttled_fraction"] == 0.16 and d["stall_ms"] == 70.0
    assert d["p50_ms"] == 5.0 and d["p90_ms"] == 75.0
    assert d["mean_ms"] == pytest.approx((84 * 5 + 16 * 75) / 100)
    # the last period starts at 1600 ms with seq 96 (75 ms -> 1605), then 97..99 end at 1620
    assert p.total_ms == pytest.approx(1620)
    assert d["throughput_rps"] == pytest.approx(100 / 1.62)
    assert (d["nr_periods"], d["nr_throttled"], d["throttled_ms"]) == (16, 16, 16 * 70.0)


def test_the_original_0_3_run_with_its_network_time() -> None:
    # The original observed 14 % at 0.3 CPU with ~5 ms latency. If 0.8 ms of those 5.1 ms is
    # network and client (no quota), 30 / 4.3 = 6.98 requests fit: one in seven is stalled, and
    # the stalled one (sent at 30.6 ms, out of quota at 35.2 ms) ends at 100.5: 69.9 ms, as the
    # original's 69.8 ms.
    p = predict(Scenario(service_ms=4.3, cpus=0.3, overhead_ms=0.8))
    assert p.throttled_fraction == 0.14
    assert latencies(p)[6] == pytest.approx(69.9)
    assert max(latencies(p)) < 71


def test_5ms_at_0_1_cpu_every_other_request_waits_90ms() -> None:
    p = predict(Scenario(service_ms=5, cpus=0.1))
    lat = latencies(p)
    assert [i for i, x in enumerate(lat) if x > 5] == list(range(2, 100, 2))
    assert set(lat) == {5.0, 95.0}
    assert p.stall_ms == 90.0 and p.throttled_fraction == 0.49


def test_a_request_is_stopped_in_the_middle() -> None:
    # 7 ms at 0.3: four fit (28 ms); the fifth runs 2 ms, waits 70, runs 5: 77 ms. The next
    # period has 25 ms left after it: three more (21), the fourth runs 4 ms and waits.
    assert latencies(predict(Scenario(service_ms=7, cpus=0.3, requests=10))) == [
        7, 7, 7, 7, 77, 7, 7, 7, 77, 7]


def test_burst_lets_the_first_period_run_longer() -> None:
    # An idle service has saved 20 ms of burst: 50 ms in the first period (ten requests, the
    # eleventh waits 50 ms), then 30 ms per period as without burst.
    lat = latencies(predict(Scenario(service_ms=5, cpus=0.3, burst_ms=20, requests=20)))
    assert lat == [5.0] * 10 + [55.0] + [5.0] * 5 + [75.0] + [5.0] * 3


def test_concurrent_requests_share_one_core() -> None:
    p = predict(Scenario(service_ms=5, cpus=1, concurrency=2, requests=6))
    assert latencies(p) == [10.0] * 6  # two at a time on one core: each takes twice as long
    assert p.throughput_rps == pytest.approx(200)
    two_cores = predict(Scenario(service_ms=5, cpus=2, concurrency=2, cores=2, requests=6))
    assert latencies(two_cores) == [5.0] * 6 and two_cores.throughput_rps == pytest.approx(400)


def test_concurrency_on_two_cores_spends_the_quota_twice_as_fast() -> None:
    # Two requests on two cores use 2 ms of quota per ms: three pairs use the 30 ms by 15 ms,
    # the fourth pair waits until 100 (90 ms). Next period: the waiting pair (10 ms), two pairs.
    p = predict(Scenario(service_ms=5, cpus=0.3, concurrency=2, cores=2, requests=16))
    assert latencies(p) == [5.0] * 6 + [90.0] * 2 + [5.0] * 4 + [90.0] * 2 + [5.0] * 2
    assert [r.start_ns / MS for r in p.records][6:9] == [15.0, 15.0, 105.0]


def test_the_same_workload_gives_the_same_answer() -> None:
    w = Scenario(service_ms=3.3, cpus=0.25, period_ms=50, concurrency=3, overhead_ms=0.7,
                 requests=300)
    assert predict(w) == predict(w)


@settings(max_examples=40, deadline=None)
@given(service_us=st.integers(100, 40_000), quota_ms=st.integers(1, 100),
       period_ms=st.sampled_from([10, 50, 100, 250]), requests=st.integers(1, 60))
def test_sequential_prediction_is_the_quota_core_run_back_to_back(
        service_us: int, quota_ms: int, period_ms: int, requests: int) -> None:
    """One request at a time: the simulator must agree with QuotaAccount.run in a loop."""
    cpus = min(quota_ms, period_ms) / period_ms
    p = predict(Scenario(service_ms=service_us / 1000, cpus=cpus, period_ms=period_ms,
                         requests=requests))
    account = QuotaAccount(round(cpus * period_ms * MS), period_ms * MS)
    account.charge(1, 0)  # the same idle history as the model's
    t = start = 3 * period_ms * MS
    expected = []
    for _ in range(requests):
        r = account.run(service_us * 1000, t)
        expected.append((r.start_ns - start, r.end_ns - r.start_ns, r.paused_ns))
        t = r.end_ns
    got = [(r.start_ns, r.latency_ns, r.server_throttle_ns) for r in p.records]
    assert got == expected


@settings(max_examples=40, deadline=None)
@given(service_ms=st.floats(0.5, 30), cpus=st.floats(0.05, 2), concurrency=st.integers(1, 4),
       cores=st.integers(1, 4), overhead_ms=st.floats(0, 5))
def test_the_group_never_runs_more_than_its_quota(service_ms: float, cpus: float,
                                                  concurrency: int, cores: int,
                                                  overhead_ms: float) -> None:
    w = Scenario(service_ms=service_ms, cpus=cpus, concurrency=concurrency, cores=cores,
                 overhead_ms=overhead_ms, requests=40)
    p = predict(w)
    assert len(p.records) == 40 and sorted(r.seq for r in p.records) == list(range(40))
    periods = p.total_ms / w.period_ms + 2
    assert 40 * service_ms <= cpus * w.period_ms * periods + 1e-6
    assert all(r.latency_ns / MS >= service_ms + overhead_ms - 1e-6 for r in p.records)
    assert 0 <= p.throttled_fraction <= 1


@pytest.mark.parametrize("kwargs, message", [
    ({"service_ms": 0, "cpus": 1}, "service_ms"),
    ({"service_ms": 5, "cpus": -1}, "cpus"),
    ({"service_ms": 5, "cpus": float("nan")}, "cpus"),
    ({"service_ms": 5, "cpus": 1, "burst_ms": -1}, "--burst-ms"),
    ({"service_ms": 5, "cpus": 1, "period_ms": 0.5}, "--period-ms"),
    ({"service_ms": 5, "cpus": 1, "concurrency": 0}, "concurrency"),
    ({"service_ms": 5, "cpus": 1, "requests": 0}, "requests"),
    ({"service_ms": 5, "cpus": 1, "cores": 0}, "cores"),
    ({"service_ms": 60_000, "cpus": 0.01, "requests": 100_000}, "periods"),
])
def test_bad_workloads_are_refused_naming_the_field(kwargs: dict[str, float],
                                                    message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scenario(**kwargs)  # type: ignore[arg-type]
