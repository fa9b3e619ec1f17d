"""``http-timing watch``'s output: a table of the group's throttling per interval (the ``top``
of throttling, drawn with rich) or one JSON object per line when the output is not a terminal."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from client.analysis.cgroup import IntervalStats
from cpuquota.limit import NO_QUOTA, Limit

__all__ = ["WatchRow", "WatchView", "json_line", "quota_text", "watch_table"]


@dataclass(frozen=True)
class WatchRow:
    """One line of the view: when the interval ended and what happened in it."""

    clock: str            # wall-clock time the interval ended, HH:MM:SS
    elapsed_s: float      # since the watch started
    stats: IntervalStats
    limit: Limit | None = None   # the quota in force at its end
    usage_counter: str | None = None   # where the usage comes from
    usage_unknown: str | None = None   # why it cannot be known (then it is left out)
    # the names that spent the most CPU in the interval: (name, cpu_ns, share of the threads')
    top_threads: tuple[tuple[str, int, float], ...] | None = None   # None: threads not read


def quota_text(limit: Limit | None) -> str:
    return f"quota {limit.describe()}" if limit else NO_QUOTA


def _cpus(value: float) -> str:
    return "n/a" if value != value else f"{value:.3f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _quota_share(stats: IntervalStats, limit: Limit | None) -> str:
    """The interval's usage as a share of the quota; ``-`` where it cannot be told (no quota,
    or an interval shorter than one period: it may hold a whole period's quota)."""
    if limit is None or 1000 * stats.interval_s < limit.period_ms:
        return "-"
    return _percent(stats.quota_share)


def _quota_words(total: IntervalStats, limit: Limit | None) -> str:
    """`` (95 % of the quota)``, or why the share is left out."""
    if limit is None:
        return " (no quota)"
    if 1000 * total.interval_s < limit.period_ms:
        return (f" (share of the quota: not known, {total.interval_s:.2f} s is shorter than one "
                f"{limit.period_ms:g} ms period)")
    return f" ({_percent(total.quota_share)} of the quota)"


def _top(row: WatchRow, join: str = ", ") -> str:
    """``C2 CompilerThre 52 %, http-nio-N 30 %`` (or one a line); ``-`` when no thread ran or
    none was read."""
    if not row.top_threads:
        return "-"
    return join.join(f"{name} {100 * share:.0f} %" for name, _ns, share in row.top_threads)


# a layout: headers in one line or two; the top threads in one line or one name a line;
# the periods in three columns or in one ("9 of 10 (90 %)")
@dataclass(frozen=True)
class _Layout:
    headers: tuple[str, ...]
    threads_join: str
    compact: bool = False


_WIDE = ("periods", "periods throttled", "% of periods", "throttled time ms", "CPUs used",
         "% of quota", "top threads (share of their CPU)")
_TWO_LINES = ("periods", "periods\nthrottled", "% of\nperiods", "throttled\ntime ms",
              "CPUs\nused", "% of\nquota", "top threads\n(share of CPU)")
_COMPACT = ("periods\nthrottled", "throttled\ntime ms", "CPUs\nused", "% of\nquota",
            "top threads\n(share of CPU)")
_UNBOUNDED = 10_000
_NARROWEST = 80   # the terminal width it is drawn for at least
_LAYOUTS = (_Layout(_WIDE, ", "), _Layout(_WIDE, "\n"), _Layout(_TWO_LINES, "\n"),
            _Layout(_COMPACT, "\n", compact=True))


class WatchView:
    """The table drawn to fit the width it is given: the widest layout whose every line fits
    (the last, narrowest one otherwise: its top threads wrap between words)."""

    def __init__(self, build: Callable[[_Layout], Table]) -> None:
        self.build = build

    def table(self, width: int, console: Console) -> Table:
        unbounded = console.options.update_width(_UNBOUNDED)   # a table's width as it likes
        for layout in _LAYOUTS:
            table = self.build(layout)
            if Measurement.get(console, unbounded, table).maximum <= width:
                return table
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width, console)


