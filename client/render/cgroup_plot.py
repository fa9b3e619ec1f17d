"""The watched group in a run's picture: shaded bands where the kernel throttled it (behind
the requests' dots) and a panel of the CPU it used in each period against the quota.

The panel shows what an average hides: a group that uses 40 % of its limit over the run can
still hit the limit in every busy 100 ms period, and each of those periods stalls whatever
runs in it. Where the group's ``cpu.pressure`` (PSI) was sampled, a line gives the time its
tasks waited for a CPU in each period (any cause: the quota or a busy machine). x is seconds
since the run's start, as in the dot picture. matplotlib, Agg (the caller makes the figure:
``client.render.figures.pyplot()``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from client.analysis.cgroup import FINE, usage_notes, usage_per_period
from client.analysis.threads import OTHER, threads_per_period
from client.data.threads import ThreadReading
from client.data.timeline import CgroupSample
from client.data.attribution import CounterSample, period_phase
from client.render.legend import legend_outside
from cpuquota.limit import NO_QUOTA, Limit

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["BAND_COLOUR", "PRESSURE_COLOUR", "TOP_THREADS", "draw_pressure",
           "draw_thread_stack", "draw_throttled_bands", "draw_usage_panel", "usage_title"]

BAND_COLOUR = "#ff7f0e"
QUOTA_COLOUR = "#d62728"
USAGE_COLOUR = "#1f77b4"
PRESSURE_COLOUR = "#9467bd"
DEFAULT_PERIOD_NS = 100_000_000   # buckets when the group has no quota (the usual period)
TOP_THREADS = 4                   # names stacked in the panel, the rest as "other"
THREAD_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
OTHER_COLOUR = "#bbbbbb"


def draw_throttled_bands(ax: Axes, stretches: Sequence[tuple[int, int]], *,
                         label: str = "periods throttled (cgroup cpu.stat)") -> None:
    """Shade each ``(start_ns, end_ns)`` stretch over the full height of ``ax``, behind the
    dots (one collection, however many stretches). Nothing is drawn for no stretches."""
    if not stretches:
        return
    ranges = [(start / 1e9, max(end - start, 0) / 1e9) for start, end in stretches]
    count = f"{len(ranges)} stretch{'' if len(ranges) == 1 else 'es'}"
    ax.broken_barh(ranges, (0, 1), transform=ax.get_xaxis_transform(), facecolors=BAND_COLOUR,
                   alpha=0.18, linewidth=0, zorder=0,
                   label=f"{label}: {count}")


def usage_title(mean_cpus: float, limit: Limit | None, periods: int, at_quota: int, *,
                unknown: str | None = None, coarse: str | None = None) -> str:
    """``CPU used per 100 ms period: 12 of 40 periods hit the 0.2 CPU quota, yet the run's
    average is only 0.09 CPU (45 % of the limit)``: the bursts against the average. The
    verdict is drawn only from exact figures: ``unknown`` (the usage cannot be known) and
    ``coarse`` (the per-period figures are too coarse) say why instead."""
    if unknown is not None:
        return f"CPU used per period: not known\n({_wrap(unknown)})"
    if limit is None:
        return (f"CPU used per 100 ms: {NO_QUOTA}; run's average "
                f"{mean_cpus:.2f} CPU")
    share = mean_cpus / limit.cpus
    if coarse is not None:
        return (f"CPU used per {limit.period_ms:g} ms period, run's average {mean_cpus:.2f} CPU "
                f"({100 * share:.0f} % of the limit)\nper period: {_wrap(coarse)}")
    verdict = "yet the run's average is only" if share < 0.8 else "and the run's average is"
    return (f"CPU used per {limit.period_ms:g} ms period: {at_quota} of {periods} periods hit "
            f"the {limit.cpus:g} CPU quota,\n{verdict} {mean_cpus:.2f} CPU "
            f"({100 * share:.0f} % of the limit)")


def _wrap(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0] + " ..."


def draw_usage_panel(ax: Axes, timeline: Sequence[CounterSample], limit: Limit | None,
                     usage: Mapping[str, Any] | None = None,
                     threads: Sequence[ThreadReading] = ()) -> None:
    """Bars: the group's CPU per period (ms), aligned to the kernel's period boundaries; a line
    at the quota; the run's average as a dashed line; the title says how they compare.
    ``usage``: the run's metadata ``cgroup`` section: a usage that cannot be known draws no
    bars, one too coarse per period draws them without marking any at the quota.
    ``threads``: the run's readings of its threads (``<name>.threads.csv``): each period's bar
    is then stacked by the top thread names and ``other`` (:func:`draw_thread_stack`)."""
    period_ns = limit.period_ns if limit else DEFAULT_PERIOD_NS
    phase = period_phase(timeline, period_ns) if limit else None
    _counter, resolution_ms, unknown = usage_notes(usage)
    quota_ms = limit.quota_ms if limit else None
    coarse = None
    if unknown is None and resolution_ms and quota_ms and resolution_ms > FINE * quota_ms:
        coarse = (f"counted in {resolution_ms:g} ms steps, too coarse to tell a period at the "
                  f"{quota_ms:g} ms quota")
    periods = (usage_per_period(timeline, period_ns, phase, refills=True) if unknown is None
               else [])
    duration_ns = timeline[-1].t_ns - timeline[0].t_ns if len(timeline) > 1 else 0
    mean_cpus = ((timeline[-1].usage_ns - timeline[0].usage_ns) / duration_ns
                 if duration_ns > 0 else 0.0)
    exact = coarse is None
    at_quota = sum(1 for p in periods if quota_ms and p.usage_ns / 1e6 >= 0.9 * quota_ms)
    stacked = bool(periods) and draw_thread_stack(
        ax, threads, [p.start_ns for p in periods] + [periods[-1].start_ns + period_ns],
        period_ns)
    if periods and not stacked:
        colours = [QUOTA_COLOUR if exact and quota_ms and p.usage_ns / 1e6 >= 0.9 * quota_ms
                   else USAGE_COLOUR for p in periods]
        ax.bar([p.start_ns / 1e9 for p in periods], [p.usage_ns / 1e6 for p in periods],
               width=period_ns / 1e9, align="edge", color=colours, alpha=0.75,
               label="CPU ms used in each period" + (" (red: at the quota)" if exact else ""))
    if quota_ms is not None:
        ax.axhline(quota_ms, color=QUOTA_COLOUR, linewidth=1.5,
                   label=f"quota {quota_ms:g} ms per {limit.period_ms:g} ms"
                   if limit else "quota")
    if unknown is None:
        ax.axhline(mean_cpus * period_ns / 1e6, color="black", linestyle="--", linewidth=1.2,
                   label=f"run's average {mean_cpus:.2f} CPU")
    draw_pressure(ax, timeline, period_ns, phase)
    ax.set_title(usage_title(mean_cpus, limit, len(periods), at_quota, unknown=unknown,
                             coarse=coarse), fontsize=11)
    ax.set_xlabel("time since start of run (s)")
    ax.set_ylabel(f"CPU ms per {period_ns / 1e6:g} ms")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    legend_outside(ax, 9)


def draw_thread_stack(ax: Axes, readings: Sequence[ThreadReading], edges_ns: Sequence[int],
                      period_ns: int, top: int = TOP_THREADS) -> bool:
    """Bars stacked by thread name: the CPU (ms) the top names and ``other`` used in each
    period between ``edges_ns``; False (nothing drawn) with fewer than two readings."""
    series = threads_per_period(readings, edges_ns, top)
    if not series:
        return False
    x = [edge / 1e9 for edge in edges_ns[:-1]]
    bottom = [0.0] * len(x)
    for k, (name, ns) in enumerate(series):
        ms = [v / 1e6 for v in ns]
        colour = OTHER_COLOUR if name == OTHER else THREAD_COLOURS[k % len(THREAD_COLOURS)]
        ax.bar(x, ms, width=period_ns / 1e9, bottom=bottom, align="edge", color=colour,
               alpha=0.8, label=f"by thread (schedstat): {name}" if k == 0 else name)
        bottom = [b + v for b, v in zip(bottom, ms)]
    return True


def draw_pressure(ax: Axes, timeline: Sequence[CounterSample], period_ns: int,
                  phase: int | None) -> None:
    """A step line: the ms the group's tasks waited for a CPU (PSI ``some``) in each period.
    Nothing is drawn for a timeline without pressure (cgroup v1, older files)."""
    samples = [s for s in timeline if isinstance(s, CgroupSample)]
    if len(samples) < 2 or len(samples) != len(timeline) or any(
            s.pressure_some_ns is None for s in samples):
        return
    stalls = usage_per_period([replace(s, usage_ns=s.pressure_some_ns or 0) for s in samples],
                              period_ns, phase)
    if not stalls:
        return
    total_ms = (samples[-1].pressure_some_ns or 0) / 1e6 - (samples[0].pressure_some_ns or 0) / 1e6
    ax.step([p.start_ns / 1e9 for p in stalls], [p.usage_ns / 1e6 for p in stalls], where="post",
            color=PRESSURE_COLOUR, linewidth=1.4,
            label=f"tasks waiting for a CPU (PSI some): {total_ms:.0f} ms in all")
