"""``http-timing advise`` in words, tables and a picture.

- :func:`format_run`: one line per run as it ends.
- :func:`format_advice`: the recommendation (every spelling), the runs at it and at the next
  lower step, the model's guess beside it, the usage-based table and the alternatives.
- :func:`save_advice_figure`: p99 and p50 against the limit: the measured runs, the model's
  curve, the target line and the recommendation marked.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from client.analysis.advise import (MAIN_ROLES, Advice, Alternative, docker_flags,
                                    kubernetes_cpu)
from client.analysis.goal import LatencyGoal, Measured
from client.render.legend import legend_outside
from client.render.figures import log_scale, pyplot, save_figure
from cpuquota.limit import Limit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["advice_figure", "format_advice", "format_run", "format_runs_table",
           "format_usage_table", "limit_words", "save_advice_figure"]


def limit_words(limit: Limit | None) -> str:
    """``0.6 CPU``, ``0.21 CPU (period 10 ms)``, ``no limit``."""
    if limit is None:
        return "no limit"
    extra = []
    if limit.period_ms != 100:
        extra.append(f"period {limit.period_ms:g} ms")
    if limit.burst_ms:
        extra.append(f"burst {limit.burst_ms:g} ms")
    return f"{limit.cpus:g} CPU" + (f" ({', '.join(extra)})" if extra else "")


def _ms(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f} %"


def figures(run: Measured) -> str:
    """``p50 8.3  p90 15.6  p99 22.6 ms, 2 % delayed by throttling`` (``, mean of 2 runs``;
    ``, 3 of 100 requests slow without throttling (counted apart: p99 21.0 ms)``)."""
    runs = f", mean of {run.runs} runs" if run.runs > 1 else ""
    return (f"p50 {_ms(run.p50_ms)}  p90 {_ms(run.p90_ms)}  p99 {_ms(run.p99_ms)} ms, "
            f"{_share(run.throttled_fraction)} delayed by throttling{runs}{_apart(run)}")


def _apart(run: Measured) -> str:
    if not run.slow_unthrottled or run.judged_p99_ms is None:
        return ""
    return (f", {run.slow_unthrottled} of {run.requests} requests slow without throttling "
            f"(counted apart: p99 {_ms(run.judged_p99_ms)} ms)")


def verdict(run: Measured) -> str:
    if run.met is None:
        return "not judged"
    narrowly = " (narrowly)" if run.narrow else ""
    if run.met and run.throttled_over == 0 and run.slow_unthrottled:
        return "meets the target as far as the limit goes (no request over it was delayed by " \
            "throttling)" + narrowly
    if run.met:
        return "meets the target" + narrowly
    return "misses: " + ", ".join(run.missed or ()) + narrowly


def format_run(index: int, run: Measured) -> str:
    """``[3] search 0.55 CPU: p50 ... ms, 6 % delayed by throttling: misses: p99 34.2 > 30
    ms``."""
    return f"[{index}] {run.role} {limit_words(run.limit)}: {figures(run)}: {verdict(run)}"


def format_runs_table(runs: Sequence[Measured]) -> str:
    """Every run, a Markdown table."""
    lines = ["| run | role | limit | requests | p50 ms | p90 ms | p99 ms | delayed by "
             "throttling | met | "
             "slow without throttling | p99 ms, those apart |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        met = "–" if run.met is None else "yes" if run.met else "no"
        judged = run.judged_p99_ms is not None
        lines.append(f"| {run.name} | {run.role} | {limit_words(run.limit)} | {run.requests} | "
                     f"{_ms(run.p50_ms)} | {_ms(run.p90_ms)} | {_ms(run.p99_ms)} | "
                     f"{_share(run.throttled_fraction)} | {met} | "
                     f"{run.slow_unthrottled if judged else '–'} | "
                     f"{_ms(run.judged_p99) if judged else '–'} |")
    return "\n".join(lines) + "\n"


def format_usage_table(advice: Advice) -> str:
    """The latency-based limit beside the usage-based ones, each as measured (Markdown)."""
    goal = advice.target.describe()
    lines = [f"| limit set by | rule gives | run at | p50 ms | p90 ms | p99 ms | delayed by "
             f"throttling | meets {goal} |", "|---|---|---|---|---|---|---|---|"]
    rows: list[tuple[str, str, Limit | None, Measured | None]] = []
    if advice.at is not None:
        rows.append(("the latency target (advise)", "–", advice.at.limit, advice.at))
    for usage in advice.usage_based:
        rows.append((usage.rule.words, f"{usage.usage_cpus:.4f}", usage.limit, usage.result))
    for label, gives, limit, run in rows:
        cpus = f"{limit.cpus:g}" if limit else "–"
        if run is None:
            lines.append(f"| {label} | {gives} | {cpus} | – | – | – | – | not run |")
            continue
        lines.append(f"| {label} | {gives} | {cpus} | {_ms(run.p50_ms)} | {_ms(run.p90_ms)} | "
                     f"{_ms(run.p99_ms)} | {_share(run.throttled_fraction)} | "
                     f"{'yes' if run.met else 'no'} |")
    return "\n".join(lines) + "\n"


def _usage_heading(advice: Advice) -> str:
    profile = advice.profile
    usage = profile.usage
    if not usage:
        return ("What a usage-based recommender would set: no per-second usage was read from "
                "the service's /metrics, so there is nothing to apply its rules to.")
    mean = sum(usage) / len(usage)
    few = " (few samples: a longer profile run gives a steadier percentile)" if len(
        usage) < 10 else ""
    return (f"What a usage-based recommender would set for the same load, from the per-second "
            f"CPU usage of the service without a limit ({profile.usage_counter}, {len(usage)} "
            f"samples{few}; mean {mean:.3f} CPU), each run as a limit (rounded up to a "
            "millicore, at most the ceiling):")


def _recommendation(advice: Advice) -> list[str]:
    rec, at, below = advice.recommended, advice.at, advice.below
    goal = advice.target.describe()
    if rec is None or at is None:
        return [f"No recommendation for {goal}: {advice.reason}"]
    burst = f" (burst {rec.burst_ms:g} ms: cpu.cfs_burst_us / cpu.max.burst; docker and " \
        "Kubernetes have no setting for it)" if rec.burst_ms else ""
    lines = [f"Recommendation for {goal} ({advice.backend}; {advice.load}):",
             f"  {rec.cpus:g} CPU = {kubernetes_cpu(rec)}: docker run {docker_flags(rec)}; "
             f"Kubernetes resources.limits.cpu: {kubernetes_cpu(rec)}{burst}",
             f"  measured at {limit_words(rec)}: {figures(at)}: {verdict(at)}"]
    if at.judged_p99_ms is not None:
        lines += _unthrottled(at, advice.profile.run, advice.target)
    if below is not None and below.limit is not None:
        lines.append(f"  at {limit_words(below.limit)} (the next lower step tried): "
                     f"{figures(below)}: {verdict(below)}")
        lines.append(f"  The smallest limit that meets it lies in ({below.limit.cpus:g}, "
                     f"{rec.cpus:g}] CPU.")
    elif advice.at_floor:
        lines.append(f"  {rec.cpus:g} CPU is the smallest limit tried (a quota of at least "
                     "1 ms per period): the target is loose for this load.")
    if advice.guess is not None and advice.guess_error is not None:
        lines.append(f"  The model's first guess was {advice.guess.limit.cpus:g} CPU (predicted "
                     f"p99 {_ms(advice.guess.p99_ms)} ms): {_relative(advice.guess_error)} the "
                     "measured answer.")
    elif advice.guess is None:
        lines.append("  The model found no limit up to the ceiling that meets the target; the "
                     "search started at the ceiling.")
    return lines


def _unthrottled(at: Measured, free: Measured, target: LatencyGoal) -> list[str]:
    """How many requests at the answer were slow without throttling, what the requests no
    throttling delayed reach (there, and without a limit), and, when the service misses the
    target even without a limit, that and what the answer then is."""
    reach = ("" if at.unthrottled_p99_ms is None else
             f"; the requests no throttling delayed reach p99 {_ms(at.unthrottled_p99_ms)} ms "
             "there")
    first = (f"  Slow without throttling: {at.slow_unthrottled} of {at.requests} requests at "
             f"the answer (over the target with no throttling in them, counted apart: not the "
             f"limit's doing){reach}")
    missed = target.misses(free.p90_ms, free.p99_ms, None)
    if not missed:
        return [f"{first}, p99 {_ms(free.p99_ms)} ms without a limit ({free.slow_unthrottled} "
                f"of {free.requests} over the target)."]
    return [first + ".",
            f"  The service misses the target even without a limit ({', '.join(missed)}; "
            f"{free.slow_unthrottled} of {free.requests} requests over it with no throttling "
            "in them): they wait for something that is not the CPU (a sleep, I/O, the "
            "machine's other load), and no limit makes them faster. So the answer is the "
            "smallest limit at which throttling pushes no further request past the target."]


def _relative(error: float) -> str:
    if abs(error) < 0.005:
        return "equal to"
    return f"{abs(error) * 100:.0f} % {'above' if error > 0 else 'below'}"


def _alternative(alt: Alternative, advice: Advice) -> str:
    proven, model = alt.proven, alt.model
    what = ("a shorter period" if alt.kind == "period" else "a burst of one quota")
    said = f"the model says {limit_words(model.limit)} meets it"
    if proven is None or proven.limit is None:
        tried = ", ".join(f"{limit_words(r.limit)}: p99 {_ms(r.p99_ms)} ms"
                          for r in alt.results)
        return f"With {what}: {said}; measured, it did not ({tried})."
    rec = advice.recommended
    saved = f", {100 * (1 - proven.limit.cpus / rec.cpus):.0f} % less than {rec.cpus:g} CPU" \
        if rec is not None else ""
    where = (f"docker run {docker_flags(proven.limit)}; Kubernetes sets the period per node "
             "only (kubelet --cpu-cfs-quota-period)" if alt.kind == "period" else
             "cpu.cfs_burst_us / cpu.max.burst (Linux >= 5.14); docker and Kubernetes have "
             "no setting for it")
    return (f"With {what}: {said}; measured at {limit_words(proven.limit)}: {figures(proven)}: "
            f"meets{saved} ({where}).")


def format_advice(advice: Advice) -> str:
    """The whole answer, printed at the end."""
    lines = _recommendation(advice)
    lines += ["", _usage_heading(advice), "", format_usage_table(advice).rstrip()]
    profile = advice.profile
    burst = (f"at most {profile.peak_to_mean:.1f}x the mean requests sent in one 100 ms period"
             if profile.peak_to_mean else "too short a run to say")
    lines.append("")
    lines.append(f"How even the load is: {burst}.")
    if advice.alternatives is None:
        if advice.recommended is not None:
            lines.append("A shorter period or a burst was not looked for (--no-alternatives).")
        return "\n".join(lines) + "\n"
    for alt in advice.alternatives:
        lines.append(_alternative(alt, advice))
    if not advice.alternatives:
        lines.append("Neither a shorter period nor a burst of one quota needs 10 % less by the "
                     "model (or the backend cannot set them), so none was run.")
    return "\n".join(lines) + "\n"


def advice_figure(advice: Advice, *, less: Measured | None = None) -> Figure:
    """p99 and p50 against the limit (log scales): measured runs of the search's shape, the
    alternatives' runs, ``less`` (the run at 25 % less than the answer, when there is one),
    the model's curve, the target and the recommendation. The caller closes it."""
    fig, ax = pyplot().subplots(figsize=(13.5, 6.5), dpi=100)
    curve = advice.curve
    if curve:
        xs = [p.limit.cpus for p in curve]
        ax.plot(xs, [p.p99_ms for p in curve], color="#1f77b4", lw=1.5,
                label="model: p99 (ms)")
        ax.plot(xs, [p.p50_ms for p in curve], color="#1f77b4", lw=1, ls="--",
                label="model: p50 (ms)")
    _draw_runs(ax, advice)
    _draw_alternatives(ax, advice)
    if less is not None:
        _draw_less(ax, less)
    ax.axhline(advice.target.p99_ms, color="#2ca02c", lw=1.2,
               label=f"target p99 <= {advice.target.p99_ms:g} ms")
    if advice.target.p90_ms is not None:
        ax.axhline(advice.target.p90_ms, color="#2ca02c", lw=1, ls=":",
                   label=f"target p90 <= {advice.target.p90_ms:g} ms")
    if advice.recommended is not None:
        ax.axvline(advice.recommended.cpus, color="#2ca02c", lw=2, alpha=0.5,
                   label=f"recommended {advice.recommended.cpus:g} CPU")
    for usage, colour in zip(advice.usage_based, ("#9467bd", "#8c564b")):
        ax.axvline(usage.limit.cpus, color=colour, lw=1, ls="-.",
                   label=f"usage {usage.rule.key}: {usage.limit.cpus:g} CPU")
    log_scale(ax, "x")
    log_scale(ax, "y")
    ax.set_xlabel("CPU limit (CPUs, log scale)", fontsize=12)
    ax.set_ylabel("latency (ms, log scale)", fontsize=12)
    subtitle = textwrap.fill(f"{advice.backend}; {advice.load}", SUBTITLE_WIDTH,
                             break_on_hyphens=False)
    ax.set_title(f"advise: {advice.target.describe()}\n{subtitle}", fontsize=12)
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax, 9, wrap=48)
    return fig


