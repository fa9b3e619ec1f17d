"""``http-timing cluster``: every recorded workload of a cluster at a glance, from what the node
agents recorded (``client.analysis.cluster``): no resize, no load.

    http-timing cluster [-n NS | -A] [--since DURATION] [--p99 MS | --max-delay-ms MS]
                        [--json | --csv] [--picture DIR] [--data-dir DIR]
                        [--prometheus URL | k8s:NS/SERVICE[:PORT]] [--until TIME]

The workloads and their pods come from the API (``client.run.k8s_workloads``); each recorded
pod's window of the last ``--since`` from its node's agent through the API server's
``pods/proxy``, as ``import --timeline k8s:`` fetches it. With ``--prometheus``, the agent's
counters as Prometheus kept them instead (``client.analysis.cluster_prometheus``): longer
windows, without what needs each period. A window ends now, or at ``--until``. A workload
that an HPA scales has it in its row: its CPU target, min-max, and, where the record allows,
the highest target that keeps the delay goal at the current limit (``client.advise.hpa``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from client.advise.cluster import DEFAULT_SINCE_S, pod_windows, row_of
from client.advise.hpa import cluster_hpa
from client.analysis.goal import LatencyGoal
from client.analysis.cluster import (NO_WINDOW, ClusterRow, WorkloadLimits, no_quota,
                                     none_advised, sort_rows)
from client.analysis.cluster_prometheus import (combined, covers, departed_pods,
                                                prometheus_row, resolution)
from client.commands.common import EXIT_OK
from client.commands.exits import EXIT_NOT_MET
from client.commands.options import (CliError, OneLineParser, check_folder, duration, instant,
                                     iso_utc, number_above)
from client.data.jsonsafe import json_ready
from client.render.cluster import format_cluster, format_cluster_csv, save_cluster_picture
from client.run.k8s_workloads import (RECORD_LABEL, Workload, WorkloadError, WorkloadRef,
                                      fetch_all_windows, list_workloads,
                                      stream_all_windows)
from client.run.k8s_hpa import hpa_for, list_hpas
from client.run.k8s_vpa import Vpa, VpaError, list_vpas, vpa_modes
from client.run.kube_api import KubeError, connect, current_namespace
from client.run.prometheus import Prometheus, PrometheusError, open_prometheus
from client.run.prometheus_query import Totals, pod_totals, pods_seen

__all__ = ["AGENT_WINDOWS_S", "DEFAULT_DELAY_MS", "agents_keep", "build_cluster_parser",
           "command_cluster"]

DEFAULT_DELAY_MS = 10.0
POD_LEVEL = ("the pod-level limit (spec.resources.limits.cpu, on the pod's group) is the one "
             "that binds: LIMIT is it, the quota counted is the pod's")
AGENT_WINDOWS_S = 3600.0   # --prometheus: the agents' windows are asked for up to this --since
def build_cluster_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="http-timing cluster",
        description="A row per Deployment, StatefulSet and DaemonSet whose pods the node agent "
        "records: limit and request, usage p95 (krr), VPA's rule, periods throttled, added "
        "delay p99 now, and the smallest limit whose replay keeps that delay within the "
        "target; sorted by what throttling costs now. Reads the API and the agents (through "
        "the API server's pods/proxy); changes nothing.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", metavar="NS",
                       help="the namespace to read (default: the kubeconfig's current "
                       "context's, as kubectl; default if it names none)")
    where.add_argument("-A", "--all-namespaces", action="store_true",
                       help="every namespace")
    parser.add_argument("--since", type=duration, default=DEFAULT_SINCE_S, metavar="DURATION",
                        help="the window: the last DURATION (90s, 10m, 1h, 7d; default 10m)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--max-delay-ms", type=number_above(0), metavar="MS",
                        help="the target: the delay throttling adds to a request arriving at "
                        f"a random instant, p99 at most MS (default {DEFAULT_DELAY_MS:g})")
    target.add_argument("--p99", type=number_above(0), metavar="MS",
                        help="the same target under advise's name (with no requests, advise "
                        "--passive judges the added delay's p99 against --p99)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the rows as JSON")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")
    parser.add_argument("--picture", type=Path, metavar="DIR",
                        help="also draw each workload's picture there (<ns>_<kind>_<name>.png):"
                        " CPU per period against the limit now and the recommended one, the "
                        "throttled periods marked")
    parser.add_argument("--prometheus", metavar="URL|k8s:NS/SERVICE[:PORT]",
                        help="read the node agent's counters from this Prometheus instead "
                        "(a URL, or a service through the API server's proxy, as krr): for a "
                        "--since longer than the agents keep; gives periods, periods "
                        "throttled, throttled time, usage p95, VPA's rule and the wait "
                        "histogram's p99; the added delay and a recommended limit need each "
                        "period: from the agents' windows when --since is at most "
                        f"{AGENT_WINDOWS_S / 3600:g}h and they cover it, else left out")
    parser.add_argument("--until", type=instant, metavar="TIME",
                        help="the window ends at TIME (unix seconds, or ISO 8601 with its zone: "
                        "2026-11-28T14:00:00Z) instead of now, e.g. the --since before an "
                        "incident's end; from the agents while it begins within their "
                        f"{AGENT_WINDOWS_S / 3600:g}h, else with --prometheus (what needs each "
                        "period then left out)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR",
                        help="keep the fetched windows there (<ns>_<pod>.cgroup.csv and .json; "
                        "default: a temporary folder, removed)")
    return parser


def agents_keep(since_s: float, until: float | None, now: float) -> bool:
    """Whether the window of ``since_s`` seconds to ``until`` (None: ``now``) begins within
    the :data:`AGENT_WINDOWS_S` the node agents are asked for."""
    return (now if until is None else until) - since_s >= now - AGENT_WINDOWS_S


def _rows(workloads: list[Workload], since_s: float, until: float | None, dest: Path,
          target: LatencyGoal, pictures: Path | None = None,
          hpas: dict[str, dict[str, Any]] | None = None
          ) -> tuple[list[ClusterRow], list[str]]:
    rows: list[ClusterRow] = []
    unrecorded = [str(w.ref) for w in workloads if not any(p.recorded for p in w.pods)]
    # each workload replayed as soon as its windows are in, while the others arrive
    for workload, fetched in stream_all_windows(
            [w for w in workloads if any(p.recorded for p in w.pods)], since_s, dest,
            until=until):
        got = pod_windows(workload, since_s, dest, fetched)
        limits = WorkloadLimits(str(workload.ref), workload.limit_cpus, workload.request_cpus,
                                workload.replicas)
        hpa = None if hpas is None or str(workload.ref) not in hpas else cluster_hpa(
            hpas[str(workload.ref)], workload.limit_cpus, workload.request_cpus,
            [r.path for r in got.recordings], target)
        if not got.windows:
            rows.append(ClusterRow(str(workload.ref), workload.limit_cpus,
                                   workload.request_cpus, 0, 0.0, None, None, None, None, None,
                                   None, None, None, None, (NO_WINDOW,),
                                   tuple(got.missing),
                                   no_quota=None if workload.limit_cpus is not None
                                   else no_quota(None), hpa=hpa))
            continue
        rows.append(dataclasses.replace(row_of(limits, got.windows, target, got.missing),
                                        hpa=hpa))
        if pictures is not None:
            ref = workload.ref
            save_cluster_picture(rows[-1], got.windows, pictures /
                                 f"{ref.namespace}_{ref.kind.lower()}_{ref.name}.png")
    return sort_rows(rows), unrecorded


def _prometheus_rows(prometheus: Prometheus, workloads: list[Workload], namespace: str | None,
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


def _vpa_modes(namespace: str | None) -> dict[str, Vpa]:
    """Each targeted workload (``NS/kind/NAME``) -> its VPA; {} where the API has none, or
    (said in one line on stderr) where they cannot be read."""
    try:
        vpas = list_vpas(connect(), namespace)
    except (VpaError, KubeError) as exc:
        print(f"http-timing cluster: VPA MODE not known: {exc}", file=sys.stderr)
        return {}
    return {str(WorkloadRef(ns, kind, name)): vpa
            for (ns, kind, name), vpa in vpa_modes(vpas).items()}


def _hpas(namespace: str | None, workloads: list[Workload]) -> dict[str, dict[str, Any]]:
    """Each workload (``NS/kind/NAME``) -> the HPA that scales it; {} (said in one line on
    stderr) where they cannot be read."""
    try:
        found = list_hpas(namespace)
    except WorkloadError as exc:
        print(f"http-timing cluster: HPA not known: {exc}", file=sys.stderr)
        return {}
    out = {}
    for w in workloads:
        if (hpa := hpa_for(w.ref, found)) is not None:
            out[str(w.ref)] = hpa
    return out


def command_cluster(argv: list[str]) -> int:
    opts = build_cluster_parser().parse_args(argv)
    check_folder("--data-dir", opts.data_dir)
    check_folder("--picture", opts.picture)
    delay = opts.p99 if opts.p99 is not None else opts.max_delay_ms or DEFAULT_DELAY_MS
    target = LatencyGoal(delay, None, None)
    prometheus, steps = None, None
    if (opts.until is not None and opts.prometheus is None
            and not agents_keep(opts.since, opts.until, time.time())):
        raise CliError(f"the window of --since {opts.since:g} s to --until "
                       f"{iso_utc(opts.until)} begins more than {AGENT_WINDOWS_S / 3600:g}h "
                       "ago, before what the node agents are asked for: add --prometheus URL")
    if opts.until is not None and opts.until > time.time():
        raise CliError(f"--until {iso_utc(opts.until)} is in the future")
    if opts.prometheus is not None:
        if opts.picture is not None:
            raise CliError("--picture draws each period, which Prometheus does not keep: "
                           "drop --prometheus (a --since within the agents' windows)")
        try:
            prometheus = open_prometheus(opts.prometheus)
            prometheus.check()   # before the API: an unreachable one is said at once
        except PrometheusError as exc:
            raise CliError(str(exc)) from None
    try:
        namespace = None if opts.all_namespaces else opts.namespace or current_namespace()
        where = "every namespace" if namespace is None else f"namespace {namespace}"
        workloads = list_workloads(namespace)
    except (WorkloadError, KubeError) as exc:
        raise CliError(str(exc)) from None
    vpas, hpas = _vpa_modes(namespace), _hpas(namespace, workloads)
    if not any(p.recorded for w in workloads for p in w.pods):
        raise CliError(f"no workload in {where} has a pod the node agent records: label its "
                       "pods throttle-lab/record=true (and kubectl apply -k k8s/recorder)")
    with tempfile.TemporaryDirectory(prefix="cluster-") as scratch:
        dest = opts.data_dir if opts.data_dir is not None else Path(scratch)
        if prometheus is not None:
            try:
                rows, unrecorded, asked = _prometheus_rows(prometheus, workloads, namespace,
                                                           opts.since, opts.until, dest, target)
                rows = [r if r.workload not in hpas else dataclasses.replace(
                    r, hpa=cluster_hpa(hpas[r.workload], r.limit_cpus, r.request_cpus, [],
                                       target)) for r in rows]
            except PrometheusError as exc:
                raise CliError(str(exc)) from None
            source = f" from Prometheus at {prometheus.where}"
            steps = {"step_s": asked.step_s, "steps": asked.steps, "start": asked.start,
                     "end": asked.end, "usage_step_s": asked.usage_step_s,
                     "usage_steps": asked.usage_steps, "usage_start": asked.usage_start,
                     "queries": len(asked.asked),
                     "says": resolution(asked.step_s, asked.usage_step_s)}
        else:
            rows, unrecorded = _rows(workloads, opts.since, opts.until, dest, target,
                                     opts.picture, hpas)
            source = " from the node agents"
    pod_level = {str(w.ref) for w in workloads if w.limit_level == "pod"}
    rows = [r if r.workload not in pod_level else dataclasses.replace(
        r, notes=(POD_LEVEL, *r.notes)) for r in rows]
    rows = [r if r.workload not in vpas else dataclasses.replace(
        r, vpa_mode=vpas[r.workload].mode, notes=(*r.notes, *(
            [f"under {vpas[r.workload].words()}: its updater changes the limit again, so a "
             "limit set by hand would not stay"] if vpas[r.workload].updating else [])))
        for r in rows]
    window = (f"the last {opts.since:g} s" if opts.until is None
              else f"the {opts.since:g} s to {iso_utc(opts.until)}")
    header = f"cluster: {where}, {window}{source}" + (
        f"; target: added delay p99 <= {delay:g} ms"
        if any(r.recommended_cpus is not None for r in rows) or prometheus is None else "")
    if opts.json:
        print(json.dumps(json_ready({
            "namespace": namespace, "since_s": opts.since, "until": opts.until,
            "source": source.removeprefix(" from "), "resolution": steps,
            "target": {"added_delay_p99_ms": delay},
            "workloads": [r.to_dict() for r in rows if r.no_quota is None],
            # listed apart: no quota on their pods' groups, so no throttling figure
            "no_quota": [r.to_dict() for r in rows if r.no_quota is not None],
            "not_recorded": unrecorded}), indent=2))
    elif opts.csv:
        print(format_cluster_csv(rows), end="")
    else:
        print(format_cluster(rows, header if steps is None else
                             f"{header}\n{steps['says']} ({steps['steps']} of them, "
                             f"{steps['queries']} queries)"))
    if unrecorded:
        print(f"{len(unrecorded)} workload(s) not recorded (no pod labelled "
              f"throttle-lab/record=true): {', '.join(unrecorded)}", file=sys.stderr)
    if none_advised(rows):   # as advise: no recommendation, each row says why
        print("no workload could be advised: each row's notes say why", file=sys.stderr)
        return EXIT_NOT_MET
    return EXIT_OK
