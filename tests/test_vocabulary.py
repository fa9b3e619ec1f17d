"""One vocabulary: "periods throttled" is the kernel's periods, "delayed by throttling" is
requests, and every term the renderers print is explained in docs/explaining.md's "What the
words mean". The renderers are fed small synthetic runs (pure: no service, no kernel)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from client.analysis.cgroup import interval_stats
from client.analysis.detect import ThrottleSource
from client.analysis.explain import explain
from client.analysis.report import build_prediction, build_report
from client.analysis.throughput import throughput_row
from client.data.pace import fell_behind_words
from client.data.timeline import CgroupSample
from client.render.tables import (HEADER, comparison_rows, format_table,
                                  format_throughput_table)
from client.render.text import format_prediction_report, format_report
from client.render.watch import WatchRow, watch_table
from cpuquota.limit import Limit
from tests.runs import MS, limits, modelled

ROOT = Path(__file__).resolve().parent.parent

# a share or count of "throttled" with no noun: periods or requests? (the words issue 43 ended)
AMBIGUOUS = [re.compile(r"\d+(\.\d+)? ?%? throttled\b"), re.compile(r"\bthrottled %"),
             re.compile(r"^throttled:", re.MULTILINE)]


def glossary() -> str:
    """The "What the words mean" section of docs/explaining.md, lower-cased."""
    text = (ROOT / "docs" / "explaining.md").read_text()
    section = text.split("\n## What the words mean\n", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.lower().split())   # a term may wrap across lines


def counted_run():
    """60 sequential 5 ms requests at 0.3 CPU; the service's counters mark the stalled ones."""
    run = modelled("counted", 0.3, limits(0.3))
    records = [replace(r, server_cpu_ns=5 * MS,
                       kernel_nr_throttled=1 if r.latency_ns > 50 * MS else 0)
               for r in run.records]
    return replace(run, records=records)


def printed() -> str:
    """What report, report --predict, the comparison and throughput tables and watch print."""
    run = counted_run()
    report = build_report(run)
    limit = run.metadata.limit
    assert limit is not None
    prediction = build_prediction(run, limit)
    lines = [*format_report(report, run.path),
             *format_prediction_report(prediction, explain(report, prediction.prediction, limit),
                                       run.path, "x.png"),
             format_table(comparison_rows([run], [report])),
             format_throughput_table([("0.3 CPU", throughput_row(
                 run.records, report.detection.throttled_fraction))])]
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(10**9, 190_000_000, 10, 9, 720_000_000), Limit(0.2))
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/g", Limit(0.2), [WatchRow("12:00:01", 1.0, stats)], stats))
    console.file.close()
    return "\n".join([*lines, console.export_text()])


def test_the_requests_are_delayed_by_throttling_and_the_periods_throttled() -> None:
    text = printed()
    stalled = sum(1 for r in counted_run().records if r.kernel_nr_throttled)
    assert f"delayed by throttling: {stalled} of 60 requests ({100 * stalled / 60:.1f} %), " \
        "from the service's own counters (Server-Timing)" in text   # what marked them, and whose
    assert f"{100 * stalled / 60:.0f} % of requests delayed by throttling vs" in text
    assert "9 of 10 periods throttled (90 %)" in text      # watch's totals: the kernel's
    for pattern in AMBIGUOUS:
        assert not pattern.search(text), pattern.search(text)


@pytest.mark.parametrize("term", [
    # the report's lines and the predict table's rows
    "period", "quota", "periods throttled", "throttled time", "requests delayed by throttling",
    "slow", "stall", "fast mode", "baseline", "threshold", "saturated", "fell behind",
    "send lag", "server cpu per request", "outside the quota", "charged", "throughput",
    "p50", "p90", "p99", "mean", "measured", "predicted",
    # the report's cgroup section and watch's columns
    "% of the quota", "periods used 90 % of the quota", "busiest periods", "quota level",
    "cpu pressure (psi)",
    # where a period came from
    "inferred from stalls", "(limit)", "(default)",
])
def test_every_printed_term_is_in_the_glossary(term: str) -> None:
    assert term in glossary()


def test_every_source_of_the_marks_and_every_column_is_in_the_glossary() -> None:
    words = glossary()
    for source in ThrottleSource:
        assert f"`{source.value}`" in words   # the picture's legend prints it in brackets
    for column in HEADER[3:]:
        assert column.removesuffix(" ms") in words


def test_fell_behind_says_what_fell_behind() -> None:
    on_rate = {"asked_rps": 50, "achieved_rps": 50, "send_lag_p99_ms": 4.2}
    words = fell_behind_words(True, on_rate)
    assert words is not None and "sent 50 of the 50" not in words   # the rate was kept
    assert "lagged up to 4.2 ms (p99) behind schedule" in words
    short = fell_behind_words(True, {**on_rate, "achieved_rps": 40})
    assert short is not None and "it sent 40 of the 50 requests/s asked" in short
