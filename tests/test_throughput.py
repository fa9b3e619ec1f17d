"""Throughput rows and the scaling table, on hand-made records with known answers."""

from __future__ import annotations

import math

import pytest

from client.rawdata import RequestRecord
from client.throughput import format_throughput_table, throughput_row

MS = 1_000_000


def steady(count: int, every_ms: float, latency_ms: float, *, errors: int = 0,
           throttled: list[int] | None = None) -> list[RequestRecord]:
    """``count`` requests, one every ``every_ms``; the last ``errors`` of them failed."""
    out = []
    for i in range(count):
        failed = i >= count - errors
        out.append(RequestRecord(i, round(i * every_ms * MS), round(latency_ms * MS),
                                 500 if failed else 200, error="HTTP 500" if failed else "",
                                 kernel_nr_throttled=None if throttled is None else throttled[i]))
    return out


def test_row_numbers() -> None:
    # 10 requests every 100 ms, 10 ms each: from 0 to 910 ms
    row = throughput_row(steady(10, 100, 10, errors=1, throttled=[0] * 8 + [1, 1]))
    assert row.requests == 10 and row.errors == 1
    assert row.duration_s == pytest.approx(0.91)
    assert row.rps == pytest.approx(10 / 0.91)
    assert row.mean_ms == pytest.approx(10.0) and row.p95_ms == pytest.approx(10.0)
    assert row.error_rate == pytest.approx(0.1)
    assert row.throttled_fraction == pytest.approx(0.2)


def test_row_percentiles_and_unknown_throttling() -> None:
    records = steady(100, 10, 5)
    records[-1].latency_ns = 105 * MS  # one stall
    row = throughput_row(records)
    assert row.p95_ms == pytest.approx(5.0)
    assert row.p99_ms == pytest.approx(5 + 0.01 * 100)  # numpy's linear interpolation
    assert row.throttled_fraction is None  # the server said nothing


def test_row_of_only_failures() -> None:
    row = throughput_row(steady(3, 10, 1, errors=3))
    assert math.isnan(row.mean_ms) and row.error_rate == 1.0
    assert row.to_dict()["mean_ms"] is None


def test_table_has_a_row_per_limit_and_the_scaling_factor() -> None:
    slow = throughput_row(steady(10, 100, 10))        # ~11 rps
    fast = throughput_row(steady(20, 50, 10))         # ~21 rps
    table = format_throughput_table([("0.1 CPU", slow), ("0.2 CPU", fast)])
    lines = table.splitlines()
    assert lines[0].startswith("| limit | requests | RPS | vs previous | avg ms | p95 ms")
    assert len(lines) == 4
    assert lines[2].startswith("| 0.1 CPU | 10 | 11.0 |  | 10.0 |")
    factor = fast.rps / slow.rps
    assert f"| {factor:.2f}x |" in lines[3]
    assert lines[3].endswith("| 0.00 % | n/a |")