def watch_table(group: str, limit: Limit | None, rows: Sequence[WatchRow],
                total: IntervalStats | None = None, quota_group: str | None = None,
                change: str | None = None) -> WatchView:
    """The last ``rows`` (oldest first) and, in the caption, the totals since the start.
    ``quota_group``: the group above whose quota is in force (its counters are shown);
    ``change``: the last change of quota seen, in words. Drawn to the width it is printed at
    (80 columns and more: headers in two lines at most, whole times)."""
    return WatchView(lambda layout: _table(layout, group, limit, rows, total, quota_group,
                                           change))


def _table(layout: _Layout, group: str, limit: Limit | None, rows: Sequence[WatchRow],
           total: IntervalStats | None, quota_group: str | None, change: str | None) -> Table:
    where = f" on {quota_group}" if quota_group and quota_group != group else ""
    changed = f"\n{change}" if change else ""
    table = Table(title=f"CPU throttling of {group}\n{quota_text(limit)}{where}{changed}  "
                        "(Ctrl-C to stop)", title_justify="left")
    table.add_column("time", no_wrap=True, min_width=8)
    *numbers, threads_header = layout.headers
    for header in numbers:
        table.add_column(header, justify="right", no_wrap=True)
    threads = any(row.top_threads is not None for row in rows)
    if threads:
        table.add_column(threads_header, overflow="fold")
    for row in rows:
        s = row.stats
        hot = "bold red" if s.nr_throttled else ""
        if s.quota_cpus is None:   # no quota: its counters stand still, nothing is claimed
            table.add_row(row.clock, *(["-"] if layout.compact else ["-", "-", "-"]), "-",
                          _cpus(s.usage_cpus), "-",
                          *([_top(row, layout.threads_join)] if threads else []))
            continue
        periods: list[str | Text] = [
            Text(f"{s.nr_throttled} of {s.nr_periods} ({_percent(s.throttled_share)})",
                 style=hot)] if layout.compact else [
            str(s.nr_periods), Text(str(s.nr_throttled), style=hot),
            Text(_percent(s.throttled_share), style=hot)]
        cells = [row.clock, *periods, f"{s.throttled_ms:.1f}", _cpus(s.usage_cpus),
                 _quota_share(s, row.limit or limit)]
        table.add_row(*cells, *([_top(row, layout.threads_join)] if threads else []))
    if total is not None:
        # one clause a line, and the table at least as wide as the longest: a figure is never
        # parted from its unit by the caption's wrapping
        lines = [f"since start ({total.interval_s:.1f} s): {total.nr_throttled} of "
                 f"{total.nr_periods} periods throttled ({_percent(total.throttled_share)})",
                 f"throttled time {total.throttled_ms:.0f} ms, {_cpus(total.usage_cpus)} CPUs on "
                 f"average{_quota_words(total, limit)}"] if total.quota_cpus is not None else [
            f"since start ({total.interval_s:.1f} s): {NO_QUOTA}",
            f"{_cpus(total.usage_cpus)} CPUs on average"]
        last = rows[-1] if rows else None
        if last is not None and last.usage_unknown:
            lines.append(f"CPUs used: not known ({last.usage_unknown})")
        elif last is not None and last.usage_counter:
            lines.append(f"CPU usage from {last.usage_counter}")
        table.caption = "\n".join(lines)
        table.min_width = min(max(len(line) for line in lines), _NARROWEST)
        table.caption_justify = "left"
    return table


def json_line(group: str, row: WatchRow, quota_group: str | None = None) -> str:
    """One interval as one line of JSON (null where there is no quota; ``quota_group``: the
    group whose quota and counters these are, the watched one's or an ancestor's)."""
    return json.dumps({"group": group, "time": row.clock, "elapsed_s": round(row.elapsed_s, 3),
                       "quota_group": quota_group, **row.stats.to_dict(),
                       "usage_counter": row.usage_counter, "usage_unknown": row.usage_unknown,
                       "top_threads": None if row.top_threads is None else [
                           {"name": name, "cpu_ms": round(ns / 1e6, 3), "share": round(share, 4)}
                           for name, ns, share in row.top_threads]},
                      sort_keys=True)
