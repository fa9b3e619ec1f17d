"""``cluster`` over 100 workloads: its wall time and memory (issue 46's benchmark).

    sudo .venv/bin/python -m benchmarks.cluster_scale [--workloads 100] [--busy 5]
                                                      [--repeats 3] [--since 2m]
                                                      [--settle 60] [--profile FILE]

On the project's nodes (``python -m kubenode up --nodes 2``; this module never starts or stops
them), with the node agent's DaemonSet (k8s/recorder/, 100 ms; deployed here if it does not run,
removed at the end), ``--workloads`` Deployments of one pod each in a namespace of their own
(``tl-cluster-bench``, deleted at the end), spread over the nodes in turn (pinned by
``nodeName``) and labelled for the agent: idle ones (the node's pause image) and ``--busy`` that
burn CPU in a loop under a 50m limit, throttled in every period (the pods of
``benchmarks.agent_cost_node``). After ``--settle`` seconds of recording, each of
``cluster -n NS --since S --p99 50 --json`` and ``cluster -A ...`` runs ``--repeats`` times as a
user who holds only the roles of k8s/recorder/user-rbac.yaml (``benchmarks.commands_remote``'s
kubeconfig): the median wall time, the child's peak RSS (``ru_maxrss`` from ``wait4``), the
rows it printed and whether the throttling ones come first. ``--profile FILE`` also runs
``cluster -n NS`` once under cProfile and prints where its time went; ``--baseline DIR``
times another revision's ``client`` package beside this checkout's, in each repeat. Prints the
table and writes the record (``benchmarks/records.py``; ``python -m benchmarks
cluster_scale``). Needs root; run it under the node's lock (``flock /tmp/kube.lock``).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import agent_cost_node, commands_remote
from benchmarks.support import (HTTP_TIMING, describe_load, keep_record,
                                recorder_on_every_node, run_main)

__all__ = ["NAMESPACE", "main", "timed_cluster"]

NAMESPACE = "tl-cluster-bench"
RECORD_LABEL = ("throttle-lab/record", "true")   # client/run/k8s_workloads.py
BUSY_LIMIT = "50m"


def log(msg: str) -> None:
    print(f"[cluster_scale] {msg}", file=sys.stderr, flush=True)


def workloads(count: int, busy: int, nodes: list[str]) -> list[dict[str, Any]]:
    """``count`` one-pod Deployments (the first ``busy`` burning), node by node in turn."""
    items = []
    for i in range(count):
        node = nodes[i % len(nodes)]
        if i < busy:
            doc = agent_cost_node.deployment(f"busy-{i:03d}", 1, agent_cost_node.SERVICE_IMAGE,
                                             ["python3", "-c", "while True: pass"], node)
            doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = \
                BUSY_LIMIT
        else:
            doc = agent_cost_node.deployment(f"idle-{i:03d}", 1, agent_cost_node.PAUSE_IMAGE,
                                             None, node)
        doc["metadata"]["namespace"] = NAMESPACE
        doc["spec"]["template"]["metadata"]["labels"][RECORD_LABEL[0]] = RECORD_LABEL[1]
        items.append(doc)
    return items


def all_running(n: Any, want: int) -> None:
    deadline = time.monotonic() + 600
    while True:
        pods = json.loads(n.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json").stdout)
        running = [p for p in pods["items"] if p["status"].get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")]
        if len(running) == want:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(running)} of {want} pods running after 10 min")
        time.sleep(3)


def timed_cluster(args: Sequence[str], env: dict[str, str]) -> dict[str, Any]:
    """``http-timing ARGS`` once: wall time (s), the child's peak RSS (MiB, ``wait4``), its
    exit code and the workloads its JSON printed (or its last stderr line)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([str(HTTP_TIMING), *args], env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    got: dict[str, Any] = {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024,
                           "exit": proc.returncode}
    try:
        got["workloads"] = [w["workload"] for w in json.loads(stdout)["workloads"]]
    except (ValueError, KeyError, TypeError):
        got["error"] = (stderr.strip().splitlines() or ["no output"])[-1][:200]
    return got


def profile(args: Sequence[str], env: dict[str, str], path: Path, top: int = 25) -> None:
    """``http-timing ARGS`` once under cProfile into ``path``; prints the top by own time and
    by cumulative time to stderr (not the record's table)."""
    path = path.resolve()   # run elsewhere than the checkout: ``-m`` puts the cwd on sys.path
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(path), str(HTTP_TIMING), *args],
                   env=env, cwd=path.parent, stdout=subprocess.DEVNULL, check=False)
    for order in ("tottime", "cumulative"):
        print(f"\ncProfile of cluster -n NS, by {order}:", file=sys.stderr, flush=True)
        pstats.Stats(str(path), stream=sys.stderr).sort_stats(order).print_stats(top)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100, help="one-pod Deployments")
    parser.add_argument("--busy", type=int, default=5, help="of them, throttled all the time")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command (median)")
    parser.add_argument("--since", default="2m", help="cluster's --since")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds of recording after every pod runs")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="also profile one cluster -n NS into FILE (cProfile)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also time the client package in DIR (e.g. `git archive REV "
                        "client | tar -x -C DIR`, put first on PYTHONPATH), each repeat "
                        "beside this checkout's")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("the node needs root")
    n, work, env = commands_remote.nodes_up("cluster-scale-")
    nodes = n.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    busy = [f"{NAMESPACE}/deployment/busy-{i:03d}" for i in range(opts.busy)]
    commands = {"cluster -n NS": ["cluster", "-n", NAMESPACE],
                "cluster -A": ["cluster", "-A"]}
    ways = {"": env}
    if opts.baseline is not None:
        ways[f" ({opts.baseline})"] = dict(env, PYTHONPATH=str(opts.baseline.resolve()))
    tail = ["--since", opts.since, "--p99", "50", "--json"]
    with recorder_on_every_node(n, work, log):
        n.kubectl("create", "namespace", NAMESPACE, check=False)
        try:
            t0 = time.monotonic()
            n.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "List",
                "items": workloads(opts.workloads, opts.busy, nodes)}), timeout=300)
            all_running(n, opts.workloads)
            log(f"{opts.workloads} pods running in {time.monotonic() - t0:.0f} s; "
                f"recording {opts.settle:g} s")
            time.sleep(opts.settle)
            kubeconfig = str(commands_remote.user_kubeconfig(
                n, work / "user.kubeconfig", namespace=NAMESPACE))
            for environ in ways.values():
                environ["KUBECONFIG"] = kubeconfig
            print(f"### cluster over {opts.workloads} workloads ({opts.busy} throttling): wall "
                  f"time and peak RSS, median of {opts.repeats}\n")
            print(f"({describe_load('before')}; {opts.workloads} one-pod Deployments over "
                  f"{len(nodes)} nodes, {opts.busy} burning under {BUSY_LIMIT}, the rest idle "
                  f"under 200m, recorded by the agent at 100 ms for >= {opts.settle:g} s; a "
                  f"least-privilege user's kubeconfig; {time.strftime('%Y-%m-%d %H:%M %Z')}, "
                  f"{os.uname().nodename})\n")
            runs: dict[str, list[dict[str, Any]]] = {}
            for i in range(opts.repeats):
                for name, args in commands.items():
                    for way, environ in ways.items():
                        runs.setdefault(name + way, []).append(
                            timed_cluster([*args, *tail], environ))
                log(f"repeat {i + 1} of {opts.repeats} done")
            if opts.profile is not None:
                profile([*commands["cluster -n NS"], *tail], env, opts.profile)
        finally:
            n.kubectl("delete", "clusterrolebinding", f"{NAMESPACE}-workloads",
                      "--ignore-not-found", check=False)
            n.kubectl("-n", "throttle-lab-recorder", "delete", "rolebinding",
                      f"{NAMESPACE}-timelines", "--ignore-not-found", check=False)
            n.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=600s",
                      check=False, timeout=660)
    print(f"| command (`--since {opts.since} --p99 50 --json`) | wall s (median) | runs, s "
          "| peak RSS MiB (max) | rows | throttling first | exit |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name, got in runs.items():
        walls = [g["wall_s"] for g in got]
        failed = [g["error"] for g in got if "error" in g]
        listed = got[-1].get("workloads") or []
        first = sorted(listed[:opts.busy]) == sorted(busy)
        ours = sum(w.startswith(f"{NAMESPACE}/") for w in listed)
        row = {"command": name, "wall_s_median": statistics.median(walls), "walls_s": walls,
               "peak_rss_mib": max(g["peak_rss_mib"] for g in got), "rows": len(listed),
               "rows_of_bench": ours, "throttling_first": first,
               "exits": [g["exit"] for g in got], "errors": failed}
        rows.append(row)
        print(f"| {name} | {row['wall_s_median']:.2f} | "
              f"{', '.join(f'{w:.2f}' for w in walls)} | {row['peak_rss_mib']:.0f} | "
              f"{len(listed)} ({ours} of {NAMESPACE}) | {'yes' if first else 'no'} | "
              f"{','.join(str(e) for e in row['exits'])} |")
        for line in sorted(set(failed)):
            print(f"\n{name}: {line}")
    print(f"\n({describe_load('after')})")
    keep_record("cluster_scale", {"workloads": opts.workloads, "busy": opts.busy,
                                  "since": opts.since, "repeats": opts.repeats,
                                  "settle_s": opts.settle, "nodes": nodes,
                                  "baseline": None if opts.baseline is None
                                  else str(opts.baseline), "rows": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
