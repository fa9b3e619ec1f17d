"""``http-timing predict --timeline``: the replay's answer as text (the JSON has the same
figures: :func:`client.commands.predict_replay.replay_answer`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["format_replay"]


def _limit(cpus: float | None) -> str:
    return "no limit" if cpus is None else f"{cpus:g} CPU"


def _ms(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    return [line.rstrip(), *("  ".join(c.rjust(w) if i else c.ljust(w)
                                       for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                             for r in rows)]


def format_replay(answer: dict[str, Any]) -> str:
    """The window, the record, how sure the demand is, the requests, then the table."""
    w, rec, demand = answer["window"], answer["recorded"], answer["demand"]
    limits = ", ".join(_limit(c) for c in rec["cpus"])
    lines = [f"replay of {answer['timeline']}: a window of {w['seconds']:.2f} s "
             f"({w['periods']} periods of {w['period_ms']:g} ms, {w['period_source']})",
             f"recorded: limit {limits}; {rec['periods_throttled']} of {rec['periods']} periods "
             f"throttled, throttled time {rec['throttled_ms']:.0f} ms, CPU used "
             f"{rec['cpu_used_s']:.2f} s (the timeline's cpu.stat and usage)",
             f"demand: {demand['says']}"]
    requests = answer["requests"]
    if requests is not None:
        left = [f"{n} {what}" for n, what in ((requests["outside_window"], "outside the window"),
                                              (requests["failed"], "failed")) if n]
        lines.append(f"requests: {requests['count']} from {requests['file']}, placed "
                     f"{requests['placed']}" + (f" ({', '.join(left)}: left out)" if left else ""))
        measured = requests["measured"]
        lines.append(f"replayed as a {requests['loop']}; measured in the record: p50 "
                     f"{_ms(measured['p50_ms'])} ms, p90 {_ms(measured['p90_ms'])} ms, p99 "
                     f"{_ms(measured['p99_ms'])} ms")
        header = ["limit", "periods throttled", "p50 ms", "p90 ms", "p99 ms"]
        keys = ["p50_ms", "p90_ms", "p99_ms"]
    else:
        lines.append("requests: none given; added delay: the wait until the group runs again "
                     "for a request arriving at a random instant of the window")
        header = ["limit", "periods throttled", "added delay p50 ms", "added delay p99 ms"]
        keys = ["added_delay_p50_ms", "added_delay_p99_ms"]
    rows = [[_limit(row["cpus"]), f"{row['periods_throttled']} of {row['periods']}",
             *(_ms(row[k]) for k in keys)] for row in answer["limits"]]
    lines += ["", *_table(header, rows), "",
              ("predicted by running each request's CPU (the timeline's usage while it ran) "
               "through the quota model" if requests is not None else
               "predicted by replaying the record's CPU demand through the quota model")
              + " (cpuquota.account) on the record's period grid"]
    return "\n".join(lines)
