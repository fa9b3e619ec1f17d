"""``cluster``'s rows as a text table, CSV, or JSON-ready figures."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from client.analysis.cluster import ClusterRow, PodWindow, per_period
from cpuquota.limit import NO_QUOTA

__all__ = ["CSV_COLUMNS", "HPA_COLUMNS", "MAX_PODS_DRAWN", "format_cluster", "format_cluster_csv",
           "save_cluster_picture"]

MAX_PODS_DRAWN = 4

CSV_COLUMNS = ("workload", "limit_cpus", "request_cpus", "pods", "window_s", "usage_p95_cpus",
               "vpa_cpus", "periods", "periods_throttled", "throttled_ms",
               "added_delay_p99_now_ms", "recommended_cpus", "predicted_added_delay_p99_ms",
               "predicted_periods_throttled", "no_quota", "vpa_mode", "hpa",
               "hpa_target_cpu_utilization_pct", "hpa_min", "hpa_max",
               "hpa_highest_target_pct", "notes")
# the HPA's columns: its name, CPU target, min and max, the highest target that keeps the goal
# (empty: no HPA scales the workload, or, for the target, it scales on another metric)
HPA_COLUMNS = {"hpa": "name", "hpa_target_cpu_utilization_pct": "target_cpu_utilization_pct",
               "hpa_min": "min", "hpa_max": "max", "hpa_highest_target_pct": "highest_target_pct"}


def _cpus(value: float | None, none: str = "-") -> str:
    return none if value is None else f"{value:.3g}"


def _ms(value: float | None, none: str = "-") -> str:
    return none if value is None else f"{value:.1f}"


def _throttled(row: ClusterRow) -> str:
    if row.periods_throttled is None or row.periods is None:
        return "no limit" if row.limit_cpus is None else "-"
    share = f" ({100 * row.periods_throttled / row.periods:.0f} %)" if row.periods else ""
    return f"{row.periods_throttled}/{row.periods}{share}"


def _hpa(row: ClusterRow) -> str:
    """The HPA's cell: its CPU target, min-max, and the highest target that keeps the goal."""
    hpa = row.hpa
    if hpa is None:
        return "-"
    if hpa["target_cpu_utilization_pct"] is None:
        return "not CPU"
    highest = hpa["highest_target_pct"]
    return (f"{hpa['target_cpu_utilization_pct']} % {hpa['min']}-{hpa['max']}"
            + ("" if highest is None else f" (≤ {highest} %)"))


def _hpa_note(row: ClusterRow) -> list[str]:
    hpa = row.hpa
    if hpa is None:
        return []
    target = ("" if hpa["target_cpu_utilization_pct"] is None else
              f"CPU {hpa['target_cpu_utilization_pct']} % of the request, ")
    return [f"HPA {hpa['name']}: {target}{hpa['min']} to {hpa['max']} replicas; "
            f"{hpa['says']}"]


def _with_hpa(cells: tuple[str, ...], row: ClusterRow | None, hpas: bool) -> tuple[str, ...]:
    """The cells with the HPA's after VPA MODE (the seventh) where any row has an HPA."""
    if not hpas:
        return cells
    return (*cells[:7], "HPA" if row is None else _hpa(row), *cells[7:])


def _aligned(table: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in table]


