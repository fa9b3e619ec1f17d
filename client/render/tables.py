"""Tables of runs: the comparison table (plain text and Markdown) and the throughput-scaling
table of a load sweep. Every number comes from a run's :class:`client.analysis.report.Report`
(the share of requests delayed by throttling is its detection's; from latency alone, with no
counter that says so, the share is of *slow* requests and its cells say so)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from client.analysis.replicas import ReplicaRow
from client.analysis.report import Report
from client.analysis.throughput import ThroughputRow
from client.data.files import Run

__all__ = ["HEADER", "ComparisonRow", "comparison_rows", "format_markdown", "format_table",
           "format_replicas_table", "format_throughput_table", "md_escape"]

HEADER = ["run", "limit", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms",
          "delayed by throttling"]


@dataclass(frozen=True)
class ComparisonRow:
    name: str
    limit: str
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    throttled_fraction: float | None
    marked_as: str = "delayed by throttling"   # or "slow": from latency alone (Detection)

    def cells(self) -> list[str]:
        def ms(v: float) -> str:
            return "n/a" if v != v else f"{v:.1f}"
        slow = " slow" if self.marked_as == "slow" else ""
        throttled = ("n/a" if self.throttled_fraction is None
                     else f"{100 * self.throttled_fraction:.0f} %{slow}")
        return [self.name, self.limit, str(self.count), ms(self.p50_ms), ms(self.p90_ms),
                ms(self.p99_ms), ms(self.max_ms), throttled]


def comparison_rows(runs: Sequence[Run], reports: Sequence[Report]) -> list[ComparisonRow]:
    """One row per run (name, limit, requests, p50/p90/p99/max, share of requests delayed by
    throttling)."""
    rows = []
    for run, report in zip(runs, reports):
        s = report.summary
        rows.append(ComparisonRow(run.name, run.metadata.limit_label(), s.count, s.p50_ms,
                                  s.p90_ms, s.p99_ms, s.max_ms,
                                  report.detection.throttled_fraction,
                                  report.detection.marked_as))
    return rows


def format_table(rows: Sequence[ComparisonRow]) -> str:
    """Aligned plain text (numbers right-aligned)."""
    table = [HEADER, *(r.cells() for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    out = []
    for line in table:
        out.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(line, widths))).rstrip())
    return "\n".join(out)


def md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def format_markdown(rows: Sequence[ComparisonRow]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |",
             "|" + "|".join(["---", "---"] + ["---:"] * (len(HEADER) - 2)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(md_escape(c) for c in row.cells()) + " |")
    return "\n".join(lines) + "\n"


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{fmt}}{suffix}"


def format_throughput_table(rows: Sequence[tuple[str, ThroughputRow]]) -> str:
    """A Markdown table, one row per ``(limit label, row)``, in the order given."""
    lines = ["| limit | requests | RPS | vs previous | avg ms | p95 ms | p99 ms | error rate "
             "| delayed by throttling |",
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


def format_replicas_table(rows: Sequence[ReplicaRow]) -> str:
    """A Markdown table of a replica sweep: measured beside the model's prediction."""
    lines = ["| replicas | CPU each | requests/s | p50 ms | p90 ms | p99 ms "
             "| delayed by throttling | answered by | model p50 / p99 ms "
             "| model: delayed by throttling | start s | memory each |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        model = row.predicted
        lines.append(
            f"| {row.replicas} | {_num(row.cpus_each, 'g')} | {_num(row.throughput_rps, ',.1f')} "
            f"| {_num(row.p50_ms, '.1f')} | {_num(row.p90_ms, '.1f')} "
            f"| {_num(row.p99_ms, '.1f')} | {_percent(row.throttled_fraction)} "
            f"| {row.answered_by} "
            f"| {_num(model.percentile(50) if model else None, '.1f')} / "
            f"{_num(model.percentile(99) if model else None, '.1f')} "
            f"| {_percent(model.throttled_fraction if model else None)} "
            f"| {_num(row.start_s, '.1f')} | {_num(row.rss_mib, '.0f', ' MiB')} |")
    return "\n".join(lines) + "\n"


def _percent(fraction: float | None) -> str:
    return _num(None if fraction is None else 100 * fraction, ".0f", " %")
