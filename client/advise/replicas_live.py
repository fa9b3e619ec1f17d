"""``advise --k8s NS/deployment/NAME --replicas 1,2,3,4``: the passive ``--replicas`` answer
(:mod:`client.advise.replicas`) verified on the running Deployment.

For each replica count N: the Deployment scaled to N (``client.run.k8s_scale.Scaler``), every
pod then running resized alike in place to each limit L tried (the live advice's
``client.run.inplace.InPlace`` over the Deployment's pods), the load timed through the
``--url`` (the Service, which spreads it over the N pods as it spreads any traffic), each
limit judged as the live advice judges a run (``client.analysis.goal.measured``), the one
search (:mod:`client.advise.search`) from the recorded limit times M/N (M: the count when we
came). For each N: the smallest L that met the goal, the total N × L, the measured p99; the
least total marked, in the passive answer's shape (``client.render.replicas`` draws both).

Nothing is left changed: every pod's limit is put back before the count changes again
(``InPlace.holding``), and the count is put back at the end (``Scaler.holding``), whatever
ends it (an error, Ctrl-C, SIGTERM); afterwards every pod's limit is read again and said. A
count the nodes cannot hold (a pod Pending past the timeout) is one line, after which the count
is put back. An HPA that scales the Deployment would fight the counts: one line, unless told
(``--despite-hpa``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from client.advise import AdviseError
from client.advise.search import Rules, Search
from client.analysis.advise import (conclude, floor_millicores, needs_repeat, shape,
                                    to_confirm, to_recheck, verdicts)
from client.analysis.goal import LatencyGoal, Measured, measured
from client.analysis.report import build_report
from client.data.metadata import SweepInfo
from client.data.naming import run_name, sweep_stem
from client.run.at_limit import RUN_ERRORS, AtLimit
from client.run.k8s_scale import PodsNow, Scaler
from client.run.k8s_workloads import WorkloadError
from client.run.measure import Progress
from client.run.plan import LoadPlan
from cpuquota.limit import Limit

__all__ = ["LiveAsked", "LiveSized", "LiveSizing", "RunAt", "hpa_refusal", "run_at",
           "size_live"]

# one run at a limit on the pods as they are: (the pods' AtLimit, limit, role, run name)
RunAt = Callable[[AtLimit, Limit, str, str], Measured]


@dataclass(frozen=True)
class LiveAsked:
    """What the live replica sizing was asked, in plain values."""

    counts: tuple[int, ...]
    target: LatencyGoal
    plan: LoadPlan
    prefix: str
    started: datetime
    data_dir: Path
    period_ms: float
    burst_ms: float = 0.0
    max_runs: int = 8          # the most limits judged per replica count


@dataclass(frozen=True)
class LiveSizing:
    """N replicas: every run at every limit tried, the smallest limit that met (pooled over
    its runs; None: none up to ``ceiling``), the pods that ran."""

    replicas: int
    runs: tuple[Measured, ...]
    at: Measured | None
    ceiling: int                       # millicores per replica
    pods: tuple[str, ...]
    reason: str | None = None

    @property
    def millicores(self) -> int | None:
        return None if self.at is None else self.at.millicores

    @property
    def met(self) -> bool:
        return self.millicores is not None

    @property
    def total(self) -> int | None:
        """N × L, millicores (None: no limit met)."""
        return None if self.millicores is None else self.replicas * self.millicores

    def to_dict(self, least: bool) -> dict[str, Any]:
        at = self.at
        return {
            "replicas": self.replicas, "met": self.met, "least": least,
            "cpus": None if self.millicores is None else self.millicores / 1000,
            "total_cpus": None if self.total is None else self.total / 1000,
            "p99_ms": None if at is None else at.p99_ms,
            "p90_ms": None if at is None else at.p90_ms,
            "judged_p99_ms": None if at is None else at.judged_p99,
            "measured": True, "range": None, "sure": None,
            "range_says": "measured: no range (each limit run, once more where narrow)",
            "requests_per_replica": None, "reason": self.reason, "pods": list(self.pods),
            "ceiling_cpus": self.ceiling / 1000,
            "runs": [run.to_dict() for run in self.runs]}


def _least(sizings: Sequence[LiveSizing]) -> LiveSizing | None:
    """The least total among those that met (the fewer replicas on a tie), as the passive
    answer's ``client.analysis.spread.least``."""
    met = [s for s in sizings if s.total is not None]
    return min(met, key=lambda s: (s.total or 0, s.replicas)) if met else None


