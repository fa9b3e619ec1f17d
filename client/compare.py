"""Several runs side by side: stacked dot plots on one time axis, one latency CDF, one table.

``compare_runs(runs)`` gives one :class:`ComparisonRow` per run (limit, p50, p90, p99, max,
throttled %); ``format_table`` prints them, ``format_markdown`` is the same table for a
README, and ``save_comparison`` draws the picture and writes the Markdown next to it
(``pictures/x.png`` -> ``pictures/x.md``). ``plot_overlay`` draws a measured run and the
model's prediction for it on the same axes (``http-timing report --predict``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from client.detect import Detection, detect
from client.model import Limit, limit_from_metadata
from client.plot import COLOURS, pyplot, save_figure
from client.rawdata import Run
from client.stats import summarize

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ComparisonRow", "compare_runs", "detect_run", "draw_detected", "format_markdown",
           "format_table", "limit_label", "plot_comparison", "plot_overlay", "save_comparison",
           "sequential"]

PREDICTION_COLOURS = ("#2ca02c", "#9467bd", "#8c564b")
CDF_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf")


def sequential(run: Run) -> bool:
    """Whether the run sent one request at a time (the original's mode; text captures too)."""
    meta = run.metadata
    mode = meta.get("mode") or "sequential"
    concurrency = meta.get("concurrency")
    one = not isinstance(concurrency, int) or concurrency <= 1
    return mode == "sequential" or (mode == "closed-loop" and one)


def limit_label(run: Run) -> str:
    """``0.3 CPU (kernel)``; ``none`` for a run of ours without a limit; ``unknown`` for a
    text capture (no metadata)."""
    limit = limit_from_metadata(run.metadata)
    if limit is not None:
        return limit.label()
    if isinstance(run.metadata.get("limits"), dict):
        return "none"
    return str(run.metadata.get("limit") or "unknown")


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

    def cells(self) -> list[str]:
        def ms(v: float) -> str:
            return "n/a" if v != v else f"{v:.1f}"
        throttled = ("n/a" if self.throttled_fraction is None
                     else f"{100 * self.throttled_fraction:.0f} %")
        return [self.name, self.limit, str(self.count), ms(self.p50_ms), ms(self.p90_ms),
                ms(self.p99_ms), ms(self.max_ms), throttled]


HEADER = ["run", "limit", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms", "throttled"]


def compare_runs(runs: Sequence[Run]) -> list[ComparisonRow]:
    rows = []
    for run in runs:
        s = summarize(run.records)
        d = detect_run(run)
        rows.append(ComparisonRow(run.name, limit_label(run), s.count, s.p50_ms, s.p90_ms,
                                  s.p99_ms, s.max_ms, d.throttled_fraction))
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


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def format_markdown(rows: Sequence[ComparisonRow]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |",
             "|" + "|".join(["---", "---"] + ["---:"] * (len(HEADER) - 2)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_md_escape(c) for c in row.cells()) + " |")
    return "\n".join(lines) + "\n"


def draw_cdf(ax: Axes, label: str, latencies_ms: Sequence[float], colour: str,
             linestyle: str = "-") -> None:
    values = np.sort(np.asarray(latencies_ms, dtype=float))
    if values.size == 0:
        return
    fraction = np.arange(1, values.size + 1) / values.size
    ax.step(values, fraction, where="post", color=colour, linestyle=linestyle, linewidth=1.8,
            label=f"{label} ({values.size})")


def _style_cdf(ax: Axes, all_latencies: Sequence[float]) -> None:
    ax.set_xlabel("request latency (ms, log scale)", fontsize=12)
    ax.set_ylabel("fraction of requests at or below", fontsize=12)
    positive = [v for v in all_latencies if v > 0]
    if positive and max(positive) / min(positive) > 5:
        from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=10)
    ax.set_title("latency CDF", fontsize=12)


def draw_detected(ax: Axes, run: Run, detection: Detection, *, label_prefix: str = "") -> None:
    """Dots for one run: successful requests, the throttled ones (as detected: the server's
    counters or the latency distribution) in their own colour, failed ones as red crosses."""
    ok = sorted((r for r in run.records if r.ok), key=lambda r: (r.start_ns, r.seq))
    groups: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in COLOURS}
    for record, throttled in zip(ok, detection.throttled):
        kind = "throttled" if throttled else "ok"
        groups[kind][0].append(record.start_ns / 1e9)
        groups[kind][1].append(record.latency_ms)
    for record in run.records:
        if not record.ok:
            groups["failed"][0].append(record.start_ns / 1e9)
            groups["failed"][1].append(record.latency_ms)
    labels = {"ok": "request", "throttled": f"throttled ({detection.source})",
              "failed": "failed"}
    for kind, (xs, ys) in groups.items():
        if xs:
            ax.scatter(xs, ys, s=22, c=COLOURS[kind], marker="x" if kind == "failed" else "o",
                       alpha=0.85, linewidths=1.2,
                       label=f"{label_prefix}{labels[kind]} ({len(xs)})")