def save_advice_figure(advice: Advice, out: Path, *, less: Measured | None = None) -> Path:
    """Save :func:`advice_figure` at ``out`` and return the path."""
    fig = advice_figure(advice, less=less)
    try:
        out = save_figure(fig, out)
    finally:
        pyplot().close(fig)
    return out


SUBTITLE_WIDTH = 110   # characters a line of the advise picture's subtitle holds


def _draw_runs(ax: Axes, advice: Advice) -> None:
    """The runs of the search's shape (the alternatives' periods and bursts apart)."""
    runs = [r for r in advice.runs if r.limit is not None and r.met is not None
            and r.role in MAIN_ROLES]
    for met, colour, label in ((True, "#2ca02c", "met"), (False, "#d62728", "missed")):
        chosen = [r for r in runs if r.met is met and math.isfinite(r.p99_ms)]
        if chosen:
            ax.scatter([r.limit.cpus for r in chosen if r.limit], [r.p99_ms for r in chosen],
                       s=50, c=colour, zorder=3, label=f"measured p99 ({label}: "
                       f"{_count_runs(chosen)})")
            ax.scatter([r.limit.cpus for r in chosen if r.limit], [r.p50_ms for r in chosen],
                       s=25, c=colour, marker="v", zorder=3, alpha=0.7,
                       label=f"measured p50 ({label})")
    profile = advice.profile.run
    if math.isfinite(profile.p99_ms):
        ax.axhline(profile.p99_ms, color="grey", lw=1, ls=":",
                   label=f"no limit: p99 {profile.p99_ms:.1f} ms")


