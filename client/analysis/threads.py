"""Who spent the quota: the CPU of the watched group's threads by name over a run, and over
its throttled periods alone (``report``'s ``cpu by thread``, ``--json``'s ``cpu_by_thread``).

The threads are read less often than the counters (``client.data.threads``). What a name used
between two readings is counted "in the periods throttled" in the proportion of the group's
usage in those readings' span that fell in sample intervals in which the group's
``nr_throttled`` grew (any quota level): the threads are taken to share each span's CPU alike.

When most of the CPU (:data:`UNNAMED`) sits under the process's own name, on more than one
thread, the kernel cannot tell those threads apart: nobody named them at the OS level
(``ThreadsReport.unnamed``; ``report`` says how to name them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.data.files import Run
from client.data.threads import ThreadReading, threads_path
from client.data.timeline import CgroupSample

__all__ = ["NOTABLE", "OTHER", "TOP", "UNNAMED", "ThreadShare", "ThreadsReport", "Unnamed",
           "outside_request_path", "run_readings", "thread_shares", "threads_per_period",
           "threads_report", "top_between", "unnamed"]

TOP = 5            # names the text shows
NOTABLE = 0.10     # a share of the throttled periods' CPU that is worth a line
OTHER = "other"    # the names after the top ones, together
UNNAMED = 0.80     # a share of the CPU under the process's own name that hides its threads
# threads a runtime runs beside the requests: JIT compilers, collectors, the VM's own
_RUNTIME = re.compile(r"^(C[12] Compiler|GC Thread|G1 |VM Thread|VM Periodic|Sweeper|"
                      r"Service Thread|Common-Cleaner|Finalizer|Reference Handl|Signal Dispat|"
                      r"JVMCI|ParGC|Shenandoah|ZWorker|ZDirector|Monitor Deflat|Notification|"
                      r"Attach Listener|GC |.* \(ended threads\)$)")


@dataclass(frozen=True)
class ThreadShare:
    """One folded thread name's CPU over the run and in the periods throttled."""

    name: str
    cpu_ns: int
    share: float                     # of all the threads' CPU
    throttled_ns: float              # in the sample intervals in which nr_throttled grew
    share_throttled: float | None    # of all the threads' CPU there (None: none throttled)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "cpu_ns": self.cpu_ns, "share": self.share,
                "share_throttled": self.share_throttled}


@dataclass(frozen=True)
class Unnamed:
    """Most of the CPU under the process's own name, on several threads."""

    name: str
    threads: int      # the most live threads that bore it at one reading
    share: float      # of all the threads' CPU

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "threads": self.threads, "share": self.share}


def unnamed(shares: Sequence[ThreadShare], readings: Sequence[ThreadReading]) -> Unnamed | None:
    """The process's own name when it holds :data:`UNNAMED` of the CPU or more and more than
    one thread bore it (None otherwise, and for files from before the count was kept)."""
    if not shares or not shares[0].share >= UNNAMED:
        return None
    top = shares[0]
    threads = max((r.as_process.get(top.name, 0) for r in readings), default=0)
    return Unnamed(top.name, threads, top.share) if threads > 1 else None


@dataclass(frozen=True)
class ThreadsReport:
    """The run's CPU by thread name, or why it is not known (``unknown``)."""

    shares: tuple[ThreadShare, ...] = ()     # the biggest first
    total_ns: int = 0
    usage_ns: int | None = None   # the group's usage over the same span (the timeline's)
    source: str = ""
    unknown: str | None = None
    problems: tuple[str, ...] = ()           # threads not seen for a while, and why
    unnamed: Unnamed | None = None           # most CPU under the process's own name

    @property
    def outside(self) -> list[ThreadShare]:
        return outside_request_path(self.shares)


def outside_request_path(shares: Sequence[ThreadShare]) -> list[ThreadShare]:
    """The names of a runtime's own threads (compilers, collectors, the VM's; the ended
    threads') that spent CPU in the periods throttled."""
    return [s for s in shares if _RUNTIME.match(s.name) and (s.share_throttled or 0.0) > 0]


def _throttled_fraction(timeline: Sequence[CgroupSample], starts: np.ndarray,
                        ends: np.ndarray) -> np.ndarray:
    """For each span, the part of the group's usage in it that fell in sample intervals in
    which any level's ``nr_throttled`` grew (linear within a sample interval)."""
    t = np.asarray([s.t_ns for s in timeline], dtype=float)
    usage = np.asarray([s.usage_ns for s in timeline], dtype=float)
    throttled = np.asarray([s.nr_throttled + sum(level[1] for level in s.levels)
                            for s in timeline], dtype=float)
    grew = np.diff(throttled) > 0
    hit = np.concatenate([[0.0], np.cumsum(np.where(grew, np.diff(usage), 0.0))])
    used = np.interp(ends, t, usage) - np.interp(starts, t, usage)
    in_hit = np.interp(ends, t, hit) - np.interp(starts, t, hit)
    return np.where(used > 0, in_hit / np.where(used > 0, used, 1.0), 0.0)


