"""client.render.tables: the comparison table (text, Markdown) and the throughput table."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from client.analysis.report import build_report
from client.analysis.throughput import throughput_row
from client.data.files import Run
from client.data.record import RequestRecord
from client.render.tables import (ComparisonRow, comparison_rows, format_markdown, format_table,
                                  format_throughput_table)
from tests.runs import MS, limits, modelled, run_of


def rows_of(runs: Sequence[Run]) -> list[ComparisonRow]:
    return comparison_rows(runs, [build_report(run) for run in runs])


def test_rows_have_the_limit_percentiles_and_throttled_share() -> None:
    runs = [modelled("one", 1, limits(1)), modelled("point3", 0.3, limits(0.3)),
            modelled("inproc", 0.1, limits(None, inprocess=10))]
    rows = rows_of(runs)
    assert [r.name for r in rows] == ["one", "point3", "inproc"]
    assert [r.limit for r in rows] == ["1 CPU (kernel)", "0.3 CPU (kernel)",
                                       "0.1 CPU (in-process)"]
    assert rows[0].throttled_fraction == 0 and rows[0].p99_ms == pytest.approx(5)
    # 5 ms at 0.3 CPU: seq 6, 12, ..., 54 stall (9 of 60); at 0.1 every other one
    assert rows[1].throttled_fraction == pytest.approx(9 / 60)
    assert rows[1].max_ms == pytest.approx(75) and rows[1].p50_ms == pytest.approx(5)
    assert rows[2].throttled_fraction == pytest.approx(29 / 60)
    assert all(r.count == 60 for r in rows)


def test_table_and_markdown() -> None:
    rows = rows_of([modelled("a|b", 0.3, limits(0.3)), run_of("capture", [5.1, 5.3])])
    text = format_table(rows).splitlines()
    assert text[0].split() == ["run", "limit", "requests", "p50", "ms", "p90", "ms", "p99",
                               "ms", "max", "ms", "delayed", "by", "throttling"]
    assert text[1].split()[:4] == ["a|b", "0.3", "CPU", "(kernel)"]
    # latency alone (no counter in these runs): the share is of slow requests
    assert text[1].endswith("15 % slow") and text[2].endswith("0 % slow")
    md = format_markdown(rows).splitlines()
    assert md[0] == ("| run | limit | requests | p50 ms | p90 ms | p99 ms | max ms "
                     "| delayed by throttling |")
    assert md[1] == "|---|---|---:|---:|---:|---:|---:|---:|"
    assert md[2].startswith("| a\\|b | 0.3 CPU (kernel) | 60 | 5.0 | 75.0 |")
    assert md[3] == "| capture | unknown | 2 | 5.2 | 5.3 | 5.3 | 5.3 | 0 % slow |"


def steady(count: int, every_ms: float, latency_ms: float) -> list[RequestRecord]:
    return [RequestRecord(i, round(i * every_ms * MS), round(latency_ms * MS), 200)
            for i in range(count)]


def test_table_has_a_row_per_limit_and_the_scaling_factor() -> None:
    slow = throughput_row(steady(10, 100, 10), None)        # ~11 rps
    fast = throughput_row(steady(20, 50, 10), None)         # ~21 rps
    table = format_throughput_table([("0.1 CPU", slow), ("0.2 CPU", fast)])
    lines = table.splitlines()
    assert lines[0].startswith("| limit | requests | RPS | vs previous | avg ms | p95 ms")
    assert len(lines) == 4
    assert lines[2].startswith("| 0.1 CPU | 10 | 11.0 |  | 10.0 |")
    factor = fast.rps / slow.rps
    assert f"| {factor:.2f}x |" in lines[3]
    assert lines[3].endswith("| 0.00 % | n/a |")
