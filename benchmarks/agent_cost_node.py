"""What the node agent (agent/, Go) costs on each of the project's Kubernetes nodes: 10 and
100 pods a node, 0 and 5 of them throttling (issue 59: 110, the kubelet's default, and 10).

    sudo .venv/bin/python -m benchmarks.agent_cost_node [--pods 10 100] [--busy 5]
                                                        [--seconds 30] [--interval 100ms]
                                                        [--nodes NAME ...] [--busy-limit 200m]

The project's nodes must be up (``make kube-node`` or ``NODES=2``; this module never starts or
stops them). In a namespace of its own (``tl-cost-test``, deleted at the end), per node (every
node, or ``--nodes``) a Deployment of idle pods pinned to it by ``nodeName`` (the node's pause
image, each with a 200m CPU limit: the pod's group and its container's each get a quota, as
the kubelet makes them) is scaled to each ``--pods`` count, every node at once, and the agent
measured on each node in turn; then one row per node where ``--busy`` of the largest count,
on that node only, burn CPU in a loop (the service image, ``python``) and are throttled all
the time (under ``--busy-limit``: 10 pods at 200m would take both of this machine's CPUs).
The agent is the host binary (the same loop as the DaemonSet) with its
Kubernetes source: it watches the node's pods through the API (admin kubeconfig) and samples
both groups of every selected pod on its ``--node`` (two timelines a pod; a node's groups are
under its own cgroup root, found by the agent), at ``--interval`` (the DaemonSet's 100 ms) while a group
throttles or has just become busy and ``--idle-interval`` otherwise. It runs in a cpuacct
group of its own; its CPU is that group's ``cpuacct.usage`` over ``--seconds``, once every pod
is watched and the new groups' hold is over (cross-checked with ``/proc/PID/stat``); memory is
``VmRSS`` at the end and ``VmHWM`` (peak). The rows written at each rate come from the agent's
``throttle_lab_agent_rows_total``. Prints the table and writes the record
(``benchmarks/records.py``). Needs root, the v1 cpuacct hierarchy, Go and the node; run it
under the node's lock (``flock /tmp/kube.lock``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.agent_cost import (CPUACCT, GOAL_CPU_PERCENT, GOAL_RSS_MIB, build_agent,
                                   free_port, proc_cpu_s, status_kib)
from benchmarks.support import describe_load, keep_record, run_main

__all__ = ["NAMESPACE", "main", "node_names"]

KUBECONFIG = Path("/var/lib/throttle-lab-node/admin.kubeconfig")
NAMESPACE = "tl-cost-test"
SELECTOR = "throttle-lab/cost-bench=true"
PAUSE_IMAGE = "throttle-lab-pause:3.10.1"     # kubenode/files.py
SERVICE_IMAGE = "throttle-lab:latest"          # kubenode/project_images.py


def kubectl(*args: str, stdin: str | None = None, timeout: float = 120) -> str:
    from kubenode.config import layout

    binary = layout().kube_bin / "kubectl"
    result = subprocess.run([str(binary), "--kubeconfig", str(KUBECONFIG), *args], input=stdin,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {result.stderr.strip()[-800:]}")
    return result.stdout


def node_names() -> list[str]:
    """Every node of the cluster, node 1 first."""
    return kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split()


def deployment(name: str, replicas: int, image: str, command: list[str] | None,
               node: str) -> dict:
    container: dict = {"name": "main", "image": image, "imagePullPolicy": "Never",
                       "resources": {"requests": {"cpu": "5m", "memory": "8Mi"},
                                     "limits": {"cpu": "200m", "memory": "64Mi"}}}
    if command:
        container["command"] = command
    labels = {"app": name, SELECTOR.split("=")[0]: "true"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container], "nodeName": node,
                                           "tolerations": [{"operator": "Exists"}],
                                           "terminationGracePeriodSeconds": 0,
                                           "enableServiceLinks": False,
                                           "automountServiceAccountToken": False}}}}


def scale(sizes: dict[str, tuple[int, int]], busy_limit: str = "200m") -> None:
    """Per node (by name), its idle and busy Deployments at these sizes (the busy ones under
    ``busy_limit``), every pod running."""
    items, names = [], []
    for i, (node, (idle, busy)) in enumerate(sizes.items()):
        names += [f"idle-{i}", f"busy-{i}"]
        burner = deployment(f"busy-{i}", busy, SERVICE_IMAGE,
                            ["python3", "-c", "while True: pass"], node)
        burner["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = \
            busy_limit
        items += [deployment(f"idle-{i}", idle, PAUSE_IMAGE, None, node), burner]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": items}))
    for name in names:
        kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=600s",
                timeout=660)
    want = sum(idle + busy for idle, busy in sizes.values())
    deadline = time.monotonic() + 300
    while True:   # the old pods of a scale-down gone too: only the wanted ones selected
        pods = json.loads(kubectl("-n", NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "json"))
        running = [p for p in pods["items"] if p["status"].get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")]
        if len(running) == len(pods["items"]) == want:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(running)} of {want} pods running after 5 min")
        time.sleep(2)


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape(port: int, missing_ok: bool = False) -> str:
    """The agent's /metrics ("" while it does not answer yet, with ``missing_ok``)."""
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except httpx.HTTPError:
        if missing_ok:
            return ""
        raise