def format_cluster(rows: Sequence[ClusterRow], header: str) -> str:
    """The table of the workloads with a quota; those without, apart (no throttling figure:
    none can happen there); then each row's notes and the pods left out."""
    hpas = any(r.hpa is not None for r in rows)
    table = [_with_hpa(("WORKLOAD", "LIMIT", "REQUEST", "PODS", "P95(krr)", "VPA", "VPA MODE",
                        "PERIODS THROTTLED", "DELAY P99", "RECOMMENDED", "→ DELAY P99"),
                       None, hpas)]
    apart = [_with_hpa(("WORKLOAD", "LIMIT", "REQUEST", "PODS", "P95(krr)", "VPA", "VPA MODE",
                        "RECOMMENDED"), None, hpas)]
    for r in rows:
        if r.no_quota is not None:
            apart.append(_with_hpa((r.workload, _cpus(r.limit_cpus, "none"),
                                    _cpus(r.request_cpus, "none"), str(r.pods),
                                    _cpus(r.usage_p95_cpus), _cpus(r.vpa_cpus),
                                    r.vpa_mode or "-", _cpus(r.recommended_cpus)), r, hpas))
            continue
        table.append(_with_hpa((r.workload, _cpus(r.limit_cpus, "none"),
                                _cpus(r.request_cpus, "none"), str(r.pods),
                                _cpus(r.usage_p95_cpus), _cpus(r.vpa_cpus), r.vpa_mode or "-",
                                _throttled(r), _ms(r.delay_p99_now_ms),
                                _cpus(r.recommended_cpus), _ms(r.predicted_delay_p99_ms)),
                               r, hpas))
    lines = [header, ""]
    if len(table) > 1 or len(apart) == 1:
        lines += _aligned(table)
    if len(apart) > 1:
        lines += [*([""] if len(table) > 1 else []),
                  f"{NO_QUOTA}, so no throttling figure ({len(apart) - 1} workload(s)):",
                  *_aligned(apart)]
    notes = [f"{r.workload}: {note}" for r in rows
             for note in (*r.notes, *_hpa_note(r), *r.missing)]
    if notes:
        lines += ["", *notes]
    lines += ["", "LIMIT, REQUEST, P95, VPA, RECOMMENDED: CPUs per pod. VPA MODE: the "
              "updateMode of a VerticalPodAutoscaler that targets it. "
              + ("HPA: the CPU target of the HorizontalPodAutoscaler that scales it, its min-max "
                 "replicas, (≤) the highest target that keeps the delay at the limit (its "
                 "replay). " if hpas else "")
              + "PERIODS THROTTLED: the "
              "kernel's counters in the windows. DELAY P99: ms a request arriving at a random "
              "instant waits for the quota, now and (→) at the recommended limit (its replay)."]
    return "\n".join(lines)


def format_cluster_csv(rows: Sequence[ClusterRow]) -> str:
    """One line per workload, the columns of :data:`CSV_COLUMNS` (empty: not known); the
    HPA's (:data:`HPA_COLUMNS`) as the table's HPA cell, its words in the notes as the table's."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        d = r.to_dict()
        d.update({column: (r.hpa or {}).get(key) for column, key in HPA_COLUMNS.items()})
        d["notes"] = "; ".join((*r.notes, *_hpa_note(r), *r.missing))
        writer.writerow(["" if d[c] is None else d[c] for c in CSV_COLUMNS])
    return out.getvalue()


def save_cluster_picture(row: ClusterRow, windows: Sequence[PodWindow], out: Path) -> Path:
    """A workload's picture: per pod (the first :data:`MAX_PODS_DRAWN`), the CPU it used in
    each period against the limit now and the recommended one, the periods the record was
    throttled in marked."""
    from client.render.figures import pyplot, save_figure

    plt = pyplot()
    shown = list(windows[:MAX_PODS_DRAWN])
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, 2.6 * len(shown) + 0.6),
                             squeeze=False)
    for ax, window in zip(axes[:, 0], shown):
        starts, cpus, throttled = per_period(window)
        ax.step(starts, cpus, where="post", color="#1f77b4", linewidth=0.8,
                label="CPU used per period")
        marked = [(t, c) for t, c, hit in zip(starts, cpus, throttled) if hit]
        if marked:
            ax.plot(*zip(*marked), "v", color="#d62728", markersize=3,
                    label="throttled in the record")
        for cpus_at, words, style in ((row.limit_cpus, "limit now", "-"),
                                      (row.recommended_cpus, "recommended", "--")):
            if cpus_at is not None:
                ax.axhline(cpus_at, color="#555555", linestyle=style, linewidth=1,
                           label=f"{words}: {cpus_at:.3g} CPU")
        ax.set_title(f"{row.workload}: pod {window.pod}", fontsize=9, loc="left")
        ax.set_ylabel("CPUs")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds from the window's start (the record's periods)")
    try:
        return save_figure(fig, out)
    finally:
        plt.close(fig)
