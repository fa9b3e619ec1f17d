"""Where ``advise --passive``'s recorded window comes from, and the answer over it: a timeline
file (``--timeline``), a workload's recorded pods (``--k8s NS/KIND/NAME``, the node agent's
window of ``--since`` to ``--until``), or a group recorded now (``--cgroup TARGET
--duration S``). :func:`passive_over` gives the one answer, :func:`replicas_over` each
replica count's (``--replicas``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from client.advise.answer import Answer
from client.advise.cluster import advise_workload, recorded_workload
from client.advise.passive import Window, advise_timeline
from client.advise.replicas import (Sized, Spread, replicas_timeline, replicas_workload,
                                    service_spread)
from client.advise.vpa import vpa_check
from client.analysis.goal import LatencyGoal

__all__ = ["Source", "passive_over", "replicas_over"]


@dataclass(frozen=True)
class Source:
    """The recorded window: ``timeline``, else the workload ``k8s``'s pods (the ``since_s``
    seconds to ``until``, None: now), else what ``record`` records now (its timeline)."""

    timeline: Path | None
    k8s: str | None
    since_s: float
    until: float | None
    record: Callable[[], Path]


def passive_over(source: Source, target: LatencyGoal, window: Window, *, despite_vpa: bool,
                 say: Callable[[str], None]) -> Answer:
    """The passive answer over the window (a workload's: stopped first by a VPA that updates
    it, unless ``despite_vpa``; ``say`` the line that says it went on)."""
    if source.k8s is not None:
        workload = recorded_workload(source.k8s)
        ref = workload.ref
        if (line := vpa_check(ref.namespace, ref.kind, ref.name, despite_vpa)) is not None:
            say(line)
        return advise_workload(workload, source.since_s, source.until, target, window)
    if source.timeline is not None:
        return advise_timeline(source.timeline, target, window)
    return advise_timeline(source.record(), target, window)


def replicas_over(source: Source, target: LatencyGoal, window: Window, spread: Spread) -> Sized:
    """Each replica count's smallest limit over the window, and the least total; a
    workload's stopped first where its Services cannot tell the spread and ``--spread`` was
    not given (``client.advise.replicas.service_spread``)."""
    if source.k8s is not None:
        workload = recorded_workload(source.k8s)
        through = service_spread(workload, spread)
        sized = replicas_workload(workload, source.since_s, source.until, target, window, spread)
        return replace(sized, says=f"{sized.says}; {through}")
    timeline = source.timeline if source.timeline is not None else source.record()
    return replicas_timeline(timeline, target, window, spread)
