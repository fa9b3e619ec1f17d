"""Throughput of a run and the scaling table of a load sweep (pure: records in, numbers out).

The seeds' throughput-scaling test (the CpuThrottler's ops/s at 1/2/4/8 %, the Yatagarasu
report's ``docker --cpus`` sweep): one row per limit with requests per second, average, p95
and p99 latency, error rate, and here also the share of requests the server said were
throttled and how throughput grew from the previous row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from client.rawdata import RequestRecord
from client.stats import percentile, summarize

__all__ = ["ThroughputRow", "format_throughput_table", "throughput_row"]


@dataclass(frozen=True)
class ThroughputRow:
    """``rps``: completed requests per second of run time (first send, or intended send in an
    open loop, to the end of the last response); latencies over the successful requests."""

    requests: int
    errors: int
    duration_s: float
    rps: float
    mean_ms: float
    p95_ms: float
    p99_ms: float
    error_rate: float
    throttled_fraction: float | None  # from the server's counters; None when it cannot tell

    def to_dict(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}


def throughput_row(records: Sequence[RequestRecord]) -> ThroughputRow:
    summary = summarize(records)
    duration_s = summary.total_ms / 1e3
    ok = [r.latency_ms for r in records if r.ok]
    nan = float("nan")
    known = [r.server_throttled for r in records if r.server_throttled is not None]
    return ThroughputRow(
        requests=len(records),
        errors=summary.errors,
        duration_s=duration_s,
        rps=len(records) / duration_s if duration_s > 0 else nan,
        mean_ms=summary.mean_ms,
        p95_ms=percentile(ok, 95),
        p99_ms=percentile(ok, 99),
        error_rate=summary.errors / len(records) if records else nan,
        throttled_fraction=(sum(known) / len(known)) if known else None,
    )


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{fmt}}{suffix}"


def format_throughput_table(rows: Sequence[tuple[str, ThroughputRow]]) -> str:
    """A Markdown table, one row per ``(limit label, row)``, in the order given."""
    lines = ["| limit | requests | RPS | vs previous | avg ms | p95 ms | p99 ms | error rate "
             "| throttled |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    previous: float | None = None
    for label, row in rows:
        throttled = None if row.throttled_fraction is None else 100 * row.throttled_fraction
        factor = (f"{row.rps / previous:.2f}x" if previous and previous > 0
                  and math.isfinite(row.rps) else "")
        lines.append(
            f"| {label} | {row.requests} | {_num(row.rps, ',.1f')} | {factor} "
            f"| {_num(row.mean_ms, '.1f')} | {_num(row.p95_ms, '.1f')} "
            f"| {_num(row.p99_ms, '.1f')} | {_num(100 * row.error_rate, '.2f', ' %')} "
            f"| {_num(throttled, '.0f', ' %')} |")
        previous = row.rps if math.isfinite(row.rps) else None
    return "\n".join(lines) + "\n"
