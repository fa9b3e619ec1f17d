"""``cluster`` over 100 to 1,000 workloads: its wall time and memory (issues 46 and 59).

    sudo .venv/bin/python -m benchmarks.cluster_scale [--workloads 100] [--busy 5]
                                                      [--repeats 3] [--since 2m]
                                                      [--settle 60] [--profile FILE]
                                                      [--host-network] [--up-within 600]
                                                      [--favoured]

On the project's nodes (``python -m kubenode up --nodes 2``; this module never starts or stops
them), with the node agent's DaemonSet (k8s/recorder/, 100 ms; deployed here if it does not run,
removed at the end), ``--workloads`` Deployments of one pod each in a namespace of their own
(``tl-cluster-bench``, deleted at the end), spread over the nodes in turn (pinned by
``nodeName``) and labelled for the agent: idle ones (the node's pause image) and ``--busy`` that
burn CPU in a loop under a 50m limit, throttled in every period (the pods of
``benchmarks.agent_cost_node``). The idle ones request 1m of CPU: a pod pinned to its node is
admitted by that node's kubelet against the node's allocatable CPU, and at the 5m of
``agent_cost_node``'s pods a 2-CPU node admits 400 and rejects the rest (``OutOfcpu``), which
their Deployments replace, over and over (the pods rejected meanwhile are counted). The
throttling ones are applied first and run before the idle ones are asked for. Where the
nodes held fewer than all, the Deployments with no pod running are then scaled to 0 (said in
the table's line): a node still starting pods loads this machine, while a pod the scheduler
cannot place costs a real cluster's nodes nothing; they stay workloads without a pod. ``--host-network`` runs the idle ones in their node's network
(``hostNetwork``: a node's pod range, a /24, gives at most 253 pods an address); past 150 pods a
node the node needs a larger ``maxPods`` (``THROTTLE_LAB_KUBE_MAX_PODS=520`` in the environment
of ``python -m kubenode up --nodes 2`` and of this module, which finds the node up by its
configuration). The pods running once their count stopped growing for a minute, or after
``--up-within`` seconds, are the ones the node held: the benchmark goes on with them and says
how many (and how fast they came up). After ``--settle`` seconds of recording, each of
``cluster -n NS --since S --p99 50 --json`` and ``cluster -A ...`` runs ``--repeats`` times as a
user who holds only the roles of k8s/recorder/user-rbac.yaml (``benchmarks.commands_remote``'s
kubeconfig): the median wall time, the child's peak memory (``ru_maxrss`` from ``wait4``; with
workers, their PSS summed, sampled), the
rows it printed and whether the throttling ones come first. Its modules' bytecode is cached (in
the scratch folder, ``PYTHONPYCACHEPREFIX``, as an installed package has it; an untimed run
first compiles it). The goal (issue 59): at most
200 MiB, and 10 s for 1,000 workloads, or 10 ms a workload held beside a fixed 1 s where the node
held fewer. ``--favoured`` also runs each command in a cgroup of the machine's greatest CPU weight
(``cpu.shares`` 262144, ``cpu.weight`` 10000): as from a laptop of its own, beside the load the
nodes' pods put on this machine (the agents that answer it stay on the nodes). Beside each
run: what the kernel counted for the agents meanwhile (their CPU, their groups' periods
throttled under the DaemonSet's 200m limit; an agent restarted meanwhile is said, not summed),
and at the end each agent's restarts and why its last run ended (from the API server). ``--profile FILE`` also runs (after the record;
its windows kept with ``--keep-windows DIR``) ``cluster -n NS`` once under cProfile and prints where its time went; ``--baseline DIR``
times another revision's ``client`` package beside this checkout's, in each repeat. Prints the
table and writes the record (``benchmarks/records.py``; ``python -m benchmarks
cluster_scale``). Needs root; run it under the node's lock (``flock /tmp/kube.lock``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import agent_cost_node, commands_remote
from cpuquota.cgroupfs import CgroupError, locate_cpu_controller, read_cpu_stat
from kubenode.recorder import RECORDER_NAMESPACE
from benchmarks.support import (HTTP_TIMING, bytecode_cached, describe_load, favoured_group,
                                keep_record, recorder_on_every_node, run_main, timed)

__all__ = ["NAMESPACE", "main", "timed_cluster"]

NAMESPACE = "tl-cluster-bench"
RECORD_LABEL = ("throttle-lab/record", "true")   # client/run/k8s_workloads.py
BUSY_LIMIT = "50m"
IDLE_REQUEST = "1m"   # a node's 2 CPUs admit 2,000 of them; at 5m, 400 (the rest OutOfcpu)
GOAL_RSS_MIB = 200.0
GOAL_WALL_S, GOAL_AT = 10.0, 1000          # 10 s for 1,000 workloads
GOAL_START_S, GOAL_EACH_S = 1.0, 0.010     # where fewer are held: 1 s + 10 ms a workload
FAVOURED = " (favoured: the greatest CPU weight)"


def goal_wall_s(held: int) -> float:
    """The wall-time goal for ``held`` workloads (issue 59)."""
    return GOAL_WALL_S if held >= GOAL_AT else GOAL_START_S + GOAL_EACH_S * held


def log(msg: str) -> None:
    print(f"[cluster_scale] {msg}", file=sys.stderr, flush=True)


def workloads(count: int, busy: int, nodes: list[str], host_network: bool = False
              ) -> list[dict[str, Any]]:
    """``count`` one-pod Deployments (the first ``busy`` burning), node by node in turn; the
    idle ones in their node's network with ``host_network``."""
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
            doc["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = \
                IDLE_REQUEST
            if host_network:
                doc["spec"]["template"]["spec"]["hostNetwork"] = True
        doc["metadata"]["namespace"] = NAMESPACE
        doc["spec"]["template"]["metadata"]["labels"][RECORD_LABEL[0]] = RECORD_LABEL[1]
        items.append(doc)
    return items


def pods_by_state(n: Any) -> collections.Counter[str]:
    """The namespace's pods by state: ``Running`` (and not being deleted), ``Pending``, and
    a failed pod by its reason (``OutOfcpu``: rejected by its node's kubelet)."""
    pods = json.loads(n.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json",
                                timeout=120).stdout)
    out: collections.Counter[str] = collections.Counter()
    for p in pods["items"]:
        status = p.get("status", {})
        phase = status.get("phase", "?")
        if phase == "Running" and p["metadata"].get("deletionTimestamp"):
            phase = "Terminating"
        out[status.get("reason", phase) if phase == "Failed" else phase] += 1
    return out


