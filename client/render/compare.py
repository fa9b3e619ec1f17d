"""Several runs in one picture: stacked dot plots, each on its own time axis, and one latency
CDF; and a measured run over the model's predictions for it (``http-timing report --predict``).

``save_comparison`` draws the picture and writes its table as Markdown next to it
(``pictures/x.png`` -> ``pictures/x.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from client.analysis.detect import Detection
from client.analysis.report import Report, build_report
from client.data.files import Run, writing
from client.data.naming import limit_text, short_names
from client.data.record import RequestRecord
from client.render.figures import draw_detected, log_scale, pyplot, requests, save_figure
from client.render.legend import legend_outside
from client.render.tables import ComparisonRow, comparison_rows, format_markdown, md_escape

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["cdf_labels", "comparison_figure", "draw_cdf", "plot_comparison", "plot_overlay",
           "save_comparison"]

PREDICTION_COLOURS = ("#2ca02c", "#9467bd", "#8c564b")
CDF_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf")


def draw_cdf(ax: Axes, label: str, latencies_ms: Sequence[float], colour: str,
             linestyle: str = "-") -> None:
    values = np.sort(np.asarray(latencies_ms, dtype=float))
    if values.size == 0:
        return
    fraction = np.arange(1, values.size + 1) / values.size
    ax.step(values, fraction, where="post", color=colour, linestyle=linestyle, linewidth=1.8,
            label=f"{label} ({requests(values.size)})")


def cdf_labels(runs: Sequence[Run]) -> list[str]:
    """Each run in the CDF's legend: ``0.3 CPU`` when the runs' names differ only by their
    limits (a sweep), else the name without the prefix all share and its limit
    (``a: 0.3 CPU``); each row's title keeps the whole name."""
    short = short_names([run.name for run in runs])
    limits = [run.metadata.limit for run in runs]
    texts = [limit_text(limit) if limit or run.metadata.limits_known else None
             for run, limit in zip(runs, limits)]
    tags = ["none" if limit is None else f"{limit.cpus:g}" for limit in limits]
    if all(texts) and short == tags and len(runs) > 1:
        return [str(text) for text in texts]
    return [f"{name}: {text}" if text else name for name, text in zip(short, texts)]


def _style_cdf(ax: Axes, all_latencies: Sequence[float]) -> None:
    ax.set_xlabel("request latency (ms, log scale)", fontsize=12)
    ax.set_ylabel("fraction of requests at or below", fontsize=12)
    positive = [v for v in all_latencies if v > 0]
    if positive and max(positive) / min(positive) > 5:
        log_scale(ax, "x")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3, which="both")
    legend_outside(ax, 10, below=True)
    ax.set_title("latency CDF", fontsize=12)


def comparison_figure(runs: Sequence[Run], title: str | None = None,
                      reports: Sequence[Report] | None = None) -> Figure:
    """One dot plot per run, stacked, each on its own time axis (its dots fill its width)
    and all on a shared latency axis (a limit's stalls at their true size), and one CDF of
    all runs on the right (the last axes). The caller closes it."""
    if not runs:
        raise ValueError("no runs to compare")
    reports = list(reports) if reports is not None else [build_report(run) for run in runs]
    n = len(runs)
    fig = pyplot().figure(figsize=(15, max(5.0, 2.6 * n + 1.2)), dpi=100)
    # the middle column is the rows' legends' room
    grid = fig.add_gridspec(n, 3, width_ratios=(2.0, 0.95, 1))
    first: Axes | None = None
    all_latencies: list[float] = []
    rows = [fig.add_subplot(grid[i, 0]) for i in range(n)]
    cdf_ax = fig.add_subplot(grid[:, 2])
    labels = cdf_labels(runs)
    for i, (ax, run, report) in enumerate(zip(rows, runs, reports)):
        if first is not None:
            ax.sharey(first)
        first = first or ax
        draw_detected(ax, run, report.detection)
        share = report.detection.throttled_fraction
        ax.set_title(f"{run.name}: limit {run.metadata.limit_label()}"
                     + (f", {100 * share:.0f} % of requests {report.detection.marked_as}"
                        if share is not None else ""), fontsize=11, loc="left")
        ax.set_ylabel("latency (ms)", fontsize=10)
        ax.grid(True, alpha=0.3)
        legend = legend_outside(ax, 8, wrap=44)
        if legend is not None:
            legend.set_in_layout(False)   # it has the middle column to itself
        ok = [r.latency_ms for r in run.records if r.ok]
        all_latencies.extend(ok)
        draw_cdf(cdf_ax, labels[i], ok, CDF_COLOURS[i % len(CDF_COLOURS)])
    rows[0].set_ylim(bottom=0)
    rows[-1].set_xlabel("time since start of each run (s)", fontsize=11)
    _style_cdf(cdf_ax, all_latencies)
    if title:
        fig.suptitle(title, fontsize=13)
    return fig


