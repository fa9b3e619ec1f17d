"""``cluster``'s table: a row per recorded workload of a namespace (or of every namespace),
from the node agents' windows or from Prometheus, each annotated with what the API says of
it (a pod-level limit, a VPA that changes the limit, an HPA that scales it).

The workloads and their pods come from the API (``client.run.k8s_workloads``); each recorded
pod's window from its node's agent, as ``import --timeline k8s:`` fetches it, each workload
replayed as soon as its windows are in (:func:`rows_from_agents`). With Prometheus, the agent's
counters as it kept them instead (``client.analysis.cluster_prometheus``): longer windows,
without what needs each period unless the agents keep the window too
(:func:`prometheus_rows`). Nothing here prints: what could not be read beside the rows is in
:attr:`ClusterTable.said`; a problem the user can fix is an :class:`AdviseError`.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from client.advise import AdviseError
from client.advise.cluster import PodWindows, pod_windows, row_of
from client.advise.hpa import cluster_hpa
from client.analysis.cluster import (NO_WINDOW, ClusterRow, PodWindow, WorkloadLimits,
                                     no_quota, sort_rows)
from client.analysis.cluster_prometheus import (combined, covers, departed_pods,
                                                prometheus_row, resolution)
from client.analysis.goal import LatencyGoal
from client.data.timefmt import iso_utc
from client.run.k8s_hpa import hpa_for, list_hpas
from client.run.k8s_vpa import Vpa, VpaError, list_vpas, vpa_modes
from client.run.k8s_workloads import (RECORD_LABEL, Fetched, Workload, WorkloadError, WorkloadRef,
                                      fetch_all_windows, list_workloads, stream_all_windows)
from client.run.kube_api import KubeError, connect
from client.run.prometheus import Prometheus, PrometheusError
from client.run.prometheus_query import Totals, pod_totals, pods_seen
from client.run.service_group import resolve_cgroup

__all__ = ["AGENT_WINDOWS_S", "MAX_JOBS", "POD_LEVEL", "POOL_FROM", "ClusterTable",
           "agents_keep", "cluster_table", "jobs_default", "prometheus_rows",
           "replay_processes", "rows_from_agents"]

POD_LEVEL = ("the pod-level limit (spec.resources.limits.cpu, on the pod's group) is the one "
             "that binds: LIMIT is it, the quota counted is the pod's")
MAX_JOBS = 8              # cluster's worker processes, when not told (--jobs)
# the collector while replaying: a window's samples and each limit's stretches are many
# short-lived objects, and the young generation's default (700) collected ~1,200 times in 300
# workloads, each full collection walking every module's objects (0.35 s of 5.5 s, by hand)
REPLAY_GC_THRESHOLD = (10_000, 10, 10)
POOL_FROM = 16            # fewer recorded workloads than this are replayed in one process
AGENT_WINDOWS_S = 3600.0   # with Prometheus: the agents' windows are asked for up to this

# a workload's picture: its row, its pods' windows, where to draw it
Draw = Callable[[ClusterRow, Sequence[PodWindow], Path], object]


@dataclass(frozen=True)
class ClusterTable:
    """The rows (sorted: throttling first), the workloads with no recorded pod, where the
    figures came from (``"the node agents"``, ``"Prometheus at URL"``), Prometheus's steps
    (None: from the agents), what could not be read beside them, a line each, and the
    processes the replays ran in."""

    namespace: str | None
    rows: list[ClusterRow]
    unrecorded: list[str]
    source: str
    resolution: dict[str, Any] | None
    said: tuple[str, ...] = ()
    processes: int = 1   # the processes the agents' windows were replayed in

    @property
    def where(self) -> str:
        return "every namespace" if self.namespace is None else f"namespace {self.namespace}"


def agents_keep(since_s: float, until: float | None, now: float) -> bool:
    """Whether the window of ``since_s`` seconds to ``until`` (None: ``now``) begins within
    the :data:`AGENT_WINDOWS_S` the node agents are asked for."""
    return (now if until is None else until) - since_s >= now - AGENT_WINDOWS_S


def cluster_table(namespace: str | None, since_s: float, until: float | None,
                  target: LatencyGoal, dest: Path, prometheus: Prometheus | None = None,
                  pictures: Path | None = None, draw: Draw | None = None,
                  jobs: int = 1) -> ClusterTable:
    """The table of ``namespace`` (None: every namespace) over the ``since_s`` to ``until``
    (None: now), the windows kept in ``dest``; with ``pictures`` and ``draw``, each workload's
    picture drawn there (from the agents' windows only); the agents' windows replayed in
    ``jobs`` processes (:func:`rows_from_agents`)."""
    said: list[str] = []
    try:
        workloads = list_workloads(namespace)
    except (WorkloadError, KubeError) as exc:
        raise AdviseError(str(exc)) from None
    vpas, hpas = _vpa_modes(namespace, said), _hpas(namespace, workloads, said)
    where = "every namespace" if namespace is None else f"namespace {namespace}"
    if not any(p.recorded for w in workloads for p in w.pods):
        raise AdviseError(f"no workload in {where} has a pod the node agent records: label its "
                          "pods throttle-lab/record=true (and kubectl apply -k k8s/recorder)")
    steps, processes = None, 1
    if prometheus is not None:
        try:
            rows, unrecorded, asked = prometheus_rows(prometheus, workloads, namespace,
                                                      since_s, until, dest, target)
        except PrometheusError as exc:
            raise AdviseError(str(exc)) from None
        rows = [r if r.workload not in hpas else dataclasses.replace(
            r, hpa=cluster_hpa(hpas[r.workload], r.limit_cpus, r.request_cpus, [], target))
            for r in rows]
        source = f"Prometheus at {prometheus.where}"
        steps = {"step_s": asked.step_s, "steps": asked.steps, "start": asked.start,
                 "end": asked.end, "usage_step_s": asked.usage_step_s,
                 "usage_steps": asked.usage_steps, "usage_start": asked.usage_start,
                 "queries": len(asked.asked),
                 "usage_rule_pods": asked.rule_pods,
                 "says": resolution(asked.step_s, asked.usage_step_s, asked.rule_pods,
                                    sum(bool(p.usage) for p in asked.pods.values()))}
    else:
        rows, unrecorded = rows_from_agents(workloads, since_s, until, dest, target,
                                            pictures if draw is not None else None, hpas,
                                            draw, jobs)
        source = "the node agents"
        processes = replay_processes(jobs, sum(any(p.recorded for p in w.pods)
                                               for w in workloads),
                                     pictures is not None and draw is not None)
    return ClusterTable(namespace, _annotated(rows, workloads, vpas), unrecorded, source,
                        steps, tuple(said), processes)


def _annotated(rows: list[ClusterRow], workloads: Sequence[Workload],
               vpas: dict[str, Vpa]) -> list[ClusterRow]:
    """The rows with what the API says of their workloads: a pod-level limit, a VPA."""
    pod_level = {str(w.ref) for w in workloads if w.limit_level == "pod"}
    rows = [r if r.workload not in pod_level else dataclasses.replace(
        r, notes=(POD_LEVEL, *r.notes)) for r in rows]
    return [r if r.workload not in vpas else dataclasses.replace(
        r, vpa_mode=vpas[r.workload].mode, notes=(*r.notes, *(
            [f"under {vpas[r.workload].words()}: its updater changes the limit again, so a "
             "limit set by hand would not stay"] if vpas[r.workload].updating else [])))
        for r in rows]


def jobs_default() -> int:
    """The processes ``cluster`` replays in when not told (``--jobs``): the CPUs this
    process may run on (its affinity), no more than its cgroup's quota in force rounded up
    (a pod or container limited to 1.5 CPUs: 2), at most :data:`MAX_JOBS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        limit = resolve_cgroup(f"pid:{os.getpid()}").limit
    except (ValueError, OSError):   # a ServiceGroupError is one
        limit = None   # no cgroup to read (not Linux, or no cpu controller): the CPUs alone
    if limit is not None:
        cpus = min(cpus, math.ceil(limit.cpus - 1e-9))
    return max(1, min(MAX_JOBS, cpus))


def few_collections() -> None:
    """The collector as the replays want it (:data:`REPLAY_GC_THRESHOLD`), what the process
    holds so far (its modules) left out of its collections (``gc.freeze``)."""
    gc.freeze()
    gc.set_threshold(*REPLAY_GC_THRESHOLD)


@contextmanager
def replaying() -> Iterator[None]:
    """:func:`few_collections` for the block, the collector put back after."""
    before = gc.get_threshold()
    few_collections()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def replay_processes(jobs: int, recorded: int, drawing: bool) -> int:
    """The processes :func:`rows_from_agents` replays ``recorded`` workloads in: one where
    it draws pictures (in this process) or has fewer than :data:`POOL_FROM`, else ``jobs``
    (at most one a workload)."""
    if drawing or recorded < POOL_FROM:
        return 1
    return max(1, min(jobs, recorded))


def _agent_row(workload: Workload, since_s: float, dest: Path, fetched: Fetched,
               target: LatencyGoal, hpa: dict[str, Any] | None
               ) -> tuple[ClusterRow, PodWindows]:
    """A workload's row from its pods' fetched windows, and the windows (``hpa``: the HPA
    that scales it, None for none)."""
    got = pod_windows(workload, since_s, dest, fetched)
    words = None if hpa is None else cluster_hpa(
        hpa, workload.limit_cpus, workload.request_cpus, [r.path for r in got.recordings],
        target)
    if not got.windows:
        return ClusterRow(str(workload.ref), workload.limit_cpus, workload.request_cpus, 0, 0.0,
                          None, None, None, None, None, None, None, None, None, (NO_WINDOW,),
                          tuple(got.missing),
                          no_quota=None if workload.limit_cpus is not None
                          else no_quota(None), hpa=words), got
    limits = WorkloadLimits(str(workload.ref), workload.limit_cpus, workload.request_cpus,
                            workload.replicas)
    return dataclasses.replace(row_of(limits, got.windows, target, got.missing),
                               hpa=words), got


def _row_in_worker(workload: Workload, since_s: float, dest: Path, fetched: Fetched,
                   target: LatencyGoal, hpa: dict[str, Any] | None) -> ClusterRow:
    """:func:`_agent_row` in a worker process: the row alone goes back (the windows are
    read there, from the files the parent fetched)."""
    return _agent_row(workload, since_s, dest, fetched, target, hpa)[0]


PR_SET_PDEATHSIG = 1   # prctl(2): the signal a process gets when its parent ends


def _quiet_worker(parent: int) -> None:
    """A worker leaves Ctrl-C to the command (which ends the pool): no traceback of its own;
    and it ends with the command, however that ends (SIGTERM, SIGKILL: on Linux the kernel
    sends it SIGKILL then, ``PR_SET_PDEATHSIG``), and at once if the command has already."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    few_collections()   # a worker only replays
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):   # not Linux: the pool's own shutdown only
        return
    if os.getppid() != parent:   # the command ended before the call above
        os._exit(1)


def rows_from_agents(workloads: list[Workload], since_s: float, until: float | None, dest: Path,
               target: LatencyGoal, pictures: Path | None = None,
               hpas: dict[str, dict[str, Any]] | None = None, draw: Draw | None = None,
               jobs: int = 1) -> tuple[list[ClusterRow], list[str]]:
    """Each recorded workload's row from its pods' windows (the agents'), and the workloads
    with no recorded pod. Each workload is replayed as soon as its windows are in, while the
    others arrive; with ``jobs`` above 1 and at least :data:`POOL_FROM` recorded workloads
    (and no picture to draw), in that many worker processes (the replays are pure Python:
    one process uses one CPU), the rows the same as in one."""
    rows: list[ClusterRow] = []
    unrecorded = [str(w.ref) for w in workloads if not any(p.recorded for p in w.pods)]
    recorded = [w for w in workloads if any(p.recorded for p in w.pods)]
    arriving = stream_all_windows(recorded, since_s, dest, until=until)
    hpa_of = {} if hpas is None else hpas
    drawing = pictures is not None and draw is not None
    if (processes := replay_processes(jobs, len(recorded), drawing)) > 1:
        # spawned, not forked: the fetch runs in threads, and a worker needs only the
        # replay's modules
        with ProcessPoolExecutor(processes, mp_context=get_context("spawn"),
                                 initializer=_quiet_worker, initargs=(os.getpid(),)) as pool:
            # the workers started (and importing the replay) before the first window is
            # asked for, not once it arrived: a job starts them all
            pool.submit(int)
            try:
                futures = [pool.submit(_row_in_worker, workload, since_s, dest, fetched,
                                       target, hpa_of.get(str(workload.ref)))
                           for workload, fetched in arriving]
                rows = [f.result() for f in futures]
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        return sort_rows(rows), unrecorded
    with replaying():
        for workload, fetched in arriving:
            row, got = _agent_row(workload, since_s, dest, fetched, target,
                                  hpa_of.get(str(workload.ref)))
            rows.append(row)
            if pictures is not None and draw is not None and got.windows:   # drawing
                ref = workload.ref
                draw(row, got.windows,
                     pictures / f"{ref.namespace}_{ref.kind.lower()}_{ref.name}.png")
    return sort_rows(rows), unrecorded


def prometheus_rows(prometheus: Prometheus, workloads: list[Workload], namespace: str | None,
                    since_s: float, until: float | None, dest: Path, target: LatencyGoal
                    ) -> tuple[list[ClusterRow], list[str], Totals]:
    """Each recorded workload's row from Prometheus in the ``since_s`` to ``until`` (None:
    now), and what Prometheus was asked; a window the agents keep (:func:`agents_keep`)
    takes what needs each period from the agents' windows when they cover what Prometheus
    saw."""
    at = time.time() if until is None else until
    seen = pods_seen(prometheus, namespace, since_s, at)
    departed = departed_pods([(w.ref.namespace, w.ref.kind, w.ref.name) for w in workloads],
                             [(w.ref.namespace, p.name) for w in workloads for p in w.pods],
                             seen)
    wanted = {(w.ref.namespace, p.name) for w in workloads for p in w.pods if p.recorded}
    wanted |= {(w.ref.namespace, pod) for w, gone in zip(workloads, departed) for pod in gone}
    if not wanted & seen:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        raise PrometheusError(
            f"Prometheus at {prometheus.where} holds no series of the node agent's counters "
            f"for the recorded pods of {where} in the {since_s:g} s to "
            f"{iso_utc(at)}: does it scrape the agents (k8s/recorder/prometheus.yml)?")
    found = pod_totals(prometheus, wanted & seen, since_s, at)
    rows, unrecorded = [], []
    fetched = fetch_all_windows(
        [w for w in workloads if any(p.recorded for p in w.pods)], since_s, dest,
        until=until) if agents_keep(since_s, until, time.time()) else {}
    for workload, gone in zip(workloads, departed):
        if not any(p.recorded for p in workload.pods) and not gone:
            unrecorded.append(str(workload.ref))
            continue
        limits = WorkloadLimits(str(workload.ref), workload.limit_cpus, workload.request_cpus,
                                workload.replicas)
        row = prometheus_row(limits, workload.ref.namespace,
                             [p.name for p in workload.pods if p.recorded], found, gone)
        unlabelled = tuple(f"{workload.ref.namespace}/{p.name}: not recorded (label it "
                           f"{RECORD_LABEL[0]}={RECORD_LABEL[1]} for the node agent)"
                           for p in workload.pods if not p.recorded)
        row = dataclasses.replace(row, missing=(*row.missing, *unlabelled))
        if workload.ref in fetched and row.pods:
            got = pod_windows(workload, since_s, dest, fetched[workload.ref])
            short = (covers(got.windows, workload.ref.namespace,
                            [p.name for p in workload.pods], found) if got.windows
                     else "no window" + (f" ({got.missing[0]})" if got.missing else ""))
            if short is None:
                row = combined(row, row_of(limits, got.windows, target))
            else:
                row = dataclasses.replace(row, notes=(*row.notes, f"not from the agents: "
                                                      f"{short}"))
        rows.append(row)
    return sort_rows(rows), unrecorded, found


def _vpa_modes(namespace: str | None, said: list[str]) -> dict[str, Vpa]:
    """Each targeted workload (``NS/kind/NAME``) -> its VPA; {} where the API has none, or
    (a line in ``said``) where they cannot be read."""
    try:
        vpas = list_vpas(connect(), namespace)
    except (VpaError, KubeError) as exc:
        said.append(f"VPA MODE not known: {exc}")
        return {}
    return {str(WorkloadRef(ns, kind, name)): vpa
            for (ns, kind, name), vpa in vpa_modes(vpas).items()}


def _hpas(namespace: str | None, workloads: list[Workload],
          said: list[str]) -> dict[str, dict[str, Any]]:
    """Each workload (``NS/kind/NAME``) -> the HPA that scales it; {} (a line in ``said``)
    where they cannot be read."""
    try:
        found = list_hpas(namespace)
    except WorkloadError as exc:
        said.append(f"HPA not known: {exc}")
        return {}
    out = {}
    for w in workloads:
        if (hpa := hpa_for(w.ref, found)) is not None:
            out[str(w.ref)] = hpa
    return out