def measure(binary: Path, node: str, pods: int, seconds: float, extra: list[str],
            hold_s: float) -> dict[str, float]:
    own = CPUACCT / f"throttle-lab-bench-agent-node-{os.getpid()}"
    proc: subprocess.Popen[bytes] | None = None
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="agent-cost-node-")   # removed once the agent stopped
    try:
        own.mkdir()
        proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {own}/cgroup.procs && exec "$@"', "sh", str(binary),
             "--source", "kube", "--kubeconfig", str(KUBECONFIG), "--node", node,
             "--selector", SELECTOR, "--timelines", str(Path(tmp, "timelines")),
             "--listen", f"127.0.0.1:{port}", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while True:   # every pod's two groups watched
            if proc.poll() is not None:
                raise SystemExit("the agent stopped: " +
                                 (proc.stderr.read().decode()[-500:] if proc.stderr else ""))
            if metric(scrape(port, missing_ok=True), "throttle_lab_agent_timelines") >= 2 * pods:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the agent did not watch every pod within 2 min")
            time.sleep(0.5)
        time.sleep(hold_s + 1.0)   # the new groups' hold over
        before = scrape(port)
        usage0, cpu0, t0 = int((own / "cpuacct.usage").read_text()), proc_cpu_s(proc.pid), \
            time.monotonic()
        time.sleep(seconds)
        usage1, cpu1, t1 = int((own / "cpuacct.usage").read_text()), proc_cpu_s(proc.pid), \
            time.monotonic()
        after = scrape(port)
        rss, hwm = status_kib(proc.pid, "VmRSS"), status_kib(proc.pid, "VmHWM")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        rows = {rate: (metric(after, f'throttle_lab_agent_rows_total{{rate="{rate}"}}') -
                       metric(before, f'throttle_lab_agent_rows_total{{rate="{rate}"}}'))
                / (t1 - t0) for rate in ("fast", "idle")}
        return {"timelines": metric(after, "throttle_lab_agent_timelines"),
                "cpu_percent": 100 * (usage1 - usage0) / 1e9 / (t1 - t0),
                "stat_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
                "rss_mib": rss / 1024, "hwm_mib": hwm / 1024,
                "fast_rows": rows["fast"], "idle_rows": rows["idle"]}
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        if own.exists():
            own.rmdir()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[10, 100], help="pods a node")
    parser.add_argument("--busy", type=int, default=5,
                        help="throttled pods in the last rows, of the largest count (0: no row)")
    parser.add_argument("--busy-limit", default="200m",
                        help="the throttled pods' CPU limit (default 200m)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", default="100ms",
                        help="the agent's --interval (default: the DaemonSet's, 100ms)")
    parser.add_argument("--idle-interval", default="1s", help="the agent's --idle-interval")
    parser.add_argument("--hold", type=float, default=5.0, help="the agent's --hold, seconds")
    parser.add_argument("--nodes", nargs="+", metavar="NAME",
                        help="the nodes measured (default: every node)")
    parser.add_argument("--every-tick", action="store_true",
                        help="also a row at the largest count with --idle-interval 0")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not (CPUACCT / "cpuacct.usage").exists():
        raise SystemExit("needs root and the cgroup v1 cpuacct hierarchy")
    if not KUBECONFIG.exists():
        raise SystemExit(f"the node is not up ({KUBECONFIG} missing: make kube-node)")
    binary = build_agent()
    every = node_names()
    nodes = args.nodes or every
    unknown = [name for name in nodes if name not in every]
    if unknown:
        raise SystemExit(f"--nodes: no such node: {', '.join(unknown)} (there are "
                         f"{', '.join(every)})")
    extra = ["--interval", args.interval, "--idle-interval", args.idle_interval,
             "--hold", f"{args.hold:g}s"]
    top = max(args.pods)
    # (pods a node, the node whose pods burn or None, its busy count, agent flags, idle column)
    cases: list[tuple[int, str | None, int, list[str], str]] = [
        (n, None, 0, extra, args.idle_interval) for n in args.pods]
    if args.busy:
        cases += [(top, node, args.busy, extra, args.idle_interval) for node in nodes]
    if args.every_tick:
        cases.append((top, None, 0, [*extra, "--idle-interval", "0"], "- (every tick)"))
    print(f"### throttle-agent on each node ({', '.join(nodes)}): its own CPU and memory, "
          f"{args.seconds:g} s per row, --interval {args.interval}, --hold {args.hold:g}s")
    print(f"({describe_load('before')}; {time.strftime('%Y-%m-%d %H:%M %Z')}, "
          f"{os.uname().nodename}, Linux {os.uname().release})\n")
    print("| node | pods | throttled pods | idle interval | timelines | rows/s fast | rows/s idle "
          "| agent CPU (% of one CPU, cpuacct) | (/proc/PID/stat) | RSS MiB | peak RSS MiB "
          "| goal met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    kubectl("create", "namespace", NAMESPACE)
    try:
        for pods, burning, busy, flags, idle_interval in cases:
            scale({node: (pods - busy, busy) if node == burning else (pods, 0)
                   for node in nodes}, args.busy_limit)
            for node in [burning] if burning else nodes:
                r = measure(binary, node, pods, args.seconds, flags, args.hold)
                met = ("yes" if r["cpu_percent"] <= GOAL_CPU_PERCENT and
                       r["hwm_mib"] <= GOAL_RSS_MIB else "no")
                print(f"| {node} | {pods} | {busy} | {idle_interval} | {r['timelines']:.0f} | "
                      f"{r['fast_rows']:.0f} | {r['idle_rows']:.0f} | {r['cpu_percent']:.2f} | "
                      f"{r['stat_percent']:.2f} | {r['rss_mib']:.1f} | {r['hwm_mib']:.1f} | "
                      f"{met} |", flush=True)
                rows.append({"node": node, "pods": pods, "busy": busy,
                             "idle_interval": idle_interval, "goal_met": met == "yes", **r})
        print(f"\n({describe_load('after')}; goal: <= {GOAL_CPU_PERCENT:g} % of one CPU and "
              f"<= {GOAL_RSS_MIB:g} MiB for {top} pods, {args.busy} throttling under "
              f"{args.busy_limit}, on each node)")
        keep_record("agent_cost_node", {"interval": args.interval, "seconds": args.seconds,
                                        "pods": args.pods, "busy": args.busy,
                                        "busy_limit": args.busy_limit,
                                        "nodes": nodes, "rows": rows})
    finally:   # the record is kept first: deleting many pods takes a while
        kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=600s", timeout=660)
    return 0


if __name__ == "__main__":
    run_main(main)
