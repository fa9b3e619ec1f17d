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
import json
import sys
import tempfile
import time
from pathlib import Path

from client.advise import AdviseError
from client.advise.cluster import DEFAULT_SINCE_S
from client.advise.cluster_rows import (AGENT_WINDOWS_S, MAX_JOBS, POOL_FROM, agents_keep,
                                       cluster_table, jobs_default)
from client.analysis.cluster import none_advised
from client.analysis.goal import LatencyGoal
from client.commands.common import EXIT_OK
from client.commands.exits import EXIT_INTERRUPTED, EXIT_NOT_MET
from client.commands.options import (CliError, OneLineParser, check_folder, duration, instant,
                                     int_in, iso_utc, number_above)
from client.data.jsonsafe import json_ready
from client.render.cluster import format_cluster, format_cluster_csv, save_cluster_picture
from client.run.kube_api import KubeError, current_namespace
from client.run.prometheus import PrometheusError, open_prometheus
from client.run.recorder import stop_on_terminate

__all__ = ["DEFAULT_DELAY_MS", "build_cluster_parser", "command_cluster"]

DEFAULT_DELAY_MS = 10.0


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
    parser.add_argument("--jobs", type=int_in(1, 64), metavar="N",
                        help="replay the agents' windows in N processes at once (default: the "
                        "CPUs this process may use, no more than its cgroup's CPU quota, at "
                        f"most {MAX_JOBS}; 1: in this process; "
                        f"a table of fewer than {POOL_FROM} recorded workloads, or with "
                        "--picture, is replayed in this process)")
    return parser


def command_cluster(argv: list[str]) -> int:
    try:
        with stop_on_terminate():   # SIGTERM as Ctrl-C: the workers end with the pool
            return _cluster(argv)
    except KeyboardInterrupt:
        print("http-timing cluster: interrupted (nothing was changed)", file=sys.stderr)
        return EXIT_INTERRUPTED


def _cluster(argv: list[str]) -> int:
    opts = build_cluster_parser().parse_args(argv)
    check_folder("--data-dir", opts.data_dir)
    check_folder("--picture", opts.picture)
    delay = opts.p99 if opts.p99 is not None else opts.max_delay_ms or DEFAULT_DELAY_MS
    target = LatencyGoal(delay, None, None)
    prometheus = None
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
    except KubeError as exc:
        raise CliError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="cluster-") as scratch:
        dest = opts.data_dir if opts.data_dir is not None else Path(scratch)
        try:
            table = cluster_table(namespace, opts.since, opts.until, target, dest, prometheus,
                                  opts.picture, save_cluster_picture,
                                  opts.jobs if opts.jobs is not None else jobs_default())
        except AdviseError as exc:
            raise CliError(str(exc)) from None
    for line in table.said:
        print(f"http-timing cluster: {line}", file=sys.stderr)
    rows, unrecorded, steps = table.rows, table.unrecorded, table.resolution
    window = (f"the last {opts.since:g} s" if opts.until is None
              else f"the {opts.since:g} s to {iso_utc(opts.until)}")
    header = f"cluster: {table.where}, {window} from {table.source}" + (
        f"; target: added delay p99 <= {delay:g} ms"
        if any(r.recommended_cpus is not None for r in rows) or prometheus is None else "")
    if opts.json:
        print(json.dumps(json_ready({
            "namespace": namespace, "since_s": opts.since, "until": opts.until,
            "source": table.source, "resolution": steps,
            "replay_processes": table.processes,
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