def not_running(n: Any) -> list[str]:
    """The namespace's Deployments with no pod running (by the pods' ``app`` label)."""
    pods = json.loads(n.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json",
                                timeout=120).stdout)["items"]
    running = {p["metadata"]["labels"].get("app") for p in pods
               if p.get("status", {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")}
    deployments = json.loads(n.kubectl("-n", NAMESPACE, "get", "deployments", "-o", "json",
                                       timeout=120).stdout)["items"]
    return sorted(d["metadata"]["name"] for d in deployments
                  if d["metadata"]["name"] not in running)


def running_pods(n: Any) -> int:
    return pods_by_state(n)["Running"]


def held_pods(n: Any, want: int, within_s: float, stalled_s: float = 60.0
              ) -> tuple[int, list[tuple[float, int]]]:
    """The pods running once all ``want`` run, their count stopped growing for ``stalled_s``,
    or ``within_s`` passed; and the count over time ((seconds, running), every ~10 s)."""
    t0 = time.monotonic()
    best, grew, seen = 0, t0, []
    while True:
        running = running_pods(n)
        now = time.monotonic()
        if not seen or now - t0 - seen[-1][0] >= 10 or running == want:
            seen.append((round(now - t0, 1), running))
            log(f"{running} of {want} pods running after {now - t0:.0f} s")
        if running > best:
            best, grew = running, now
        if running == want or now - grew > stalled_s or now - t0 > within_s:
            return running, seen
        time.sleep(3)


AGENT = "throttle-agent"   # the recorder container's process (agent/cmd/throttle-agent)
COUNTED = ("usage_ns", "nr_periods", "nr_throttled", "throttled_ns")   # agents_counted's


def agents_counted() -> dict[str, dict[str, int]]:
    """What the kernel counted for the node agents' groups (every ``throttle-agent`` process
    on this machine), by group: its processes' CPU (ns, ``/proc/PID/stat``), its periods and
    periods throttled, throttled time (ns); {} where none runs or none can be read. An agent
    restarted by its kubelet runs in a new group (its container's), so a group is one run."""
    out: dict[str, dict[str, int]] = {}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or (proc / "comm").read_text().strip() != AGENT:
                continue
            controller = locate_cpu_controller(proc)
            stat = read_cpu_stat(controller.directory, controller.version)
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            usage = (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
        except (OSError, CgroupError, ValueError, IndexError):
            continue   # a process that ended, or a group not readable from here
        key = str(controller.directory)
        if key not in out:   # the group's own counters, read once
            out[key] = dict.fromkeys(COUNTED, 0)
            if stat is not None:
                out[key].update(nr_periods=stat.nr_periods, nr_throttled=stat.nr_throttled,
                                throttled_ns=stat.throttled_ns)
        out[key]["usage_ns"] += usage
    return out


def agents_between(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
                   ) -> dict[str, int] | None:
    """The agents' figures from ``before`` to ``after`` (:func:`agents_counted`), summed over
    the groups both hold, and ``restarted``: the groups gone meanwhile (an agent's container
    replaced: what its run counted is not in the sums). None if none was read."""
    both = before.keys() & after.keys()
    if not both:
        return None
    out = {key: sum(after[g][key] - before[g][key] for g in both)
           for key in COUNTED}
    out["restarted"] = len(before.keys() - after.keys())
    return out


def agents_words(counted: dict[str, int] | None) -> str:
    """The agents' figures for a table: CPU s, periods throttled (of periods), throttled s."""
    if not counted:
        return "not read"
    restarted = counted.get("restarted", 0)
    return (f"{counted['usage_ns'] / 1e9:.2f}, {counted['nr_throttled']} "
            f"({counted['nr_periods']}), {counted['throttled_ns'] / 1e9:.2f}"
            + (f"; {restarted} agent restarted (not in the sums)" if restarted else ""))


def agent_restarts(n: Any) -> list[str]:
    """Each node agent's restarts so far and why its last run ended, from the API server
    (``restartCount``, ``lastState.terminated``): one clause a restarted container."""
    got = n.kubectl("-n", RECORDER_NAMESPACE, "get", "pods", "-o", "json", check=False)
    try:
        pods = json.loads(got.stdout)["items"]
    except (ValueError, KeyError, TypeError):
        return ["the agents' pods not read"]
    out = []
    for pod in pods:
        for st in pod.get("status", {}).get("containerStatuses", []):
            if st.get("restartCount"):
                ended = st.get("lastState", {}).get("terminated", {})
                out.append(f"{pod['metadata']['name']}/{st['name']} on "
                           f"{pod['spec'].get('nodeName')}: {st['restartCount']} restarts, the "
                           f"last {ended.get('reason', '?')} (exit {ended.get('exitCode', '?')}) "
                           f"at {ended.get('finishedAt', '?')}")
    return out


def timed_cluster(args: Sequence[str], env: dict[str, str],
                  group: Path | None = None) -> dict[str, Any]:
    """``http-timing ARGS`` once (:func:`benchmarks.support.timed`, in ``group`` where
    given): wall time (s), its CPU time (s, its workers' too), what the kernel counted for
    the node agents' groups meanwhile (:func:`agents_counted`; None if not read), its peak memory (MiB: its own
    peak RSS, or where it replayed in workers the most their PSS summed held at once), its
    exit code and the workloads its JSON printed (or its last stderr line)."""
    before = agents_counted()
    got = timed(args, env, group)
    agents = agents_between(before, agents_counted())
    out: dict[str, Any] = {"wall_s": got["wall_s"], "cpu_s": got["cpu_s"], "agents": agents,
                           "peak_rss_mib": max(got["rss_mib"], got["tree_pss_mib"]),
                           "exit": got["exit"]}
    answer = got.get("answer")
    try:
        out["workloads"] = [w["workload"] for w in answer["workloads"]]   # type: ignore[index]
        out["processes"] = answer.get("replay_processes", 1)   # type: ignore[union-attr]
        out["advice"] = {w["workload"]: advice_words(w)
                         for w in answer["workloads"]}   # type: ignore[index]
    except (KeyError, TypeError):
        out["error"] = got.get("error", "no workloads in its JSON")
    return out


def advice_words(row: dict[str, Any]) -> str:
    """A row of cluster's JSON in a few words: its recommended limit, or why it had none
    (its note's reason, without the workload's name and the figures in brackets)."""
    if row.get("recommended_cpus") is not None:
        return f"{row['recommended_cpus'] * 1000:.0f}m"
    why = next((n for n in row.get("notes") or [] if n.startswith("no ")), "no recommendation")
    why = why.replace(f"{row.get('workload')}: ", "")
    return why.split(" (")[0]


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
    parser.add_argument("--delete-within", type=float, default=600.0, metavar="S",
                        help="wait at most S seconds for the namespace's deletion (default "
                        "600; the node's own stop removes what is left)")
    parser.add_argument("--keep-windows", type=Path, metavar="DIR",
                        help="the profiled run keeps the windows it fetched in DIR")
    parser.add_argument("--host-network", action="store_true",
                        help="the idle pods in their node's network (no pod address: past "
                        "the 253 a node's /24 gives)")
    parser.add_argument("--up-within", type=float, default=600.0, metavar="S",
                        help="go on with the pods running after S seconds (default 600)")
    parser.add_argument("--favoured", action="store_true",
                        help="also run each command in a cgroup of the machine's greatest CPU "
                        "weight: as from a machine of its own, beside the nodes' load")
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
    ways: dict[str, tuple[dict[str, str], Path | None]] = {"": (env, None)}
    if opts.baseline is not None:
        ways[f" ({opts.baseline})"] = (dict(env, PYTHONPATH=str(opts.baseline.resolve())), None)
    stack = contextlib.ExitStack()
    stack.callback(shutil.rmtree, work, True)   # its scratch (a kubeconfig, the overlay)
    if opts.favoured:   # its group removed at the end, also on failure
        ways[FAVOURED] = (env, stack.enter_context(favoured_group()))
    tail = ["--since", opts.since, "--p99", "50", "--json"]
    with stack, recorder_on_every_node(n, work, log):
        n.kubectl("create", "namespace", NAMESPACE, check=False)
        try:
            t0 = time.monotonic()
            items = workloads(opts.workloads, opts.busy, nodes, opts.host_network)
            # the throttling ones first, running before the idle ones are asked for: the
            # pods a loaded node is still starting when the nodes are full are idle ones
            n.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "List", "items": items[:opts.busy]}), timeout=600)
            held_pods(n, opts.busy, opts.up_within)
            n.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "List", "items": items[opts.busy:]}),
                timeout=600)
            held, rising = held_pods(n, opts.workloads, opts.up_within)
            up_s = time.monotonic() - t0
            states = pods_by_state(n)   # the pods not running, by state or reason
            others = ", ".join(f"{c} {k}" for k, c in sorted(states.items()) if k != "Running")
            if held < opts.workloads:   # what the nodes could not start costs them nothing
                unheld = not_running(n)
                for at in range(0, len(unheld), 200):
                    n.kubectl("-n", NAMESPACE, "scale", "deployment", "--replicas=0",
                              *unheld[at:at + 200], timeout=300, check=False)
                others += (f"; their {len(unheld)} Deployments then scaled to 0, as a pod "
                           "the scheduler cannot place costs the nodes nothing")
            log(f"{held} of {opts.workloads} pods running in {up_s:.0f} s; "
                f"recording {opts.settle:g} s")
            time.sleep(opts.settle)
            kubeconfig = str(commands_remote.user_kubeconfig(
                n, work / "user.kubeconfig", namespace=NAMESPACE))
            for environ, _ in ways.values():   # bytecode cached, as an installed package has it
                bytecode_cached(environ, work / "pycache")["KUBECONFIG"] = kubeconfig
            for environ in {id(e): e for e, _ in ways.values()}.values():
                timed([*commands["cluster -n NS"], *tail], environ)   # compiled, untimed
            print(f"### cluster over {opts.workloads} workloads ({opts.busy} throttling): wall "
                  f"time and peak RSS, median of {opts.repeats}\n")
            print(f"({describe_load('before')}; {opts.workloads} one-pod Deployments over "
                  f"{len(nodes)} nodes, {held} of their pods running after {up_s:.0f} s"
                  f"{'' if held == opts.workloads else ' (what the nodes held)'}"
                  f"{f' (the other pods: {others})' if others else ''}; "
                  f"{opts.busy} burning under {BUSY_LIMIT}, the rest idle "
                  f"under 200m{' in the node network' if opts.host_network else ''}, recorded "
                  f"by the agent at 100 ms for >= {opts.settle:g} s; a "
                  f"least-privilege user's kubeconfig; {time.strftime('%Y-%m-%d %H:%M %Z')}, "
                  f"{os.uname().nodename})\n")
            runs: dict[str, list[dict[str, Any]]] = {}
            for i in range(opts.repeats):
                for name, args in commands.items():
                    for way, (environ, group) in ways.items():
                        got = timed_cluster([*args, *tail], environ, group)
                        runs.setdefault(name + way, []).append(got)
                        log(f"{name + way}: {got['wall_s']:.2f} s, "
                            f"{got['cpu_s']:.2f} CPU s, {got['peak_rss_mib']:.0f} MiB, "
                            f"exit {got['exit']}")
                log(f"repeat {i + 1} of {opts.repeats} done")
            goal_s = goal_wall_s(held)
            print(f"| command (`--since {opts.since} --p99 50 --json`) | wall s (median) | runs, s "
                  "| CPU s (median) | the agents meanwhile: CPU s, periods throttled (of periods), "
                  "throttled s | peak RSS MiB (max) | rows | throttling first | exit | goal met |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            rows, advised = [], []
            for name, got in runs.items():
                walls = [g["wall_s"] for g in got]
                failed = [g["error"] for g in got if "error" in g]
                listed = got[-1].get("workloads") or []
                first = sorted(listed[:opts.busy]) == sorted(busy)
                ours = sum(w.startswith(f"{NAMESPACE}/") for w in listed)
                row = {"command": name, "wall_s_median": statistics.median(walls), "walls_s": walls,
                       "cpu_s_median": statistics.median(g["cpu_s"] for g in got),
                       "agents": [g.get("agents") for g in got],
                       "peak_rss_mib": max(g["peak_rss_mib"] for g in got), "rows": len(listed),
                       "rows_of_bench": ours, "throttling_first": first,
                       "exits": [g["exit"] for g in got], "errors": failed,
                       "busy_advice": {w: (got[-1].get("advice") or {}).get(w)
                                       for w in busy}}
                row["goal_met"] = (row["wall_s_median"] <= goal_s
                                   and row["peak_rss_mib"] <= GOAL_RSS_MIB)
                rows.append(row)
                print(f"| {name} | {row['wall_s_median']:.2f} | "
                      f"{', '.join(f'{w:.2f}' for w in walls)} | {row['cpu_s_median']:.2f} | "
                      f"{agents_words(got[-1].get('agents'))} | "
                      f"{row['peak_rss_mib']:.0f} | "
                      f"{len(listed)} ({ours} of {NAMESPACE}) | {'yes' if first else 'no'} | "
                      f"{','.join(str(e) for e in row['exits'])} | "
                      f"{'yes' if row['goal_met'] else 'no'} |")
                for line in sorted(set(failed)):
                    print(f"\n{name}: {line}")
                advice = collections.Counter(w or "not listed"
                                             for w in row["busy_advice"].values())
                advised.append(f"{name}: {'; '.join(f'{c} {w}' for w, c in advice.items())}")
            rule = (f"{GOAL_AT:,} workloads" if held >= GOAL_AT else
                    f"{GOAL_START_S:g} s + {GOAL_EACH_S * 1000:g} ms a workload, {held} held")
            print(f"\n({describe_load('after')}; goal: <= {goal_s:g} s ({rule}) "
                  f"and <= {GOAL_RSS_MIB:g} MiB; pods running over time, s: "
                  f"{', '.join(f'{t:g}: {c}' for t, c in rising)})")
            print(f"\n(the throttling pods' advice, the last run of each: {' | '.join(advised)})")
            restarts = agent_restarts(n)
            print(f"\n(the node agents' restarts by the end: {'; '.join(restarts) or 'none'})")
            keep_record("cluster_scale", {"workloads": opts.workloads, "busy": opts.busy,
                                          "agent_restarts": restarts,
                                          "held": held, "up_s": up_s, "rising": rising,
                                          "pod_states": dict(states),
                                          "host_network": opts.host_network,
                                          "goal_wall_s": goal_s, "goal_rss_mib": GOAL_RSS_MIB,
                                          "since": opts.since, "repeats": opts.repeats,
                                          "settle_s": opts.settle, "nodes": nodes,
                                          "baseline": None if opts.baseline is None
                                          else str(opts.baseline), "rows": rows})
            if opts.profile is not None:   # after the record: not in its figures
                keep = [] if opts.keep_windows is None else ["--data-dir",
                                                             str(opts.keep_windows)]
                profile([*commands["cluster -n NS"], *tail, *keep], env, opts.profile)
        finally:   # the record kept first: deleting many pods takes a while
            n.kubectl("delete", "clusterrolebinding", f"{NAMESPACE}-workloads",
                      "--ignore-not-found", check=False)
            n.kubectl("-n", RECORDER_NAMESPACE, "delete", "rolebinding",
                      f"{NAMESPACE}-timelines", "--ignore-not-found", check=False)
            n.kubectl("delete", "namespace", NAMESPACE, "--wait=true",
                      f"--timeout={opts.delete_within:g}s", check=False,
                      timeout=opts.delete_within + 60)
    return 0


if __name__ == "__main__":
    run_main(main)