def plot_comparison(runs: Sequence[Run], out: Path, title: str | None = None,
                    reports: Sequence[Report] | None = None) -> Path:
    """Save :func:`comparison_figure` at ``out`` and return the path."""
    fig = comparison_figure(runs, title, reports)
    try:
        out = save_figure(fig, out)
    finally:
        pyplot().close(fig)
    return out


def save_comparison(runs: Sequence[Run], out: Path, title: str | None = None, *,
                    draw: bool = True) -> tuple[Path | None, Path, list[ComparisonRow]]:
    """Draw the picture at ``out`` (not with ``draw=False``: no picture, None) and write its
    table as Markdown next to it (``.md``)."""
    reports = [build_report(run) for run in runs]
    rows = comparison_rows(runs, reports)
    picture = plot_comparison(runs, out, title, reports) if draw else None
    markdown = out.with_suffix(".md")
    if picture is None:
        caption = f"{md_escape(title or 'comparison')}\n\n"
    else:
        caption = f"![{md_escape(title or 'comparison')}]({out.name})\n\n"
    with writing(markdown):
        markdown.write_text(caption + format_markdown(rows), encoding="utf-8")
    return picture, markdown, rows


def plot_overlay(measured: Run, predicted: Sequence[tuple[str, Sequence[RequestRecord]]],
                 detection: Detection, out: Path, title: str | None = None) -> Path:
    """The measured run's dots and each prediction's (hollow) on one time axis, and all CDFs."""
    plt = pyplot()
    fig, (ax, room, cdf_ax) = plt.subplots(1, 3, figsize=(17, 6.5), dpi=100,
                                           gridspec_kw={"width_ratios": (2.2, 0.9, 1)})
    room.axis("off")   # the legend's room, beside the dots
    try:
        draw_detected(ax, measured, detection, label_prefix="measured: ")
        measured_ok = [r.latency_ms for r in measured.records if r.ok]
        draw_cdf(cdf_ax, "measured", measured_ok, "#1f77b4")
        everything = list(measured_ok)
        for i, (label, records) in enumerate(predicted):
            colour = PREDICTION_COLOURS[i % len(PREDICTION_COLOURS)]
            xs = [r.start_ns / 1e9 for r in records]
            ys = [r.latency_ms for r in records]
            ax.scatter(xs, ys, s=46 + 30 * i, facecolors="none", edgecolors=colour,
                       linewidths=1.3, label=f"{label} ({requests(len(xs))})")
            draw_cdf(cdf_ax, label, ys, colour, linestyle="--" if i == 0 else ":")
            everything.extend(ys)
        ax.set_xlabel("time since start of run (s)", fontsize=12)
        ax.set_ylabel("request latency (ms)", fontsize=12)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        legend = legend_outside(ax, 10, wrap=40)
        if legend is not None:
            legend.set_in_layout(False)   # it has the middle column to itself
        ax.set_title(title or f"{measured.name}: measured and predicted", fontsize=12)
        if (detection.threshold_ms is not None and math.isfinite(detection.threshold_ms)
                and detection.source.uses_latency):
            cdf_ax.axvline(detection.threshold_ms, color="#ff7f0e", linestyle=":",
                           label=f"slow above {detection.threshold_ms:.1f} ms")
        _style_cdf(cdf_ax, everything)
        out = save_figure(fig, out)
    finally:
        plt.close(fig)
    return out
