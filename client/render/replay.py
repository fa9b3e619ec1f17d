"""``http-timing predict --timeline``: the replay's answer as text (the JSON has the same
figures: :func:`client.advise.replay.replay_answer`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cpuquota.limit import NO_QUOTA

__all__ = ["format_passive", "format_predicted_runs", "format_replay", "format_workload"]


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


def _head(answer: dict[str, Any]) -> list[str]:
    """The window, the record, how sure the demand is, the requests."""
    w, rec, demand = answer["window"], answer["recorded"], answer["demand"]
    limits = ", ".join(_limit(c) for c in rec["cpus"])
    lines = [f"replay of {answer['timeline']}: a window of {w['seconds']:.2f} s "
             f"({w['periods']} periods of {w['period_ms']:g} ms, {w['period_source']})",
             f"recorded: limit {limits}; {rec['periods_throttled']} of {rec['periods']} periods "
             f"throttled, throttled time {rec['throttled_ms']:.0f} ms, CPU used "
             f"{rec['cpu_used_s']:.2f} s (the timeline's cpu.stat and usage)"
             if any(c is not None for c in rec["cpus"]) else
             f"recorded: {NO_QUOTA} (none on the group or above); CPU used "
             f"{rec['cpu_used_s']:.2f} s (the timeline's usage)",
             f"demand: {demand['says']}"]
    requests = answer["requests"]
    if requests is not None:
        left = [f"{n} {what}" for n, what in ((requests["outside_window"], "outside the window"),
                                              (requests["failed"], "failed")) if n]
        lines.append(f"requests: {requests['count']} from {requests['file']}, placed "
                     f"{requests['placed']}" + (f" ({', '.join(left)}: left out)" if left else ""))
        measured = requests["measured"]
        lines.append(f"replayed as {'an' if requests['loop'].startswith('open') else 'a'} "
                     f"{requests['loop']}; measured in the record: p50 "
                     f"{_ms(measured['p50_ms'])} ms, p90 {_ms(measured['p90_ms'])} ms, p99 "
                     f"{_ms(measured['p99_ms'])} ms")
        if requests.get("clock") is not None:
            lines.append(f"requests' clock: {requests['clock']['says']}")
        if requests.get("cpu") is not None:
            lines.append(f"requests' CPU: {requests['cpu']['says']}")
    else:
        lines.append("requests: none given; added delay: the wait until the group runs again "
                     "for a request arriving at a random instant of the window")
    return lines


def format_replay(answer: dict[str, Any]) -> str:
    """The window, the record, how sure the demand is, the requests, then the table."""
    lines, requests = _head(answer), answer["requests"]
    if requests is not None:
        header = ["limit", "periods throttled", "p50 ms", "p90 ms", "p99 ms"]
        keys = ["p50_ms", "p90_ms", "p99_ms"]
    else:
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


def _judged(row: dict[str, Any]) -> str:
    if "p99_ms" in row:
        figures = f"predicted p99 {_ms(row['p99_ms'])} ms, p90 {_ms(row['p90_ms'])} ms"
    else:
        figures = (f"added delay p99 {_ms(row['added_delay_p99_ms'])} ms, p50 "
                   f"{_ms(row['added_delay_p50_ms'])} ms")
    throttled = (f", {row['periods_throttled']} of {row['periods']} periods throttled"
                 if row.get("cpus") is not None else "")   # no limit: nothing counts periods
    return (f"{figures}{throttled}"
            + ("" if row["met"] else f" (missed: {', '.join(row['missed'])})"))


def format_passive(answer: dict[str, Any]) -> str:
    """``advise --passive``: the window and the record, the answer, what it was judged by."""
    lines = ["advise --passive: " + ", ".join(
        f"{k} <= {v:g} ms" for k, v in (("p99", answer["target"]["p99_ms"]),
                                        ("p90", answer["target"].get("p90_ms"))) if v),
        *_head(answer), f"judged by {answer['judged_by']}", ""]
    rec, predicted = answer["recommended"], answer["predicted"]
    if rec is None:
        lines.append(f"no recommendation: {answer['reason']}")
    else:
        lines.append(f"recommended: {rec['cpus']:g} CPU (docker {rec['docker']}; Kubernetes "
                     f"limits.cpu {rec['kubernetes_limits_cpu']}): "
                     f"{_judged(predicted['at_recommended'])}"
                     + ("" if rec.get("sure", True) else "; not sure: see its range"))
        less = predicted["at_25_percent_less"]
        if less is not None:
            lines.append(f"at 25 % less ({_limit(less['cpus'])}): {_judged(less)}")
        if "range_says" in rec:
            lines.append(rec["range_says"])
    lines.append(f"without a limit: {_judged(answer['no_limit'])}")
    tried = ", ".join(f"{_limit(r['cpus'])} {'met' if r['met'] else 'missed'}"
                      for r in answer["replays"])
    lines += [f"replayed: {tried or 'none'} (the quota model on the record's period grid; "
              "no resize, no load)"]
    return "\n".join(lines)


def format_predicted_runs(runs: Mapping[int | None, Path], answer: int | None) -> str:
    """Where the predicted runs are, the one at the ``answer`` (millicores) first: report,
    plot and compare read them."""
    at = runs.get(answer) if answer is not None else None
    first = f"at the answer {at}; " if at is not None else ""
    folder = next(iter(runs.values())).parent
    return (f"predicted runs (report, plot and compare read them): {first}{len(runs)} in "
            f"{folder}, one per limit replayed")


def format_workload(workload: Mapping[str, Any], window: str) -> list[str]:
    """``advise --passive --k8s``: the workload's pods and their windows, what was left out."""
    pods = workload["pods"]
    return [f"{workload['name']}: {window} as the node agent recorded it; {len(pods)} pod(s): "
            + ", ".join(f"{p['pod']} ({p['seconds']:.0f} s)" for p in pods),
            *(f"left out: {line}" for line in workload["missing"])]

