"""Throttle detection (client.analysis.detect) on captures whose truth is known.

Synthetic captures come from the kernel accounting core (cpuquota.account) driven on a fake
clock: requests of a few ms CPU plus network time, sent back to back, optionally with the
runtime's own CPU bursts (a garbage collector) spending quota between requests, as in the
original's 0.1 CPU run. The truth is whether the core paused a request. The original's own
lines (its README) are checked as they were printed.
"""

from __future__ import annotations

import random

import pytest

from client.analysis.detect import detect
from client.analysis.period import DEFAULT_PERIOD_MS
from client.data.formats.legacy import parse_legacy_text
from client.data.record import RequestRecord
from client.data.summary import summarize
from cpuquota.limit import Limit
from tests.captures import MS, ORIGINAL_0_1, ORIGINAL_0_3, capture

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


def test_in_process_throttle_counts_every_pause_and_nothing_else() -> None:
    """The in-process throttle pauses only inside the handler: a request slowed by other work on
    the machine (no pause in its counters) is slow, not delayed by throttling, and the stall is
    the pauses'."""
    records = [RequestRecord(i, i * 80 * MS, 5 * MS, 200, server_throttle_ns=0)
               for i in range(40)]
    for i in range(5, 40, 7):   # paused ~65 ms by the throttle
        records[i].server_throttle_ns = 65 * MS
        records[i].latency_ns = 70 * MS
    for i in (2, 10, 20, 30):   # contention: 20 ms slower, no pause
        records[i].latency_ns = 25 * MS
    d = detect(records)
    assert d.throttled == tuple(r.server_throttle_ns > 0 for r in records)  # type: ignore[operator]
    assert d.source == "server counters"
    assert d.stall_ms == pytest.approx(65, abs=0.5)


def test_failed_requests_are_left_out() -> None:
    records = [RequestRecord(i, i * 6 * MS, 5 * MS, 200) for i in range(6)]
    records.append(RequestRecord(6, 40 * MS, 90 * MS, 0, error="ReadTimeout"))
    d = detect(records)
    assert d.count == 6 and d.throttled_count == 0
    empty = detect([RequestRecord(0, 0, 1, 0, error="refused")])
    assert empty.count == 0 and empty.throttled_fraction is None and empty.source == "none"


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
