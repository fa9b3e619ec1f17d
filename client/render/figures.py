"""Draw a run as the original pictures did: each request a dot, latency against time.

The requests the run's detection (``client.analysis.detect``: the counters and the latency)
marks get their own colour, called "delayed by throttling" when counters said so and only "slow"
from latency alone; failed requests are red crosses. A run attached to a
cgroup (``--cgroup``) also shows the group's throttled stretches as bands behind the dots and,
below, the CPU it used in each period against its quota. Headless (Agg); matplotlib is
imported on first use.
"""

from __future__ import annotations

import errno
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from client.analysis.detect import Detection, detect_run
from client.data.files import FileWriteError, Run, writing
from client.data.timeline import level_timelines
from client.analysis.threads import run_readings
from client.render.cgroup_plot import draw_throttled_bands, draw_usage_panel
from client.render.legend import legend_outside
from client.render.text import format_held
from client.data.attribution import throttled_stretches

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["COLOURS", "draw_detected", "log_scale", "mark_fell_behind", "plot_run", "pyplot",
           "requests", "save_figure"]

COLOURS = {"ok": "#1f77b4", "throttled": "#ff7f0e", "failed": "#d62728"}


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the headless Agg backend, imported on first use (it costs ~0.4 s,
    which commands that draw nothing should not pay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, out: Path) -> Path:
    """Lay ``fig`` out and save it at ``out`` (PNG), creating its folder; the caller closes it.
    A picture that cannot be written is a one-line ``FileWriteError`` naming it."""
    if not out.suffix and not out.is_dir():   # matplotlib would add ".png": say so
        out = out.with_name(out.name + ".png")
    kinds = fig.canvas.get_supported_filetypes()
    if not out.is_dir() and out.suffix.lower().lstrip(".") not in kinds:
        raise FileWriteError(f"cannot write {out}: a picture's name ends in one of "
                             f"{', '.join('.' + k for k in ('png', 'svg', 'pdf'))} "
                             f"(or another of matplotlib's: {', '.join(sorted(kinds))})")
    fig.tight_layout()
    with writing(out):
        if out.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(out))
        fig.savefig(out)
    return out


def draw_detected(ax: Axes, run: Run, detection: Detection, *, label_prefix: str = "") -> None:
    """Dots for one run (x: seconds since its start, y: latency in ms): successful requests,
    the throttled ones in their own colour, failed ones as red crosses."""
    groups: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in COLOURS}
    for record in sorted(run.records, key=lambda r: (not r.ok, r.start_ns, r.seq)):
        kind = ("failed" if not record.ok
                else "throttled" if detection.is_throttled(record) else "ok")
        groups[kind][0].append(record.start_ns / 1e9)
        groups[kind][1].append(record.latency_ms)
    # one vocabulary: counters say "delayed by throttling", latency alone only "slow"
    marked = (f"slow ({detection.source.words} alone)" if detection.marked_as == "slow" else
              f"{detection.marked_as} ({detection.source.words})")
    if detection.held is not None:   # a hold of 0.02 ms is not one of 70 ms
        marked += f", {format_held(detection.held, median=False)}"
    labels = {"ok": "", "throttled": f" {marked}", "failed": " failed"}
    for kind, (xs, ys) in groups.items():
        if xs:
            ax.scatter(xs, ys, s=22, c=COLOURS[kind], marker="x" if kind == "failed" else "o",
                       alpha=0.85, linewidths=1.2,
                       label=f"{label_prefix}{requests(len(xs))}{labels[kind]}")


def requests(count: int) -> str:
    """``1 request``, ``40 requests``: a count of requests in a legend."""
    return f"{count} request{'' if count == 1 else 's'}"


def log_scale(ax: Axes, which: str = "x") -> None:
    """A log scale on ``ax``'s ``which`` axis ("x" or "y") read as plain numbers at 1, 2 and 5
    of each decade (``0.2``, ``50``), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log") if which == "x" else ax.set_yscale("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def mark_fell_behind(ax: Axes) -> None:
    """Say on the picture that the client fell behind (``client.data.pace``)."""
    ax.text(0.01, 0.98, "http-timing fell behind: these latencies include its own queue",
            transform=ax.transAxes, ha="left", va="top", fontsize=11, color="#b00020",
            bbox={"facecolor": "white", "edgecolor": "#b00020", "alpha": 0.9})


def plot_run(run: Run, out: Path, title: str | None = None,
             detection: Detection | None = None) -> Path:
    """Save the dot picture of ``run`` to ``out`` (PNG) and return the path."""
    meta = run.metadata
    if title is None:
        url = meta.url or run.path.name
        it_text = (f", iterations={meta.iterations}"
                   if meta.iterations and "iterations=" not in url else "")
        title = f"{url}{it_text}\n{meta.limit_description()}"
    detection = detection if detection is not None else detect_run(run)
    plt = pyplot()
    if run.timeline:  # the watched group: its throttles behind the dots, its CPU per period
        fig, (ax, usage_ax) = plt.subplots(2, 1, figsize=(14.5, 9.5), dpi=100, sharex=True,
                                           gridspec_kw={"height_ratios": (2, 1)})
        limit = run.metadata.limit
        periods: list[int | None] = [lv.period_ns for _g, lv in run.metadata.quota_levels()] or \
            [limit.period_ns if limit else None]
        stretches = [stretch for timeline, period in zip(level_timelines(run.timeline), periods)
                     for stretch in throttled_stretches(timeline, period)]
        draw_throttled_bands(ax, sorted(stretches))
        draw_usage_panel(usage_ax, run.timeline, limit, run.metadata.cgroup,
                         run_readings(run))
    else:
        fig, ax = plt.subplots(figsize=(14.5, 6.5), dpi=100)
    try:
        draw_detected(ax, run, detection)
        ax.set_title(title, fontsize=13)
        if not run.timeline:
            ax.set_xlabel("time since start of run (s)", fontsize=13)
        ax.set_ylabel("request latency (ms)", fontsize=13)
        ax.tick_params(labelsize=11)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        legend_outside(ax, 11)
        if meta.client_fell_behind:
            mark_fell_behind(ax)
        out = save_figure(fig, out)
    finally:
        plt.close(fig)
    return out
