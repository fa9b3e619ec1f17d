"""Throttle detection (client.detect) on captures whose truth is known.

Synthetic captures come from the kernel accounting core (service.quota) driven on a fake
clock: requests of a few ms CPU plus network time, sent back to back, optionally with the
runtime's own CPU bursts (a garbage collector) spending quota between requests, as in the
original's 0.1 CPU run. The truth is whether the core paused a request. The original's own
lines (its README) are checked as they were printed.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.detect import (DEFAULT_PERIOD_MS, detect, explain, idle_fraction, infer_period,
                           split_latencies)
from client.model import Limit, Workload, predict
from client.rawdata import RequestRecord, parse_legacy_text
from client.stats import summarize
from service.quota import QuotaAccount

MS = 1_000_000

# The original's lines (ace-container-cpu README), at 0.3 and 0.1 CPU.
ORIGINAL_0_3 = """26 Status code 200 time 5207306
31 Status code 200 time 5064695
36 Status code 200 time 4997000
41 Status code 200 time 4951787
154 Status code 200 time 69835568
257 Status code 200 time 69930524
""".splitlines()
ORIGINAL_0_1 = """0 Status code 200 time 5789193
5 Status code 200 time 5422345
2255 Status code 200 time 98318129
2353 Status code 200 time 196952396
2550 Status code 200 time 199268113
2749 Status code 200 time 99944350
2849 Status code 200 time 100614267
""".splitlines()


def capture(cpus: float, service_ms: float, *, n: int = 100, seed: int = 1,
            net_ms: float = 0.8, period_ms: float = 100, gc_ms: float = 0.0,
            gc_chance: float = 0.0, server_cpu: bool = False,
            legacy: bool = True) -> tuple[list[RequestRecord], list[bool]]:
    """A sequential run under a quota, and which requests the quota paused."""
    rng = random.Random(seed)
    period = round(period_ms * MS)
    account = QuotaAccount(round(cpus * period), period)
    t = 0
    records, truth = [], []
    for i in range(n):
        if gc_chance and rng.random() < gc_chance:  # the runtime's own CPU spends quota
            account.charge(round(gc_ms * MS * rng.uniform(0.5, 1.5)), t)
        cpu = round(service_ms * MS * rng.uniform(0.95, 1.08))
        r = account.run(cpu, t + round(net_ms / 2 * MS * rng.uniform(0.7, 1.3)))
        end = r.end_ns + round(net_ms / 2 * MS * rng.uniform(0.7, 1.3))
        start = t // MS * MS if legacy else t  # the original printed whole ms
        records.append(RequestRecord(i, start, end - t, 200,
                                     server_cpu_ns=cpu if server_cpu else None))
        truth.append(r.paused_ns > 0)
        t = end + rng.randint(50_000, 300_000)
    return records, truth


def test_the_original_0_3_lines() -> None:
    d = detect(parse_legacy_text(ORIGINAL_0_3))
    assert d.throttled == (False, False, False, False, True, True)
    assert d.source == "latency distribution"
    assert d.baseline_ms == pytest.approx(5.03, abs=0.01)
    assert d.stall_ms == pytest.approx(69.88 - 5.03, abs=0.01)
    assert (d.period_ms, d.period_source) == (DEFAULT_PERIOD_MS, "default")  # two stalls only


def test_the_original_0_1_lines_quantised_in_periods() -> None:
    d = detect(parse_legacy_text(ORIGINAL_0_1))
    assert d.throttled_count == 5 and d.throttled[:2] == (False, False)
    assert d.period_source == "inferred from stalls"
    assert d.period_ms == pytest.approx(100, abs=1.5)
    assert any("uncertain" in n for n in d.notes)  # two fast requests only


def test_0_3_cpu_capture_is_bimodal_and_one_in_seven_stalls() -> None:
    records, truth = capture(0.3, 4.3)
    d = detect(records)
    assert list(d.throttled) == truth and sum(truth) == 14
    assert d.period_ms == pytest.approx(100, abs=1)
    assert 60 < (d.stall_ms or 0) < 70
    assert d.idle_fraction is not None and d.idle_fraction < 0.1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_0_1_cpu_capture_with_the_runtime_burning_quota(seed: int) -> None:
    # Like the original 0.1 CPU run: ~100 and ~200 ms, "never 150", most requests stalled.
    records, truth = capture(0.1, 4.5, gc_ms=10, gc_chance=0.5, seed=seed)
    s = summarize(records)
    assert s.p50_ms > 90 and s.p90_ms > 190  # the shape of the original
    d = detect(records)
    assert list(d.throttled) == truth and sum(truth) > 60
    assert d.period_ms == pytest.approx(100, abs=1)


def test_one_cpu_capture_has_no_throttling() -> None:
    records, truth = capture(1.0, 5.0)
    d = detect(records)
    assert not any(truth) and d.throttled_count == 0 and d.throttled_fraction == 0
    assert d.stall_ms is None and d.period_source == "default"
    assert d.baseline_ms == pytest.approx(summarize(records).p50_ms)


def test_server_cpu_settles_the_baseline_when_all_are_throttled() -> None:
    # 0.05 CPU, 6 ms: every request waits at least one period; no fast mode to find.
    records, truth = capture(0.05, 6.0, server_cpu=True, n=40, legacy=False)
    assert all(truth[1:])
    d = detect(records, limit=Limit(0.05))
    assert list(d.throttled) == truth
    assert d.service_source == "server CPU per request"
    assert d.service_ms == pytest.approx(6 * 1.015, rel=0.05)


def contended(low_ms: float, high_ms: float, n: int = 40) -> list[RequestRecord]:
    """Another program keeps the CPU busy: 1.4 ms of work takes low..high ms, at random."""
    rng = random.Random(7)
    t, records = 0, []
    for i in range(n):
        latency = round(rng.uniform(low_ms, high_ms) * MS)
        records.append(RequestRecord(i, t, latency, 200, server_cpu_ns=1_400_000))
        t += latency + 100_000
    return records


def test_contention_is_not_throttling() -> None:
    assert detect(contended(8, 30), limit=Limit(0.3)).throttled_count == 0  # no gap: one mode
    # far slower than the work, as if every request were throttled, but not in period steps
    d = detect(contended(60, 140), limit=Limit(0.3))
    assert d.throttled_count == 0 and any("contention" in n for n in d.notes)
    unknown = detect(contended(60, 140))  # without the limit: not throttling, but uncertain
    assert unknown.throttled_count == 0


def test_steady_slow_requests_are_throttled_only_on_the_limits_period() -> None:
    # Every request takes 12 ms for 1.4 ms of work: the ends line up on a 12 ms grid, which
    # is not the limit's 100 ms period: contention, not a quota.
    records = [RequestRecord(i, i * 12 * MS, 12 * MS, 200, server_cpu_ns=1_400_000)
               for i in range(50)]
    assert detect(records, limit=Limit(0.3)).throttled_count == 0
    # 0.05 CPU, 6 ms of work: every request waits for the next 100 ms period
    slow, truth = capture(0.05, 6.0, server_cpu=True, n=40, legacy=False)
    assert detect(slow, limit=Limit(0.05)).throttled_count == sum(truth)


def test_a_run_without_a_limit_is_never_throttled_by_latency() -> None:
    records, truth = capture(0.3, 4.3)
    assert detect(records, unlimited=True).throttled_count == 0
    records[3].kernel_nr_throttled = 2  # the server's counters still count
    assert detect(records, unlimited=True).throttled_count == 1


def test_server_counters_are_used_and_the_stalls_they_miss_added() -> None:
    records = [RequestRecord(i, i * 10 * MS, 5 * MS, 200, kernel_nr_throttled=0)
               for i in range(20)]
    records[5].latency_ns = records[5].kernel_throttled_ns = 70 * MS
    records[5].kernel_nr_throttled = 1
    records[12].latency_ns = 71 * MS  # stalled before the handler: the counters saw nothing
    d = detect(records)
    assert d.throttled_count == 2 and d.source == "server counters + latency"
    assert any("before the handler" in n for n in d.notes)
    concurrent = detect(records, sequential=False)
    assert concurrent.throttled_count == 1 and concurrent.source == "server counters"
    records[12].latency_ns = 5 * MS
    assert detect(records).source == "server counters"


def test_in_process_throttle_pause_counts() -> None:
    records = [RequestRecord(i, i * 6 * MS, 5 * MS, 200, server_throttle_ns=0)
               for i in range(10)]
    records[3].server_throttle_ns = 2 * MS  # a short pause: not seen in the latencies
    records[3].latency_ns = 7 * MS
    d = detect(records)
    assert d.throttled == tuple(i == 3 for i in range(10))


def test_failed_requests_are_left_out() -> None:
    records = [RequestRecord(i, i * 6 * MS, 5 * MS, 200) for i in range(6)]
    records.append(RequestRecord(6, 40 * MS, 90 * MS, 0, error="ReadTimeout"))
    d = detect(records)
    assert d.count == 6 and d.throttled_count == 0
    empty = detect([RequestRecord(0, 0, 1, 0, error="refused")])
    assert empty.count == 0 and empty.throttled_fraction is None and empty.source == "none"


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


def test_explain_the_0_1_cpu_gap() -> None:
    records, _ = capture(0.1, 4.5, gc_ms=10, gc_chance=0.5)
    d = detect(records)
    measured = {**summarize(records).to_dict(), "throttled_fraction": d.throttled_fraction,
                "stall_ms": d.stall_ms, "throughput_rps": d.throughput_rps}
    assert d.service_ms is not None
    prediction = predict(Workload(service_ms=d.service_ms, cpus=0.1))
    lines = explain(d, measured, prediction, Limit(0.1))
    text = " ".join(lines)
    assert lines[0].startswith("The run did worse than the model")
    charged = 100 / (d.throughput_rps or 1)
    assert f"charged about {charged:.1f} ms of quota" in text
    assert 8 < charged < 12  # ~4.5 ms of work + ~5 ms of the runtime's CPU per request
    assert "no server-side CPU per request" in text


def test_explain_agreement_and_gaps() -> None:
    records, _ = capture(0.3, 4.3)
    d = detect(records)
    measured = {**summarize(records).to_dict(), "throttled_fraction": d.throttled_fraction,
                "stall_ms": d.stall_ms, "throughput_rps": d.throughput_rps}
    prediction = predict(Workload(service_ms=4.3, cpus=0.3, overhead_ms=0.8 + 0.175))
    assert explain(d, measured, prediction, Limit(0.3))[0].startswith("The run agrees")
    excerpt = detect(parse_legacy_text(ORIGINAL_0_3))
    m = {**summarize(parse_legacy_text(ORIGINAL_0_3)).to_dict(),
         "throttled_fraction": excerpt.throttled_fraction, "stall_ms": excerpt.stall_ms,
         "throughput_rps": excerpt.throughput_rps}
    lines = explain(excerpt, m, predict(Workload(service_ms=5, cpus=0.3, requests=6)),
                    Limit(0.3))
    assert any("not sent back to back" in line for line in lines)
    assert explain(detect([]), {"mean_ms": None}, prediction, Limit(0.3)) == [
        "not enough successful requests to compare with the model"]


def test_charged_quota_per_request_only_when_the_run_spent_all_of_it() -> None:
    records, _ = capture(0.3, 4.3)  # a stall in every period: all the quota is spent
    d = detect(records)
    assert d.quota_bound
    charged = d.charged_ms(0.3)
    assert charged is not None and charged == pytest.approx(4.3 * 1.015, rel=0.05)
    # the same requests at 1 CPU: no stall, nothing to read from the throughput
    assert detect(capture(1.0, 4.3)[0]).charged_ms(1.0) is None
    # one stall in a run of ten periods: the quota was not the bottleneck
    sparse = [RequestRecord(i, i * 20 * MS, 5 * MS, 200) for i in range(50)]
    sparse[10].latency_ns = 75 * MS
    lone = detect(sparse)
    assert lone.throttled_count == 1 and not lone.quota_bound and lone.charged_ms(0.3) is None