def detect_run(run: Run, limit: Limit | None = None) -> Detection:
    """``detect`` with what the run's metadata says: one request at a time or not, the limit
    in force (``limit`` overrides it), or that our service saw none."""
    limit = limit if limit is not None else limit_from_metadata(run.metadata)
    return detect(run.records, sequential=sequential(run), limit=limit,
                  unlimited=limit is None and isinstance(run.metadata.get("limits"), dict))


def plot_comparison(runs: Sequence[Run], out: Path, title: str | None = None) -> Path:
    """One dot plot per run, stacked on a shared time axis (and a shared latency axis, so a
    limit's stalls are seen at their true size), and one CDF of all runs on the right."""
    if not runs:
        raise ValueError("no runs to compare")
    n = len(runs)
    plt = pyplot()
    fig = plt.figure(figsize=(15, max(5.0, 2.6 * n + 1.2)), dpi=100)
    try:
        grid = fig.add_gridspec(n, 2, width_ratios=(2.2, 1))
        first: Axes | None = None
        all_latencies: list[float] = []
        cdf_ax = fig.add_subplot(grid[:, 1])
        for i, run in enumerate(runs):
            ax = fig.add_subplot(grid[i, 0], sharex=first, sharey=first)
            first = first or ax
            detection = detect_run(run)
            draw_detected(ax, run, detection)
            share = detection.throttled_fraction
            ax.set_title(f"{run.name}: limit {limit_label(run)}"
                         + (f", {100 * share:.0f} % throttled" if share is not None else ""),
                         fontsize=11, loc="left")
            ax.set_ylabel("latency (ms)", fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(loc="upper right", fontsize=8)
            if i < n - 1:
                ax.tick_params(labelbottom=False)
            ok = [r.latency_ms for r in run.records if r.ok]
            all_latencies.extend(ok)
            draw_cdf(cdf_ax, run.name, ok, CDF_COLOURS[i % len(CDF_COLOURS)])
        assert first is not None
        first.set_ylim(bottom=0)
        fig.axes[-1].set_xlabel("time since start of run (s)", fontsize=11)
        _style_cdf(cdf_ax, all_latencies)
        if title:
            fig.suptitle(title, fontsize=13)
        save_figure(fig, out)
    finally:
        plt.close(fig)
    return out


def save_comparison(runs: Sequence[Run], out: Path,
                    title: str | None = None) -> tuple[Path, Path, list[ComparisonRow]]:
    """Draw the picture at ``out`` and write its table as Markdown next to it (``.md``)."""
    rows = compare_runs(runs)
    picture = plot_comparison(runs, out, title)
    markdown = out.with_suffix(".md")
    caption = f"![{_md_escape(title or 'comparison')}]({out.name})\n\n"
    markdown.write_text(caption + format_markdown(rows), encoding="utf-8")
    return picture, markdown, rows


def plot_overlay(measured: Run, predicted: Sequence[tuple[str, Run]], detection: Detection,
                 out: Path, title: str | None = None) -> Path:
    """The measured run's dots and each prediction's (hollow) on one time axis, and all CDFs."""
    plt = pyplot()
    fig, (ax, cdf_ax) = plt.subplots(1, 2, figsize=(15, 6.5), dpi=100,
                                     gridspec_kw={"width_ratios": (2.2, 1)})
    try:
        draw_detected(ax, measured, detection, label_prefix="measured: ")
        measured_ok = [r.latency_ms for r in measured.records if r.ok]
        draw_cdf(cdf_ax, "measured", measured_ok, "#1f77b4")
        everything = list(measured_ok)
        for i, (label, run) in enumerate(predicted):
            colour = PREDICTION_COLOURS[i % len(PREDICTION_COLOURS)]
            xs = [r.start_ns / 1e9 for r in run.records]
            ys = [r.latency_ms for r in run.records]
            ax.scatter(xs, ys, s=46 + 30 * i, facecolors="none", edgecolors=colour,
                       linewidths=1.3, label=f"{label} ({len(xs)})")
            draw_cdf(cdf_ax, label, ys, colour, linestyle="--" if i == 0 else ":")
            everything.extend(ys)
        ax.set_xlabel("time since start of run (s)", fontsize=12)
        ax.set_ylabel("request latency (ms)", fontsize=12)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=10)
        ax.set_title(title or f"{measured.name}: measured and predicted", fontsize=12)
        if (detection.threshold_ms is not None and math.isfinite(detection.threshold_ms)
                and "latency" in detection.source):
            cdf_ax.axvline(detection.threshold_ms, color="#ff7f0e", linestyle=":",
                           label=f"throttled above {detection.threshold_ms:.1f} ms")
        _style_cdf(cdf_ax, everything)
        save_figure(fig, out)
    finally:
        plt.close(fig)
    return out