def _count_runs(runs: Sequence[Measured]) -> str:
    return f"{len(runs)} run{'' if len(runs) == 1 else 's'}"


def _draw_alternatives(ax: Axes, advice: Advice) -> None:
    """The runs of a shorter period or a burst: hollow squares, filled by their verdict."""
    for alt in advice.alternatives or ():
        runs = [r for r in alt.results if r.limit is not None and math.isfinite(r.p99_ms)]
        if not runs:
            continue
        shapes = sorted({f"period {r.limit.period_ms:g} ms" if alt.kind == "period" else
                         f"burst {r.limit.burst_ms:g} ms" for r in runs if r.limit})
        ax.scatter([r.limit.cpus for r in runs if r.limit], [r.p99_ms for r in runs], s=60,
                   marker="s", facecolors="none", zorder=3, linewidths=1.5,
                   edgecolors=["#2ca02c" if r.met else "#d62728" for r in runs],
                   label=f"{', '.join(shapes)}: measured p99 ({_count_runs(runs)})")


def _draw_less(ax: Axes, less: Measured) -> None:
    """The run at 25 % less than the answer: what shows the answer is the smallest."""
    if less.limit is None or not math.isfinite(less.p99_ms):
        return
    colour = "#2ca02c" if less.met else "#d62728"
    ax.scatter([less.limit.cpus], [less.p99_ms], s=110, marker="D", facecolors="none",
               edgecolors=colour, linewidths=2, zorder=4,
               label=f"25 % less, {limit_words(less.limit)}: p99 {_ms(less.p99_ms)} ms "
               f"({'met' if less.met else 'missed'})")