@dataclass(frozen=True)
class LiveSized:
    """The answer over the replica counts, measured, and what was put back."""

    target: LatencyGoal
    workload: str
    load: str                       # the load and what each request is
    sizings: tuple[LiveSizing, ...]
    restored: dict[str, Any]        # the count and the pods' limits, read again at the end

    @property
    def least(self) -> LiveSizing | None:
        return _least(self.sizings)

    @property
    def met(self) -> bool:
        return self.least is not None

    def to_dict(self) -> dict[str, Any]:
        best = self.least
        ceilings = [s.ceiling for s in self.sizings]
        return {
            "live": True, "passive": False, "workload": {"name": self.workload},
            "target": self.target.to_dict(), "load": self.load,
            "judged_by": "the measured requests (p99, p90; those slow without throttling "
                         "counted apart, as live advise judges a run)",
            "spread": {"how": "service", "seed": None,
                       "says": "by the Service itself (the requests sent to --url; kube-proxy "
                               "or the Ingress spreads them over the N pods)"},
            "ceiling_cpus_per_replica": min(ceilings) / 1000 if ceilings else None,
            "replicas": [s.to_dict(s is best) for s in self.sizings],
            "least": None if best is None else {
                "replicas": best.replicas, "cpus": (best.millicores or 0) / 1000,
                "total_cpus": (best.total or 0) / 1000},
            "restored": self.restored}


def hpa_refusal(ref: str, hpa: tuple[str, dict[str, Any]] | None, despite: bool) -> str | None:
    """An ``AdviseError`` where an HPA scales the workload (it would fight the counts),
    unless ``despite``: then the line to say (None: no HPA)."""
    if hpa is None:
        return None
    name, obj = hpa
    spec = obj.get("spec") or {}
    words = (f"the HPA {name} scales {ref} ({spec.get('minReplicas', 1)} to "
             f"{spec.get('maxReplicas')} replicas)")
    if not despite:
        raise AdviseError(f"--replicas: {words}: it would change the replica count under the "
                          "runs; --despite-hpa to go on all the same")
    return f"advise: {words}: going on (--despite-hpa); it may change the count meanwhile"


