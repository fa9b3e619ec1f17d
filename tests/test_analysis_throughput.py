"""Throughput rows and the scaling table, on hand-made records with known answers."""

from __future__ import annotations

import math

import pytest

from client.data.record import RequestRecord
from client.analysis.throughput import throughput_row, throughput_rps

MS = 1_000_000


def steady(count: int, every_ms: float, latency_ms: float, *, errors: int = 0
           ) -> list[RequestRecord]:
    """``count`` requests, one every ``every_ms``; the last ``errors`` of them failed."""
    out = []
    for i in range(count):
        failed = i >= count - errors
        out.append(RequestRecord(i, round(i * every_ms * MS), round(latency_ms * MS),
                                 500 if failed else 200, error="HTTP 500" if failed else ""))
    return out


def test_row_numbers() -> None:
    # 10 requests every 100 ms, 10 ms each: from 0 to 910 ms
    row = throughput_row(steady(10, 100, 10, errors=1), 0.2)
    assert row.requests == 10 and row.errors == 1
    assert row.duration_s == pytest.approx(0.91)
    assert row.rps == pytest.approx(9 / 0.91)  # successful requests per second
    assert row.mean_ms == pytest.approx(10.0) and row.p95_ms == pytest.approx(10.0)
    assert row.error_rate == pytest.approx(0.1)
    assert row.throttled_fraction == pytest.approx(0.2)


def test_row_percentiles_and_unknown_throttling() -> None:
    records = steady(100, 10, 5)
    records[-1].latency_ns = 105 * MS  # one stall
    row = throughput_row(records, None)
    assert row.p95_ms == pytest.approx(5.0)
    assert row.p99_ms == pytest.approx(5 + 0.01 * 100)  # numpy's linear interpolation
    assert row.throttled_fraction is None


def test_row_of_only_failures() -> None:
    row = throughput_row(steady(3, 10, 1, errors=3), None)
    assert math.isnan(row.mean_ms) and row.error_rate == 1.0
    assert row.to_dict()["mean_ms"] is None


def test_one_definition_of_throughput() -> None:
    """Successful requests per second, from the first (intended) send to the last answer."""
    assert throughput_rps([]) is None
    assert throughput_rps(steady(1, 10, 0)) is None  # no span
    assert throughput_rps(steady(10, 100, 10)) == pytest.approx(10 / 0.91)
    late = [RequestRecord(0, 0, 10 * MS, 200, scheduled_ns=0),
            RequestRecord(1, 90 * MS, 100 * MS, 200, scheduled_ns=50 * MS)]
    assert throughput_rps(late) == pytest.approx(2 / 0.15)  # from 0 to 50 + 100 ms
