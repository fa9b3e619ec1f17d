"""The HPA replay (``client.analysis.hpa``) against the cluster's own HPA controller on the
project's node (issue 60): the replicas the replay says, per minute, against those the
controller ran, on the same ramped load.

    sudo .venv/bin/python -m benchmarks.hpa_vs_controller [--stages 4:120,12:120,...]
        [--target 50] [--max 4] [--down-window 60] [--iterations 5000]

On the project's node (brought up if it is down, and taken down again at the end; one that is
up is reused and left up; its metrics-server serves the resource metrics API the controller
reads), with the node agent's DaemonSet (deployed here if it does not run, removed at the end),
``k8s/``'s limited Deployment (1 replica, 100m request and limit), its Service and its Ingress
on the node's Traefik in a namespace of their own (``tl-hpa-bench``, deleted at the end):

1. an ``autoscaling/v2`` HPA on the Deployment made here: CPU utilization ``--target`` % of the
   request, 1 to ``--max`` replicas, a scale-down stabilization of ``--down-window`` s (the
   default 300 s would not let a ten-minute run scale down);
2. an open loop through Traefik (round-robin over the Service's ready pods), its rate stepped
   by ``--stages`` (requests/s for seconds); every 2 s the Deployment's replica count as the
   controller set it (``spec.replicas``), and each pod's time from made to Ready; every 15 s
   every pod's window fetched from its node's agent (a pod the controller removes keeps its
   last one);
3. the CPU the pods used (each window's rows, as the replay reads them, from the pod's
   Ready: ``client.advise.pooled.summed_rates``, the library's pooling) summed on the wall
   clock, and the controller's rule as the cluster holds it (``rule_of`` the HPA's JSON) run over it
   by the replay (``run_hpa``, the pods' measured median time to Ready), from one replica;
4. per minute of the load, the count at its end: the replay's against the controller's.
   Goal: the same in 80 % of the minutes.

At the end the HPA is deleted, the Deployment scaled back to its count before, both checked
with kubectl. Prints the table and writes the record (``benchmarks/records.py``; set
``BENCH_RECORDS=benchmarks/results`` or run it through ``python -m benchmarks``). Needs root
and the node's tools; run it under the node's lock (``flock /tmp/kube.lock``).
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.passive_vs_live import the_node
from benchmarks.replicas_passive_vs_live import host_of, put_back, the_deployment
from benchmarks.support import keep_record, loadavg, recorder_on_every_node, run_main
from client.advise.pooled import summed_rates

__all__ = ["NAMESPACE", "GOAL", "main", "minutes_of", "parse_stages"]

NAMESPACE = "tl-hpa-bench"
WORKLOAD = f"{NAMESPACE}/deployment/limited"
GOAL = 0.80   # issue 60: the same count in 80 % of the minutes
POLL_S = 2.0
FETCH_S = 15.0


def log(msg: str) -> None:
    print(f"[hpa_vs_controller] {msg}", file=sys.stderr, flush=True)


def parse_stages(text: str) -> list[tuple[float, float]]:
    """``RATE:SECONDS,...`` as (requests/s, seconds) pairs."""
    out = []
    for part in text.split(","):
        rate, _, seconds = part.partition(":")
        out.append((float(rate), float(seconds)))
    if not out or any(r < 0 or s <= 0 for r, s in out):
        raise SystemExit(f"--stages {text}: RATE:SECONDS pairs, rates >= 0, seconds > 0")
    return out


def hpa_manifest(target: int, most: int, down_window: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "limited", "namespace": NAMESPACE},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "limited"},
                     "minReplicas": 1, "maxReplicas": most,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization",
                                                   "averageUtilization": target}}}],
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": down_window}}}}


async def _open_loop(url: str, host: str, stages: Sequence[tuple[float, float]],
                     t0: float) -> dict[str, int]:
    """Each request at its own time (an open loop), the rate stepped by ``stages``, from the
    wall-clock ``t0``; the answers counted by status."""
    counts: dict[str, int] = {}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        async def one() -> None:
            try:
                answer = await client.get(url, headers={"Host": host})
                key = str(answer.status_code)
            except httpx.HTTPError as exc:
                key = type(exc).__name__
            counts[key] = counts.get(key, 0) + 1

        tasks = []
        at = t0
        for rate, seconds in stages:
            end = at + seconds
            if rate > 0:
                step = 1.0 / rate
                while at < end:
                    delay = at - time.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(one()))
                    at += step
            at = end
        delay = at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await asyncio.gather(*tasks)
    return counts


def _epoch(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


class Watch:
    """The controller's count every :data:`POLL_S`, the pods' time to Ready, and every pod's
    window fetched every :data:`FETCH_S` into ``dest``, on a thread of its own."""

    def __init__(self, n: Any, t0: float, dest: Path) -> None:
        self.n, self.t0, self.dest = n, t0, dest
        self.counts: list[tuple[float, int]] = []
        self.ready_after: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}   # wall clock, pods made after t0
        self.hpa_status: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last_fetch = 0.0
        while not self._stop.is_set():
            now = time.time()
            try:
                self._poll(now)
                if now - last_fetch >= FETCH_S:
                    self.fetch(now)
                    last_fetch = now
            except Exception as exc:   # keep watching: the record says what was missed
                self.problems.append(f"{now - self.t0:.0f} s: {exc}")
            self._stop.wait(POLL_S)

    def _poll(self, now: float) -> None:
        deployment = json.loads(self.n.kubectl("-n", NAMESPACE, "get", "deployment",
                                               "limited", "-o", "json").stdout)
        self.counts.append((now - self.t0, int(deployment["spec"]["replicas"])))
        pods = json.loads(self.n.kubectl("-n", NAMESPACE, "get", "pods", "-l",
                                         "app.kubernetes.io/component=limited", "-o",
                                         "json").stdout)["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            made = _epoch(pod["metadata"]["creationTimestamp"])
            ready = next((c for c in pod["status"].get("conditions") or []
                          if c["type"] == "Ready" and c["status"] == "True"), None)
            if ready is not None and name not in self.ready_after and made >= self.t0:
                self.ready_at[name] = _epoch(ready["lastTransitionTime"])
                self.ready_after[name] = self.ready_at[name] - made
        hpa = self.n.kubectl("-n", NAMESPACE, "get", "hpa", "limited", "-o", "json",
                             check=False)
        if hpa.returncode == 0:
            status = json.loads(hpa.stdout).get("status") or {}
            self.hpa_status.append({"t_s": round(now - self.t0, 1),
                                    "current": status.get("currentReplicas"),
                                    "desired": status.get("desiredReplicas"),
                                    "metrics": status.get("currentMetrics")})

    def fetch(self, now: float) -> None:
        """Every pod's window since the load began, from its node's agent (a later fetch
        of a pod replaces its earlier, shorter one)."""
        from client.run.k8s_workloads import fetch_windows, parse_workload_ref, read_workload

        workload = read_workload(parse_workload_ref(WORKLOAD))
        _paths, missing = fetch_windows(workload, now - self.t0 + 5, self.dest)
        if missing and now - self.t0 > 30:
            self.problems.append(f"{now - self.t0:.0f} s: " + "; ".join(missing))


def minutes_of(counts: Sequence[tuple[float, int]], window_s: float) -> list[int | None]:
    """The controller's count at the end of each minute (the last poll before it)."""
    out: list[int | None] = []
    for m in range(int(window_s // 60)):
        before = [c for t, c in counts if t < 60.0 * (m + 1)]
        out.append(before[-1] if before else None)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", default="4:120,12:120,24:120,12:90,4:150",
                        help="the open loop's rates, RATE:SECONDS,... (default 10 minutes)")
    parser.add_argument("--target", type=int, default=50,
                        help="the HPA's CPU utilization target, %% of the request (default 50)")
    parser.add_argument("--max", type=int, default=4, help="the HPA's maxReplicas (default 4)")
    parser.add_argument("--down-window", type=int, default=60,
                        help="behavior.scaleDown.stabilizationWindowSeconds (default 60)")
    parser.add_argument("--iterations", type=int, default=5000,
                        help="burn iterations per request (~1 us of CPU each; default 5000)")
    parser.add_argument("--flush", type=float, default=5.0,
                        help="seconds to wait after the load for the agent's rows (default 5)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the windows are kept (default: a new temporary folder)")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("the node needs root")
    stages = parse_stages(opts.stages)
    window_s = sum(s for _r, s in stages)
    work = opts.out or Path(tempfile.mkdtemp(prefix="hpa-vs-controller-"))
    windows = work / "windows"
    windows.mkdir(parents=True, exist_ok=True)
    path = f"/cpuBurnFlow?iterations={opts.iterations}"
    with the_node() as n, recorder_on_every_node(n, work, log), \
            the_deployment(n, work, "100m", path, NAMESPACE) as base:
        os.environ["KUBECONFIG"] = str(n.lay.kubeconfig)
        before = put_back(n, NAMESPACE)
        hpa = hpa_manifest(opts.target, opts.max, opts.down_window)
        try:
            t0 = time.time() + 2
            n.kubectl("apply", "-f", "-", input=json.dumps(hpa))
            with Watch(n, t0, windows) as watch:
                answers = asyncio.run(_open_loop(base + path, host_of(NAMESPACE), stages, t0))
                t1 = time.time()
                time.sleep(opts.flush)
                watch.fetch(time.time())
            cluster_hpa = json.loads(n.kubectl("-n", NAMESPACE, "get", "hpa", "limited", "-o",
                                               "json").stdout)
        finally:
            n.kubectl("-n", NAMESPACE, "delete", "hpa", "limited", "--ignore-not-found",
                      check=False)
            n.kubectl("-n", NAMESPACE, "scale", "deployment/limited",
                      f"--replicas={before['replicas']}", check=False)
            n.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/limited",
                      "--timeout=180s", check=False, timeout=200)
        after = put_back(n, NAMESPACE)
        left = n.kubectl("-n", NAMESPACE, "get", "hpa", "-o", "name").stdout.split()
        log(f"load answers {answers}; put back {after} (was {before}); HPAs left {left}")
    from client.analysis.hpa import rule_of, run_hpa

    rule = rule_of(cluster_hpa)
    timelines = sorted(windows.glob("*.cgroup.csv"))
    rates = summed_rates(timelines, t0, min(t1, t0 + window_s), watch.ready_at)
    ready_after = (statistics.median(watch.ready_after.values()) if watch.ready_after
                   else 30.0)
    replayed = run_hpa(rule, rates, float(len(rates)), 0.1, 0.1, start_replicas=1,
                       ready_after_s=ready_after)
    said = [m["replicas"] for m in replayed.per_minute()][:int(window_s // 60)]
    ran = minutes_of(watch.counts, window_s)
    same = sum(1 for a, b in zip(said, ran) if a == b)
    share = same / len(ran) if ran else 0.0
    demand = [sum(c for s, _e, c in rates if 60 * m <= s < 60 * (m + 1)) / 60
              for m in range(len(ran))]
    rate_at = []
    for m in range(len(ran)):
        t, acc = 60.0 * m + 30, 0.0
        for rate, seconds in stages:
            if t < acc + seconds:
                rate_at.append(rate)
                break
            acc += seconds
        else:
            rate_at.append(0.0)
    print(f"### The HPA replay against the cluster's controller: {WORKLOAD} (100m request "
          f"and limit), an HPA at {opts.target} % CPU, 1 to {opts.max} replicas, scale-down "
          f"window {opts.down_window} s; an open loop through Traefik stepped "
          f"{opts.stages} (requests/s:s) of ~{opts.iterations / 1000:g} ms of CPU; "
          f"{len(timelines)} pods recorded; load average {loadavg()}, {os.cpu_count()} CPUs\n")
    print(f"the same count in {same} of {len(ran)} minutes ({100 * share:.0f} %; goal "
          f"{100 * GOAL:.0f} %: {'met' if share >= GOAL else 'missed'}); the pods' median "
          f"time to Ready {ready_after:.0f} s ({len(watch.ready_after)} pods); put back: "
          f"{after['replicas']} replica(s) (before: {before['replicas']}), HPAs left: "
          f"{len(left)}; answers {answers}"
          + (f"; missed while watching: {'; '.join(watch.problems[:3])}"
             if watch.problems else ""))
    print()
    print("| minute | rate /s | recorded CPU used | controller ran | replay says | same |")
    print("|---|---|---|---|---|---|")
    for m, (a, b) in enumerate(zip(said, ran)):
        print(f"| {m} | {rate_at[m]:g} | {demand[m]:.3f} | {b} | {a} | "
              f"{'yes' if a == b else 'no'} |")
    keep_record("hpa_vs_controller", {
        "stages": opts.stages, "target_pct": opts.target, "max": opts.max,
        "down_window_s": opts.down_window, "iterations": opts.iterations,
        "t0": t0, "t1": t1, "rule": rule.to_dict(), "pods_recorded": len(timelines),
        "ready_after_s": ready_after, "ready_after_by_pod": watch.ready_after,
        "controller_per_minute": ran, "replay_per_minute": said,
        "demand_cpus_per_minute": demand, "same": same, "minutes": len(ran),
        "share": share, "goal": GOAL, "met": share >= GOAL,
        "replay_syncs": [list(s) for s in replayed.syncs],
        "controller_counts": watch.counts, "hpa_status": watch.hpa_status,
        "answers": answers, "problems": watch.problems, "before": before, "after": after,
        "hpas_left": left, "kept": str(work)})
    return 0


if __name__ == "__main__":
    run_main(main)