def thread_shares(readings: Sequence[ThreadReading],
                  timeline: Sequence[CgroupSample]) -> tuple[ThreadShare, ...]:
    """Each name's CPU between the first and last reading, over the run and in the periods
    throttled (the biggest first)."""
    if len(readings) < 2:
        return ()
    names = sorted({name for r in readings for name in r.cpu_ns})
    cum = np.asarray([[r.cpu_ns.get(name, 0) for name in names] for r in readings], dtype=float)
    deltas = np.diff(cum, axis=0)
    if len(timeline) >= 2:
        starts = np.asarray([r.t_ns for r in readings[:-1]], dtype=float)
        ends = np.asarray([r.t_ns for r in readings[1:]], dtype=float)
        weights = _throttled_fraction(timeline, starts, ends)
    else:
        weights = np.zeros(len(deltas))
    spent = deltas.sum(axis=0)
    hit = (deltas * weights[:, None]).sum(axis=0)
    total, total_hit = float(spent.sum()), float(hit.sum())
    shares = [ThreadShare(name, round(float(spent[k])),
                          float(spent[k]) / total if total > 0 else float("nan"),
                          float(hit[k]),
                          float(hit[k]) / total_hit if total_hit > 0 else None)
              for k, name in enumerate(names) if spent[k] > 0]
    return tuple(sorted(shares, key=lambda s: (-s.cpu_ns, s.name)))


def threads_report(run: Run) -> ThreadsReport | None:
    """The CPU by thread of a run watched with ``--cgroup`` (None: no timeline, nothing to
    say), from its ``<name>.threads.csv`` as read (``run.threads``)."""
    if not run.timeline:
        return None
    threads = run.threads
    if threads is None:
        return ThreadsReport(unknown=f"not recorded (no {threads_path(run.path)}: a timeline "
                                     "imported, from the node agent, or from before threads "
                                     "were read)")
    if threads.error is not None:
        return ThreadsReport(unknown=threads.error)
    readings, problems, timeline = threads.readings, threads.problems, run.timeline
    if len(readings) < 2:
        why = problems[0] if problems else "fewer than two readings of the threads"
        return ThreadsReport(unknown=f"not seen ({why})", problems=tuple(problems))
    shares = thread_shares(readings, timeline)
    first, last = readings[0].t_ns, readings[-1].t_ns
    t = [s.t_ns for s in timeline]
    usage = [s.usage_ns for s in timeline]
    seen_usage = round(float(np.interp(last, t, usage) - np.interp(first, t, usage)))
    return ThreadsReport(shares, sum(s.cpu_ns for s in shares), seen_usage,
                         f"{threads.path.name} (/proc/PID/task/TID/schedstat, every "
                         f"{(last - first) / max(1, len(readings) - 1) / 1e9:.2g} s)",
                         problems=tuple(problems), unnamed=unnamed(shares, readings))


def run_readings(run: Run) -> list[ThreadReading]:
    """The threads' readings of a run (``<name>.threads.csv`` as read); none when it has no
    such file or it cannot be read (``report`` says why)."""
    return list(run.threads.readings) if run.threads is not None else []


def threads_per_period(readings: Sequence[ThreadReading], edges_ns: Sequence[int],
                       top: int = 4) -> list[tuple[str, list[float]]]:
    """The CPU (ns) of the ``top`` names over the span, then of all the rest (``other``), in
    each interval between two ``edges_ns`` (linear between readings: they are less frequent
    than the periods). Empty with fewer than two readings or edges."""
    if len(readings) < 2 or len(edges_ns) < 2:
        return []
    t = np.asarray([r.t_ns for r in readings], dtype=float)
    edges = np.asarray(edges_ns, dtype=float)
    names = sorted({name for r in readings for name in r.cpu_ns})
    per: dict[str, np.ndarray] = {}
    for name in names:
        cum = np.asarray([r.cpu_ns.get(name, 0) for r in readings], dtype=float)
        per[name] = np.diff(np.interp(edges, t, cum))
    ranked = sorted(names, key=lambda n: (-float(per[n].sum()), n))
    ranked = [n for n in ranked if per[n].sum() > 0]
    series = [(name, [float(v) for v in per[name]]) for name in ranked[:top]]
    rest = ranked[top:]
    if rest:
        series.append((OTHER, [float(v) for v in sum((per[n] for n in rest),
                                                     np.zeros(len(edges) - 1))]))
    return series


def top_between(before: ThreadReading, after: ThreadReading,
                count: int = 3) -> list[tuple[str, int, float]]:
    """The ``count`` names that used the most CPU between two readings of the same threads:
    ``(name, cpu_ns, share of all the threads' CPU then)``, the biggest first."""
    used = {name: ns - before.cpu_ns.get(name, 0) for name, ns in after.cpu_ns.items()}
    total = sum(ns for ns in used.values() if ns > 0)
    ranked = sorted(((ns, name) for name, ns in used.items() if ns > 0), reverse=True)
    return [(name, ns, ns / total) for ns, name in ranked[:count]]