def _start(pods: PodsNow, original: int, replicas: int, floor: int, ceiling: int) -> int:
    """The first limit per replica: the pods' limit now times M/N (the same total)."""
    limits = [v for v in pods.limits.values() if v is not None]
    if not limits:
        return max(floor, ceiling // 2)
    return max(floor, min(ceiling, round(limits[0] * 1000 * original / replicas)))


def size_live(asked: LiveAsked, scaler: Scaler, open_at: Callable[[], AtLimit], run: RunAt,
              say: Callable[[str], None] = lambda line: None) -> LiveSized:
    """Each replica count's smallest limit, measured (see the module docstring); ``open_at``:
    the Deployment's pods as they run now, at a limit set in place; ``run``: one run there.
    The count and the limits are put back whatever ends it."""
    limit_of = shape(asked.period_ms, asked.burst_ms)
    floor = floor_millicores(asked.period_ms)
    target, names = asked.target, set()
    sizings: list[LiveSizing] = []
    ref = str(scaler.ref)
    try:
        with scaler.holding(say):
            before = scaler.pods()
            original = scaler.original or len(before.ready)
            for n in asked.counts:
                say(f"\nreplicas: {n}: scaling {ref} to {n}")
                pods = scaler.scale(n)
                say(f"replicas: {n} ready: {', '.join(pods.ready)}")
                at = open_at()
                try:
                    ceiling, words = at.ceiling(limit_of)
                except ValueError as exc:
                    raise AdviseError(str(exc)) from None

                def judge(millicores: int, role: str, again: bool, at: AtLimit = at,
                          n: int = n) -> Measured:
                    limit = limit_of(millicores)
                    name = run_name(asked.prefix, f"replicas{n}", limit)
                    unique, count = name, 1
                    while unique in names:
                        count += 1
                        unique = f"{name}-{count}"
                    names.add(unique)
                    return run(at, limit, role, unique)

                search: Search[Measured] = Search(
                    judge, Rules(lambda rows: verdicts(rows, target), needs_repeat,
                                 lambda rows: to_recheck(rows, target),
                                 lambda rows: to_confirm(rows, target)),
                    start=_start(before, original, n, floor, ceiling), floor=floor,
                    ceiling=ceiling, max_runs=asked.max_runs, say=say)
                with at.holding():
                    search.at(search.start, "guess")
                    search.run()
                best, _ = conclude(search.rows, target)
                top = max((r.millicores or 0 for r in search.rows), default=0)
                reason = None if best is not None else (
                    f"no limit up to {words} each met {target.describe()} with {n} replicas"
                    if top >= ceiling else
                    f"none of the limits tried, up to {top / 1000:g} CPU each, met "
                    f"{target.describe()} with {n} replicas (--max-runs {asked.max_runs} "
                    "reached)")
                sizings.append(LiveSizing(n, tuple(search.rows), best, ceiling, pods.ready,
                                          reason))
    except WorkloadError as exc:
        raise AdviseError(str(exc)) from None
    after = scaler.pods()
    was = sorted({v for v in before.limits.values()}, key=lambda v: (v is None, v or 0))
    now = {pod: cpus for pod, cpus in after.limits.items()}
    changed = {pod: cpus for pod, cpus in now.items() if cpus not in was}
    restored = {"replicas": scaler.original, "pods": list(after.ready),
                "limits_cpus": now, "limits_before_cpus": was,
                "limits_as_before": not changed}
    if changed:
        say("replicas: pods whose limit is not the one they had: "
            + ", ".join(f"{pod} {cpus}" for pod, cpus in changed.items()))
    else:
        say(f"replicas: every pod's limit is as before ({', '.join(map(_cpus, was))} CPU)")
    load = f"{asked.plan.describe()}"
    return LiveSized(target, ref, load, tuple(sizings), restored)


def _cpus(value: float | None) -> str:
    return "no limit" if value is None else f"{value:g}"


def run_at(asked: LiveAsked, say: Callable[[str], None] = lambda line: None,
           progress: Callable[[int | None, str], Progress] | None = None) -> RunAt:
    """One timed run of ``asked.plan`` at a limit, judged as the live advice judges one (its
    files in ``asked.data_dir``); a run that cannot be made is one line, Ctrl-C ends it."""

    def run(at: AtLimit, limit: Limit, role: str, name: str) -> Measured:
        from client.render.advise import limit_words

        sweep = SweepInfo(sweep_stem(asked.prefix, "replicas"), at.name, limit.cpus,
                          asked.started.isoformat())
        try:
            done = at.measure(limit, name=name, plan=asked.plan, data_dir=asked.data_dir,
                              sweep=sweep, progress=None if progress is None
                              else progress(asked.plan.requests, limit_words(limit)),
                              on_target=lambda words: say(f"\n{name}: {words} at "
                                                          f"{limit_words(limit)}"))
        except RUN_ERRORS as exc:
            raise AdviseError(f"{exc} (runs so far are saved in {asked.data_dir})") from None
        if done.interrupted:
            raise KeyboardInterrupt
        report = build_report(done.run)
        row = measured(report, role=role, limit=limit, target=asked.target,
                       records=done.run.records)
        say(f"{name}: p99 {row.p99_ms:.1f} ms (judged {row.judged_p99:.1f}): "
            + ("met" if row.met else "missed"))
        return row
    return run

