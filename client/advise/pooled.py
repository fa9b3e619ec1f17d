"""A workload's load pooled from its recorded pods, for the HPA replay (``client.advise.hpa``):
a workload under an HPA has several pods exactly when the HPA scaled it, and its load is what
they all ran.

The pooled demand is the sum over the pods of the CPU each *used* (its window's counters, as
the replay reads them), from its first row (or, where the caller knows it, from when it was
Ready: before that the CPU is the pod's start, not the load's, and the controller leaves an
unready pod out too), on a common 1 s grid of the wall clock. The used CPU, not each pod's
rebuilt demand: a new pod is throttled at its start (its imports), and the demand the replay
rebuilds from that throttled time is paid back by the load's CPU after it, which moves the
load into the pod's first second (on the node it scaled to 4 where the controller ran 2-3,
benchmarks/hpa_vs_controller.py). What that cannot see is said: a throttled pod's demand is
the CPU it got plus its hidden part (the single-pod rule, ``client.analysis.replay.demand_of``),
and that hidden part is not in the pooled load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.advise import AdviseError
from client.advise.replay import MS, ReplayInputs, load_replay
from client.analysis.replay import Demand
from cpuquota.account import CpuStat

__all__ = ["GRID_NS", "PooledLoad", "pod_of", "pooled_load", "summed_rates"]

GRID_NS = 1_000_000_000   # the common grid: 1 s rows


def pod_of(path: Path) -> str:
    """The pod a fetched window is of (``NAMESPACE_POD.cgroup.csv``)."""
    return path.name.removesuffix(".cgroup.csv").split("_", 1)[-1]


def _wall(replayed: ReplayInputs) -> int:
    zero = replayed.recording.zero_epoch_ns
    if zero is None:
        raise AdviseError(f"{replayed.recording.path}: the window has no wall clock, so it "
                          "cannot be pooled with the other pods' windows")
    return zero


def _summed(windows: Sequence[ReplayInputs], t0: float, t1: float,
            ready: Mapping[str, float] | None) -> list[tuple[float, float, float]]:
    seconds = int(t1 - t0)
    total = [0.0] * max(0, seconds)
    for replayed in windows:
        zero = _wall(replayed)
        since = (ready or {}).get(pod_of(replayed.recording.path), -math.inf) - t0
        demand = replayed.demand
        ends = (*demand.starts_ns[1:], demand.end_ns)
        for s, e, used in zip(demand.starts_ns, ends, demand.used_ns):
            a, b = (zero + s) / 1e9 - t0, (zero + e) / 1e9 - t0
            if b <= a or a < since:
                continue
            cpus = used / (e - s)
            for k in range(max(0, int(a)), min(seconds, int(b) + 1)):
                overlap = min(b, k + 1) - max(a, k)
                if overlap > 0:
                    total[k] += cpus * overlap
    return [(float(k), float(k + 1), cpus) for k, cpus in enumerate(total)]


def summed_rates(timelines: Sequence[Path], t0: float, t1: float,
                 ready: Mapping[str, float] | None = None
                 ) -> list[tuple[float, float, float]]:
    """The CPU the pods of ``timelines`` used (each window's rows as the replay reads them)
    summed in 1 s rows from the wall-clock ``t0`` to ``t1`` (seconds since the epoch): rows
    ``(start s, end s, CPUs)`` as ``client.analysis.hpa.run_hpa`` takes. A pod's rows before
    it was Ready (``ready``: wall-clock seconds by pod name) are left out."""
    try:
        windows = [load_replay(path, None, None) for path in timelines]
    except ValueError as exc:
        raise AdviseError(str(exc)) from None
    return _summed(windows, t0, t1, ready)


@dataclass(frozen=True)
class PooledLoad:
    """The pods' used CPU summed as one window the HPA replay takes (``replayed``: its
    recording is the first pod's, for the limit and the period), and what it leaves out."""

    replayed: ReplayInputs
    pods: tuple[str, ...]
    start_epoch_s: float
    hidden_ms: dict[str, float]   # a throttled pod's hidden demand (the single-pod rule)

    @property
    def says(self) -> str:
        used = (f"the load pooled from {len(self.pods)} pods ({', '.join(self.pods)}): the CPU "
                "each used, summed on 1 s rows of the wall clock, each pod from its first row")
        if not self.hidden_ms:
            return used + "; none was throttled, so none of its demand is hidden"
        hidden = ", ".join(f"{pod} {ms:.0f} ms" for pod, ms in self.hidden_ms.items())
        return (used + "; not in it: a throttled pod's demand is the CPU it got plus its "
                f"hidden part (the single-pod rule), hidden here {hidden} of CPU")

    def to_dict(self) -> dict[str, Any]:
        return {"pods": list(self.pods), "count": len(self.pods),
                "start_epoch_s": self.start_epoch_s, "grid_s": GRID_NS / 1e9,
                "counted": "the CPU each pod used, from its first row",
                "hidden_ms": self.hidden_ms, "says": self.says}


def pooled_load(timelines: Sequence[Path], period_ms: float | None = None,
                ready: Mapping[str, float] | None = None) -> PooledLoad:
    """The pods' windows of ``timelines`` pooled (see the module docstring) over the span
    from the earliest pod's first row to the latest one's last, whole seconds."""
    if not timelines:
        raise AdviseError("no recorded pod's window to pool")
    try:
        windows = [load_replay(path, None, period_ms) for path in timelines]
    except ValueError as exc:
        raise AdviseError(str(exc)) from None
    spans = [((_wall(w) + w.demand.start_ns) / 1e9, (_wall(w) + w.demand.end_ns) / 1e9)
             for w in windows]
    t0, t1 = min(a for a, _b in spans), max(b for _a, b in spans)
    rates = _summed(windows, t0, t1, ready)
    if not rates:
        raise AdviseError(f"{timelines[0]}: the pods' windows span under a second")
    first = windows[0]
    wanted = tuple(cpus * GRID_NS for _s, _e, cpus in rates)
    recorded = CpuStat()
    for w in windows:
        r = w.demand.recorded
        recorded = CpuStat(recorded.nr_periods + r.nr_periods,
                           recorded.nr_throttled + r.nr_throttled,
                           recorded.throttled_ns + r.throttled_ns)
    demand = Demand(starts_ns=tuple(k * GRID_NS for k in range(len(rates))),
                    end_ns=len(rates) * GRID_NS, wanted_ns=wanted,
                    period_ns=first.demand.period_ns, origin_ns=0,
                    cores=max(1, sum(w.demand.cores for w in windows)), recorded=recorded,
                    usage_ns=round(sum(wanted)), hidden_ns=0.0, throttled_wall_ns=0,
                    used_ns=wanted, resolution_ns=GRID_NS)
    hidden = {pod_of(w.recording.path): w.demand.hidden_ns / MS for w in windows
              if w.demand.hidden_ns > 0}
    return PooledLoad(ReplayInputs(first.recording, first.period_ns, demand, None, None),
                      tuple(pod_of(w.recording.path) for w in windows), t0, hidden)
