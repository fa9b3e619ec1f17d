"""``advise --passive --replicas`` (and live, ``--k8s ... --replicas``): the table of replica counts against their smallest limit
and total CPU (:func:`format_sizing`) and its picture, total CPU against N with the goal met
or not (:func:`save_sizing_figure`). Both read the answer's JSON
(``client.advise.replicas.Sized.to_dict``, ``client.advise.replicas_live.LiveSized.to_dict``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from client.render.figures import pyplot, save_figure
from client.render.legend import legend_outside

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["format_sizing", "save_sizing_figure", "sizing_figure"]


def _cpus(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _ms(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def _p99(row: Mapping[str, Any]) -> float | None:
    return row.get("p99_ms", row.get("added_delay_p99_ms"))


def _range(row: Mapping[str, Any]) -> str:
    span = row["range"]
    if span is None:
        return "-"
    high = "over" if span["total_high_cpus"] is None else f"{span['total_high_cpus']:g}"
    return f"{span['total_low_cpus']:g} to {high}"


def format_sizing(answer: Mapping[str, Any]) -> str:
    """The goal, how the load was spread, the table (one row per N, the least total marked),
    and the answer in one line."""
    target = answer["target"]
    goal = ", ".join(f"{k} <= {v:g} ms" for k, v in (("p99", target["p99_ms"]),
                                                    ("p90", target.get("p90_ms"))) if v)
    p99 = "p99 ms" if answer["spread"]["how"] != "even" else "added delay p99 ms"
    header = ["replicas", "limit each", "total CPU", p99, "total range", "sure", ""]
    rows = []
    for row in answer["replicas"]:
        rows.append([str(row["replicas"]), _cpus(row["cpus"]) if row["met"] else "none met",
                     _cpus(row["total_cpus"]), _ms(_p99(row)) if row["met"] else "-",
                     _range(row), "-" if row["sure"] is None else ("yes" if row["sure"] else "no"),
                     "<- least" if row["least"] else ""])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    live = bool(answer.get("live"))
    ceiling = answer["ceiling_cpus_per_replica"]
    up_to = "" if ceiling is None else f"; per replica up to {ceiling:g} CPU"
    source = (f"runs on {answer['workload']['name']}, scaled to each N and resized in place: "
              f"{answer['load']}" if live else
              f"replay of {answer['timeline']}: a window of {answer['window']['seconds']:.2f} s")
    lines = [f"advise {'--k8s' if live else '--passive'} --replicas: {goal}{up_to}", source,
             f"spread: {answer['spread']['says']}",
             f"judged by {answer['judged_by']}", "",
             "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.rjust(w) if 0 < i < len(r) - 1 else c.ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    best = answer["least"]
    lines.append("")
    if best is None:
        reasons = {row["reason"] for row in answer["replicas"] if row["reason"]}
        lines.append("no replica count met the goal" + (f": {'; '.join(sorted(reasons))}"
                                                        if reasons else ""))
    else:
        lines.append(f"least total: {best['replicas']} replica"
                     f"{'s' if best['replicas'] > 1 else ''} of {best['cpus']:g} CPU = "
                     f"{best['total_cpus']:g} CPU ("
                     + ("measured" if live else "predicted by the replay, not measured") + ")")
    if live and (back := answer.get("restored")):
        lines.append(f"put back: {back['replicas']} replicas; every pod's limit "
                     + ("as before" if back["limits_as_before"] else
                        f"NOT as before: {back['limits_cpus']}"))
    return "\n".join(lines)


def sizing_figure(answer: Mapping[str, Any]) -> Figure:
    """Total CPU (N × L) against N: the counts that met, with their range, and those that did
    not (drawn at N × the ceiling); the least total marked. The caller closes it."""
    fig, ax = pyplot().subplots(figsize=(9, 5.5), dpi=100)
    rows = answer["replicas"]
    ceiling = answer["ceiling_cpus_per_replica"] or 0.0
    met = [r for r in rows if r["met"]]
    missed = [r for r in rows if not r["met"]]
    if met:
        xs = [r["replicas"] for r in met]
        ys = [r["total_cpus"] for r in met]
        low = [y - (r["range"]["total_low_cpus"] if r["range"] else y) for r, y in zip(met, ys)]
        high = [((r["range"]["total_high_cpus"] if r["range"]["total_high_cpus"] is not None
                  else r["replicas"] * ceiling) - y) if r["range"] else 0.0
                for r, y in zip(met, ys)]
        ax.errorbar(xs, ys, yerr=[low, high], fmt="o", color="#2ca02c", ms=8, capsize=4,
                    label="goal met: N × the smallest limit (bars: its range)")
    if missed:
        ax.scatter([r["replicas"] for r in missed], [r["replicas"] * ceiling for r in missed],
                   marker="x", s=80, color="#d62728",
                   label=f"goal not met up to {ceiling:g} CPU each (drawn at N × {ceiling:g})")
    best = answer["least"]
    if best is not None:
        ax.scatter([best["replicas"]], [best["total_cpus"]], marker="*", s=320,
                   color="#ff7f0e", zorder=4,
                   label=f"least total: {best['replicas']} × {best['cpus']:g} = "
                   f"{best['total_cpus']:g} CPU")
    ax.set_xticks([r["replicas"] for r in rows])
    ax.set_xlabel("replicas (N)", fontsize=12)
    ax.set_ylabel("total CPU limit (N × L, CPUs)", fontsize=12)
    ax.set_ylim(bottom=0)
    how = answer["spread"]["how"]
    spread = ("measured, spread by the Service" if answer.get("live") else
              "replayed, split evenly" if how == "even" else f"replayed, spread {how}")
    ax.set_title(f"replicas × limit for p99 <= {answer['target']['p99_ms']:g} ms "
                 f"({spread})", fontsize=12)
    ax.grid(True, alpha=0.3)
    legend_outside(ax, 9, below=True, wrap=70)
    return fig


def save_sizing_figure(answer: Mapping[str, Any], out: Path) -> Path:
    """Save :func:`sizing_figure` at ``out`` and return the path."""
    fig = sizing_figure(answer)
    try:
        out = save_figure(fig, out)
    finally:
        pyplot().close(fig)
    return out
