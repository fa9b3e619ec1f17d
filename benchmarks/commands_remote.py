"""Each command that reads a pod, from a laptop's view (through the API server and the pod's
node's agent) against reading local files (issue 47's benchmark).

    sudo .venv/bin/python -m benchmarks.commands_remote [--repeats 3] [--count 4]
                                                        [--requests 20]

On the project's two nodes (``python -m kubenode up --nodes 2``; this module never starts or
stops them), with the node agent's DaemonSet (k8s/recorder/, 100 ms; deployed here if it does
not run, removed at the end), k8s/'s limited Deployment (100m) with one pod on each node in a
namespace of its own (``tl-remote-bench``, deleted at the end), each pod under a light load (a
request of ~5 ms of CPU every 0.5 s, from a thread here). Every command runs as a user who holds
only the roles of k8s/recorder/user-rbac.yaml (a service account's token in a kubeconfig of its
own), and takes ``--repeats`` times; the median wall time is shown:

- ``watch k8s:NS/POD --interval 0.5 --count N``;
- a run of ``--requests`` with ``--cgroup k8s:NS/POD``, less the same run without it: what the
  run's cgroup costs at its start and end;
- ``import RUN --timeline k8s:NS/POD`` (RUN: the run without ``--cgroup``);
- ``cluster -n NS`` and ``advise --passive --k8s NS/deployment/limited`` (both pods).

"through the API" is each command with ``HTTP_TIMING_THROUGH_API=1`` (client/run/pod_reach.py),
for the pod on node 1 and for the pod on node 2; "local files" is the same command without it,
for the pod on node 1 (its group's files are on this machine). Prints the table and writes the
record (``benchmarks/records.py``; ``BENCH_RECORDS=benchmarks/results`` or ``python -m
benchmarks commands_remote``). Needs root; run it under the node's lock (``flock /tmp/kube.lock``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.support import (HTTP_TIMING, ROOT, describe_load, keep_record,
                                recorder_on_every_node, run_main)

__all__ = ["NAMESPACE", "main", "nodes_up"]

NAMESPACE = "tl-remote-bench"
WORKLOAD = f"{NAMESPACE}/deployment/limited"
THROUGH_API_ENV = "HTTP_TIMING_THROUGH_API"   # client/run/pod_reach.py
USER_RBAC = ROOT / "k8s" / "recorder" / "user-rbac.yaml"
ITERATIONS = 5000   # ~5 ms of CPU a request
LIGHT_EVERY_S = 0.5


def log(msg: str) -> None:
    print(f"[commands_remote] {msg}", file=sys.stderr, flush=True)


def deployment() -> str:
    """k8s/deployment-limited.yaml in NAMESPACE, two replicas, one on each node."""
    doc = yaml.safe_load((ROOT / "k8s" / "deployment-limited.yaml").read_text())
    doc["metadata"]["namespace"] = NAMESPACE
    doc["spec"]["replicas"] = 2
    spec = doc["spec"]["template"]["spec"]
    spec["containers"][0]["imagePullPolicy"] = "Never"   # imported into each node's containerd
    spec["tolerations"] = [{"operator": "Exists", "effect": "NoSchedule"}]
    spec["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": doc["spec"]["selector"]["matchLabels"]}}]
    return json.dumps(doc)




def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def the_pods(n: Any) -> Iterator[list[dict[str, str]]]:
    """The limited Deployment's two pods, one on each node (name, node, url), node 1's first;
    the namespace deleted at the end."""
    from kubenode.config import member

    n.kubectl("create", "namespace", NAMESPACE, check=False)
    try:
        n.kubectl("apply", "-f", "-", input=deployment())
        n.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/limited", "--timeout=300s",
                  timeout=320)
        deadline = time.monotonic() + 120
        while True:
            items = [x for x in json.loads(n.kubectl(
                "-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=limited",
                "-o", "json").stdout)["items"] if not x["metadata"].get("deletionTimestamp")
                and x["status"].get("podIP")]
            if len({x["spec"]["nodeName"] for x in items}) == len(items) == 2:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the limited Deployment's pods are not one on each node "
                                 "after 2 min")
            time.sleep(1)
        first = member(1).name
        items.sort(key=lambda x: x["spec"]["nodeName"] != first)
        pods = [{"name": x["metadata"]["name"], "node": x["spec"]["nodeName"],
                 "url": f"http://{x['status']['podIP']}:7800/cpuBurnFlow?"
                        f"iterations={ITERATIONS}"} for x in items]
        for pod in pods:
            deadline = time.monotonic() + 60
            while not _answers(pod["url"]):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{pod['name']} did not answer in 60 s")
                time.sleep(0.5)
        yield pods
    finally:
        n.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False, timeout=60)


def user_kubeconfig(n: Any, path: Path, namespace: str = NAMESPACE) -> Path:
    """A kubeconfig for a service account of ``namespace`` that holds only the roles of
    k8s/recorder/user-rbac.yaml (as its comment says), and reads the workloads."""
    from kubenode.recorder import RECORDER_NAMESPACE

    n.kubectl("apply", "-f", str(USER_RBAC))
    account = f"--serviceaccount={namespace}:timeline-user"
    n.kubectl("-n", namespace, "create", "serviceaccount", "timeline-user", check=False)
    n.kubectl("-n", RECORDER_NAMESPACE, "create", "rolebinding", f"{namespace}-timelines",
              "--role=throttle-lab-timeline-reader", account, check=False)
    n.kubectl("-n", namespace, "create", "rolebinding", f"{namespace}-pods",
              "--clusterrole=throttle-lab-pod-reader", account, check=False)
    n.kubectl("create", "clusterrolebinding", f"{namespace}-workloads",
              "--clusterrole=throttle-lab-workload-reader", account, check=False)
    token = n.kubectl("-n", namespace, "create", "token", "timeline-user").stdout.strip()
    cluster = yaml.safe_load(n.lay.kubeconfig.read_text())["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "timeline-user", "user": {"token": token}}],
        "contexts": [{"name": "user", "context": {"cluster": cluster["name"],
                                                  "user": "timeline-user"}}],
        "current-context": "user"}))
    return path


@contextmanager
def light_load(urls: list[str]) -> Iterator[None]:
    """A request to each URL every LIGHT_EVERY_S, from a thread, until the end."""
    stop = threading.Event()

    def loop() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                for url in urls:
                    try:
                        client.get(url)
                    except httpx.HTTPError:
                        pass
                stop.wait(LIGHT_EVERY_S)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=15)


def timed(args: Sequence[str], cwd: Path, env: dict[str, str],
          ok: tuple[int, ...] = (0,)) -> float | str:
    """``http-timing ARGS``'s wall time in seconds, or its failure in one line."""
    t0 = time.monotonic()
    try:
        done = subprocess.run([str(HTTP_TIMING), *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return "no end in 180 s"
    wall = time.monotonic() - t0
    if done.returncode not in ok:
        lines = done.stderr.strip().splitlines() or [""]
        return f"exit {done.returncode}: {lines[-1][:160]}"
    return wall


def commands(pod: dict[str, str], opts: argparse.Namespace, key: str
             ) -> list[tuple[str, list[str], tuple[int, ...]]]:
    """The per-pod commands (name, arguments, exit codes that are an answer); ``key`` keeps
    each repeat's files apart."""
    target = f"k8s:{NAMESPACE}/{pod['name']}"
    run = ["--url", pod["url"], "--requests", str(opts.requests), "--no-plot", "--quiet"]
    return [
        ("watch", ["watch", target, "--interval", "0.5", "--count", str(opts.count), "--json"],
         (0,)),
        ("run without --cgroup", [*run, "--name", f"plain-{key}"], (0,)),
        ("run with --cgroup", [*run, "--cgroup", target, "--name", f"cgroup-{key}"], (0,)),
        ("import --timeline", ["import", f"raw-data/plain-{key}.csv", "--timeline", target,
                               "--name", f"imported-{key}"], (0,)),
    ]


def workload_commands(opts: argparse.Namespace) -> list[tuple[str, list[str], tuple[int, ...]]]:
    since = f"{opts.since:g}s"
    return [("cluster -n NS", ["cluster", "-n", NAMESPACE, "--since", since, "--json"], (0,)),
            ("advise --passive --k8s", ["advise", "--passive", "--k8s", WORKLOAD, "--p99", "50",
                                        "--since", since, "--json"], (0, 3))]


def median(values: list[float | str]) -> float | str:
    """The median of the times, or the first failure."""
    failed = [v for v in values if isinstance(v, str)]
    if failed:
        return failed[0]
    return statistics.median([v for v in values if not isinstance(v, str)])


def less(a: float | str, b: float | str) -> float | str:
    """``a - b``, or the first failure."""
    if isinstance(a, str):
        return a
    return b if isinstance(b, str) else a - b


def cell(value: float | str | None) -> str:
    if value is None:
        return "–"
    return value if isinstance(value, str) else f"{value:.2f}"


def measure(pods: list[dict[str, str]], opts: argparse.Namespace, work: Path,
            env: dict[str, str]) -> dict[str, dict[str, float | str]]:
    """Every command's median wall time per way: "api 1" and "api 2" (through the API, the pod
    on node 1 and 2), "local 1" (local files, the pod on node 1); per workload command "api"
    and "local"."""
    api = dict(env, **{THROUGH_API_ENV: "1"})
    local = {k: v for k, v in env.items() if k != THROUGH_API_ENV}
    ways = [("api 1", pods[0], api), ("api 2", pods[1], api), ("local 1", pods[0], local)]
    times: dict[str, dict[str, list[float | str]]] = {}
    for i in range(opts.repeats):
        for way, pod, environ in ways:
            for name, args, ok in commands(pod, opts, f"{way.replace(' ', '')}-{i}"):
                times.setdefault(name, {}).setdefault(way, []).append(
                    timed(args, work, environ, ok))
        for way, environ in (("api", api), ("local", local)):
            for name, args, ok in workload_commands(opts):
                times.setdefault(name, {}).setdefault(way, []).append(
                    timed(args, work, environ, ok))
        log(f"repeat {i + 1} of {opts.repeats} done")
    out = {name: {way: median(v) for way, v in by_way.items()} for name, by_way in times.items()}
    plain, cgroup = out.pop("run without --cgroup"), out.pop("run with --cgroup")
    out["run's --cgroup (with less without)"] = {way: less(cgroup[way], plain[way])
                                                 for way in cgroup}
    out["run without --cgroup"] = plain
    return out


def nodes_up(prefix: str) -> tuple[Any, Path, dict[str, str]]:
    """The running nodes (node 1's handle), a scratch directory named ``prefix...`` and an
    environment with the nodes' kubectl first on PATH; exits in one line when they are down."""
    from kubenode import node as kubenode
    from kubenode.config import layout

    lay = layout()
    n = kubenode.Node(lay, lambda _: None)
    if not kubenode.is_up(n):
        raise SystemExit(f"the nodes are not up ({lay.state}: python -m kubenode up --nodes 2)")
    work = Path(tempfile.mkdtemp(prefix=prefix))
    return n, work, dict(os.environ, PATH=f"{lay.kube_bin}{os.pathsep}{os.environ['PATH']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command (median)")
    parser.add_argument("--count", type=int, default=4, help="watch's intervals (0.5 s each)")
    parser.add_argument("--requests", type=int, default=20, help="requests of a run")
    parser.add_argument("--since", type=float, default=60.0,
                        help="cluster's and advise --passive's --since, seconds")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("the node needs root")
    from kubenode.recorder import RECORDER_NAMESPACE

    n, work, env = nodes_up("commands-remote-")
    with recorder_on_every_node(n, work, log), the_pods(n) as pods:
        env["KUBECONFIG"] = str(user_kubeconfig(n, work / "user.kubeconfig"))
        try:
            with light_load([p["url"] for p in pods]):
                time.sleep(3)   # the agent's first rows of the load
                print(f"### Each command's wall time, s (median of {opts.repeats}): through the "
                      f"API server and the pod's node's agent, against local files\n")
                print(f"({describe_load('before')}; pods {pods[0]['name']} on {pods[0]['node']}"
                      f", {pods[1]['name']} on {pods[1]['node']}, 100m each, a ~5 ms request "
                      f"every {LIGHT_EVERY_S:g} s; a least-privilege user's kubeconfig; "
                      f"{time.strftime('%Y-%m-%d %H:%M %Z')})\n")
                out = measure(pods, opts, work, env)
        finally:
            n.kubectl("delete", "clusterrolebinding", f"{NAMESPACE}-workloads",
                      "--ignore-not-found", check=False)
            n.kubectl("-n", RECORDER_NAMESPACE, "delete", "rolebinding",
                      f"{NAMESPACE}-timelines", "--ignore-not-found", check=False)
    print("| command | through the API, pod on node 1 | through the API, pod on node 2 "
          "| local files, pod on node 1 | API / local (node 1) |")
    print("|---|---|---|---|---|")
    rows = []
    for name, by_way in out.items():
        a1, a2 = by_way.get("api 1", by_way.get("api")), by_way.get("api 2")
        lo = by_way.get("local 1", by_way.get("local"))
        ratio = (f"{a1 / lo:.2f}" if isinstance(a1, float) and isinstance(lo, float) and lo > 0
                 else "–")
        label = {"watch": f"watch k8s: --count {opts.count} --interval 0.5",
                 "run without --cgroup": f"(a run of {opts.requests} without --cgroup)"}.get(
                     name, name)
        if name in ("cluster -n NS", "advise --passive --k8s"):
            label += " (both pods)"
        print(f"| {label} | {cell(a1)} | {cell(a2)} | {cell(lo)} | {ratio} |")
        rows.append({"command": label, **by_way})
    print(f"\n({describe_load('after')}; local files for cluster and advise: the same command "
          f"without {THROUGH_API_ENV}, both pods)")
    keep_record("commands_remote", {"repeats": opts.repeats, "count": opts.count,
                                    "requests": opts.requests, "pods": pods, "rows": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
