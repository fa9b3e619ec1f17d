"""Draw a run as the original pictures did: each request a dot, latency against time.

Dots the server marked as throttled (the kernel's per-request ``nr_throttled`` or the in-process
throttle's pause) get their own colour; failed requests are red crosses. Headless (Agg).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from client.rawdata import Run

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["describe_limit", "draw_run", "plot_run", "pyplot", "save_figure"]


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the headless Agg backend, imported on first use (it costs ~0.4 s,
    which commands that draw nothing should not pay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, out: Path) -> Path:
    """Lay ``fig`` out and save it at ``out`` (PNG), creating its folder; the caller closes it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    return out


COLOURS = {"ok": "#1f77b4", "throttled": "#ff7f0e", "failed": "#d62728"}


def describe_limit(metadata: Mapping[str, Any]) -> str:
    """The CPU limit in force during a run, from the service's ``/limits`` in its metadata."""
    limits = metadata.get("limits")
    if not isinstance(limits, Mapping):
        return str(metadata.get("limit") or "limit unknown")
    parts: list[str] = []
    cgroup = limits.get("cgroup")
    if isinstance(cgroup, Mapping) and cgroup.get("quota_us"):
        cpus = cgroup.get("cpus")
        period_ms = (cgroup.get("period_us") or 100_000) / 1000
        parts.append(f"kernel quota {cpus:g} CPU ({cgroup['quota_us'] / 1000:g} ms per "
                     f"{period_ms:g} ms)" if isinstance(cpus, (int, float))
                     else f"kernel quota {cgroup['quota_us']} us")
    inprocess = limits.get("inprocess")
    if isinstance(inprocess, Mapping) and inprocess.get("cpu_limit_percent"):
        parts.append(f"in-process {inprocess['cpu_limit_percent']:g} % of "
                     f"{inprocess.get('cycle_ms', 100):g} ms ({inprocess.get('mode', 'cfs')})")
    return ", ".join(parts) if parts else "no CPU limit"


def draw_run(ax: Axes, run: Run, *, label_prefix: str = "") -> None:
    """Dots for one run on ``ax`` (x: seconds since start, y: latency in ms)."""
    groups: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in COLOURS}
    for r in run.records:
        kind = "failed" if not r.ok else ("throttled" if r.server_throttled else "ok")
        groups[kind][0].append(r.start_ns / 1e9)
        groups[kind][1].append(r.latency_ms)
    labels = {"ok": "request", "throttled": "throttled (server says)", "failed": "failed"}
    for kind, (xs, ys) in groups.items():
        if not xs:
            continue
        marker = "x" if kind == "failed" else "o"
        ax.scatter(xs, ys, s=22, c=COLOURS[kind], marker=marker, alpha=0.85,
                   label=f"{label_prefix}{labels[kind]} ({len(xs)})", linewidths=1.2)


def plot_run(run: Run, out: Path, title: str | None = None) -> Path:
    """Save the dot picture of ``run`` to ``out`` (PNG) and return the path."""
    meta = run.metadata
    if title is None:
        url = meta.get("url", run.path.name)
        iterations = meta.get("iterations")
        it_text = f", iterations={iterations}" if iterations and "iterations=" not in url else ""
        title = f"{url}{it_text}\n{describe_limit(meta)}"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 6.5), dpi=100)
    try:
        draw_run(ax, run)
        ax.set_title(title, fontsize=13)
        ax.set_xlabel("time since start of run (s)", fontsize=13)
        ax.set_ylabel("request latency (ms)", fontsize=13)
        ax.tick_params(labelsize=11)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=11)
        save_figure(fig, out)
    finally:
        plt.close(fig)
    return out
