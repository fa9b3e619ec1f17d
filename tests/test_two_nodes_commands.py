"""Issue 47's "done when": the demo's limited Deployment (k8s/deployment-limited.yaml, 100m)
with one pod on each of the session's two nodes, loaded once so both are throttled, and every
command that reads a pod from a kubeconfig alone, run from the host as a user who holds only
the roles of k8s/recorder/user-rbac.yaml and made to go through each pod's node's agent
(HTTP_TIMING_THROUGH_API=1, as from a laptop): a run's ``--cgroup k8s:``, ``watch k8s:``,
``import RUN --timeline k8s:``, ``cluster``, ``advise --passive --k8s`` and the live ``advise
--k8s NS/deployment/limited`` (both pods resized alike, put back). What each says of a pod is
what that pod's own group's ``cpu.stat`` on its own node counted over the same window (of the
Deployment: the two pods' sum): the pods are idle before and after the load, so the counters
only move inside it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from client.data.files import read_run
from client.data.timeline import CgroupSample
from client.run.pod_reach import THROUGH_API_ENV
from kubenode import node as kubenode
from kubenode.config import member
from tests.advise_support import advice, check_counted_by_the_group
from tests.kube import pods_namespace, toleration, wait_for
from tests.recorder_support import RECORDER_NS, cpu_stat, kubectl_json, user_kubeconfig
from tests.support import BIN, ROOT, stop_by_pid

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

NS = "tl-two-commands"
CPU = Path("/sys/fs/cgroup/cpu")
NODES = (member(1), member(2))
ITERATIONS = 30000     # ~30 ms of CPU a request: three 10 ms quotas
REQUESTS = 8
WORKLOAD = f"{NS}/deployment/limited"
QUIET_S = 6            # the counters stand still this long before the load: the windows start there


def deployment() -> str:
    """k8s/deployment-limited.yaml in NS, two replicas, one on each node, no probes."""
    doc = yaml.safe_load((ROOT / "k8s" / "deployment-limited.yaml").read_text())
    doc["metadata"]["namespace"] = NS
    doc["spec"]["replicas"] = 2
    spec = doc["spec"]["template"]["spec"]
    spec["containers"][0]["imagePullPolicy"] = "Never"   # imported into each node's containerd
    # no probes: the kubelet's requests every 5 s throttle an idle 100m pod on a busy
    # machine, and the windows must begin while both pods are idle
    for probe in ("readinessProbe", "livenessProbe"):
        spec["containers"][0].pop(probe, None)
    spec["tolerations"] = [toleration()]
    spec["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": doc["spec"]["selector"]["matchLabels"]}}]
    return json.dumps(doc)


class Sampler:
    """The group's cpu.stat every 20 ms, each read with the wall clock's ns, in a thread."""

    def __init__(self, group: Path) -> None:
        self.group, self.reads = group, [(time.time_ns(), cpu_stat(group))]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        while not self.stopped.wait(0.02):
            self.reads.append((time.time_ns(), cpu_stat(self.group)))

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def delta(self, key: str, from_ns: int, to_ns: int) -> int:
        """The counter's change from the last read at or before ``from_ns`` to the first at
        or after ``to_ns`` (or the last read): at least all it counted between the two."""
        start = max((r for r in self.reads if r[0] <= from_ns), key=lambda r: r[0],
                    default=self.reads[0])
        end = min((r for r in self.reads if r[0] >= to_ns), key=lambda r: r[0],
                  default=self.reads[-1])
        return end[1][key] - start[1][key]

    def inside(self, key: str, from_ns: int, to_ns: int) -> int:
        """The counter's change from the first read at or after ``from_ns`` to the last at or
        before ``to_ns``: at most what it counted between the two."""
        start = min((r for r in self.reads if r[0] >= from_ns), key=lambda r: r[0])
        end = max((r for r in self.reads if r[0] <= to_ns), key=lambda r: r[0])
        return max(0, end[1][key] - start[1][key])


@dataclass
class Pod:
    name: str
    node: str
    group: Path          # the pod's group under its node's cgroup root
    url: str
    before: dict[str, int]
    after: dict[str, int]
    watch: list[dict[str, Any]]   # watch k8s:NS/POD's lines after its first (the load's)
    sampled: Sampler | None = None   # its cpu.stat every 20 ms through the runs

    def delta(self, key: str) -> int:
        return self.after[key] - self.before[key]


@dataclass
class Loaded:
    pods: list[Pod]
    data: Path           # the runs' directory
    quiet_from: float    # Unix s: no pod throttled from then until the load
    until: float         # Unix s: after the load's last throttle (each pod's ``after``)

    def window(self) -> list[str]:
        """``--since`` and ``--until`` for the window from the quiet seconds before the load
        to just after it: what the pods' cpu.stat counted from ``before`` to ``after``."""
        return ["--since", f"{math.floor(self.until - self.quiet_from) - 1}s",
                "--until", f"{self.until:.3f}"]


def _group(pod: dict[str, Any]) -> Path:
    """The pod's group, under its own node's cgroup root and no other's."""
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    found = {m.name: list((CPU / m.cgroup_root / "kubepods").rglob(f"pod{uid}")) for m in NODES}
    assert [len(groups) for name, groups in found.items() if name != node] == [0], found
    (group,) = found[node]
    return group


def _spread(n: kubenode.Node) -> list[dict[str, Any]] | None:
    """The Deployment's pods once there are two, on two nodes."""
    items = [x for x in kubectl_json(n, "-n", NS, "get", "pods", "-l",
                                     "app.kubernetes.io/component=limited")["items"]
             if x["metadata"].get("deletionTimestamp") is None]
    return items if len({x["spec"]["nodeName"] for x in items}) == len(items) == 2 else None


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def _quiet(groups: list[Path]) -> None:
    """Wait until no group has been throttled for QUIET_S (a pod's start throttles it)."""
    def still() -> bool:
        first = [cpu_stat(g)["nr_throttled"] for g in groups]
        time.sleep(QUIET_S)
        return first == [cpu_stat(g)["nr_throttled"] for g in groups]
    wait_for("the pods idle", still, 120, interval=0)


def _watch(pod: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "http-timing"), "watch", f"k8s:{NS}/{pod}", "--interval",
                             "0.5"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def loaded(kube_node: kubenode.Node, node_recorder: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """The Deployment's two pods, one on each node; watch k8s: on each from its first line;
    then one run of REQUESTS with --cgroup k8s: to each pod, the two at once; each pod's
    cpu.stat before (idle) and after (idle again); the watches stopped (Ctrl-C) after that."""
    data = tmp_path_factory.mktemp("two-nodes")
    with pods_namespace(kube_node, NS):
        kube_node.kubectl("apply", "-f", "-", input=deployment())
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/limited", "--timeout=300s",
                          timeout=320)
        items = wait_for("one running pod on each node", lambda: _spread(kube_node), 60)
        assert sorted(x["spec"]["nodeName"] for x in items) == sorted(m.name for m in NODES)
        pods = [Pod(x["metadata"]["name"], x["spec"]["nodeName"], _group(x),
                    f"http://{x['status']['podIP']}:7800/cpuBurnFlow?iterations={ITERATIONS}",
                    {}, {}, []) for x in items]
        for pod in pods:
            health = pod.url.split("/cpuBurnFlow", 1)[0] + "/healthz"
            wait_for(f"the service in {pod.name}", lambda: _answers(health), 60, interval=0.5)
            # its first burn pays the service's first-call work at 100m: its answer awaited,
            # not retried (each retry's burn would queue behind it)
            assert httpx.get(pod.url, timeout=httpx.Timeout(None, connect=10)).status_code == 200
        _quiet([p.group for p in pods])
        quiet_from = time.time() - QUIET_S

        kubeconfig = user_kubeconfig(kube_node, data / "user.kubeconfig", NS)
        binding = f"{NS}-workloads"   # cluster and advise --k8s read the workloads
        kube_node.kubectl("create", "clusterrolebinding", binding,
                          "--clusterrole=throttle-lab-workload-reader",
                          f"--serviceaccount={NS}:timeline-user", check=False)
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), **{THROUGH_API_ENV: "1"})
        watches = [_watch(pod.name, env, data) for pod in pods]
        try:
            firsts = [w.stdout.readline() if w.stdout else "" for w in watches]
            assert all(firsts), [w.stderr.read() for w in watches if w.stderr]   # each polling
            for pod in pods:
                pod.before = cpu_stat(pod.group)
                pod.sampled = Sampler(pod.group).__enter__()
            runs = [subprocess.Popen([str(BIN / "http-timing"), "--url", pod.url, "--requests",
                                      str(REQUESTS), "--cgroup", f"k8s:{NS}/{pod.name}",
                                      "--name", pod.name, "--no-plot", "--quiet"], cwd=data,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True) for pod in pods]
            for pod, run in zip(pods, runs):
                out, err = run.communicate(timeout=180)
                assert run.returncode == 0, err
                assert f"throttling in k8s:{NS}/{pod.name} (the node agent" in out, out
            time.sleep(1)   # the last throttle ends at the next period's boundary
            for pod in pods:
                if pod.sampled:
                    pod.sampled.__exit__()
                pod.after = cpu_stat(pod.group)
                assert pod.delta("nr_throttled") >= REQUESTS, (pod.before, pod.after)
            until = time.time()
            time.sleep(3)   # the watches' next polls bring the agent's rows past the load
            for pod, w, first in zip(pods, watches, firsts):
                w.send_signal(signal.SIGINT)   # Ctrl-C
                out, err = w.communicate(timeout=60)
                assert w.returncode == 0, err
                assert "on node " + pod.node in json.loads(first)["usage_counter"]
                pod.watch = [json.loads(line) for line in out.splitlines()]
                print(f"{pod.node}: {pod.name} {pod.delta('nr_throttled')} periods throttled, "
                      f"{pod.delta('throttled_time') / 1e6:.1f} ms throttled (cpu.stat)")
        finally:
            for pod in pods:
                if pod.sampled:
                    pod.sampled.__exit__()
            for w in watches:
                stop_by_pid(w)
        try:
            yield Loaded(pods, data, quiet_from, until)
        finally:
            kube_node.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found",
                              check=False)


def _as_user(loaded: Loaded, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(loaded.data / "user.kubeconfig"),
               **{THROUGH_API_ENV: "1"})
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=loaded.data, env=env,
                          capture_output=True, text=True, timeout=180)


def _rows(run_path: Path) -> tuple[CgroupSample, CgroupSample]:
    """The run's timeline rows its figures are taken between: the last at or before the
    first request's start and the first at or after the last one's end."""
    run = read_run(run_path)
    assert run.timeline is not None
    start = max((s for s in run.timeline if s.t_ns <= min(r.start_ns for r in run.records)),
                key=lambda s: s.t_ns)
    end = min((s for s in run.timeline if s.t_ns >= max(r.end_ns for r in run.records)),
              key=lambda s: s.t_ns)
    return start, end


def _across(run_path: Path) -> tuple[int, int]:
    """The run's timeline across its requests: periods throttled and throttled ns."""
    start, end = _rows(run_path)
    return end.nr_throttled - start.nr_throttled, end.throttled_ns - start.throttled_ns


AGENT_SKEW_NS = 250_000_000   # an agent's row is stamped before its tick reads the groups


def _check_counted_by_its_pod(run_path: Path, pod: Pod) -> None:
    """The run's figures are its pod's cpu.stat between the run's two rows: at least what
    the pod's cpu.stat counted between the first request's start and the last one's end, at
    most what it counted from just before the first row to just after the second. (Not the
    whole load's change: the service may finish a request's work after its answer, and a
    quota running out then is throttled after the run.)"""
    assert pod.sampled is not None
    run = read_run(run_path)
    zero = (run.metadata.clock or {})["zero_epoch_ns"]
    first = zero + min(r.start_ns for r in run.records)
    last = zero + max(r.end_ns for r in run.records)
    start, end = _rows(run_path)
    for key, tool in zip(("nr_throttled", "throttled_time"), _across(run_path)):
        least = pod.sampled.inside(key, first, last)
        most = pod.sampled.delta(key, zero + start.t_ns - AGENT_SKEW_NS,
                                 zero + end.t_ns + AGENT_SKEW_NS)
        assert least <= tool <= most <= pod.delta(key), (pod.name, key, least, tool, most)
    assert _across(run_path)[0] > 0   # the run was throttled


def test_each_pods_run_counts_its_own_pods_cpu_stat(loaded: Loaded) -> None:
    for pod in loaded.pods:
        run = read_run(loaded.data / "raw-data" / f"{pod.name}.csv")
        assert run.metadata.cgroup is not None
        source = run.metadata.cgroup["source"]
        assert source.startswith(f"the node agent {RECORDER_NS}/") and pod.node in source
        assert all(r.cgroup_nr_throttled is not None for r in run.records)
        _check_counted_by_its_pod(loaded.data / "raw-data" / f"{pod.name}.csv", pod)


def test_each_pods_watch_adds_up_to_its_own_pods_cpu_stat(loaded: Loaded) -> None:
    for pod in loaded.pods:
        assert pod.watch and all(f"on node {pod.node}" in line["usage_counter"]
                                 for line in pod.watch)
        assert sum(line["nr_throttled"] for line in pod.watch) == pod.delta("nr_throttled")
        assert sum(line["throttled_ms"] for line in pod.watch) == pytest.approx(
            pod.delta("throttled_time") / 1e6, abs=1e-3)


def test_import_marks_each_pods_run_from_its_own_nodes_agent(loaded: Loaded) -> None:
    for pod in loaded.pods:
        result = _as_user(loaded, "import", f"raw-data/{pod.name}.csv", "--timeline",
                          f"k8s:{NS}/{pod.name}", "--name", f"{pod.name}-imported")
        assert result.returncode == 0, result.stderr
        marked = loaded.data / "raw-data" / f"{pod.name}-imported.csv"
        assert read_run(marked).metadata.extra["imported"]["outside_timeline"] == 0
        # its figures are its pod's cpu.stat between two rows of the agent's recording around
        # the run: at least what cpu.stat counted while the requests ran (the run's own clock
        # says when), at most what it counted over the whole load. Not the run's own rows:
        # the run read the agent live, and on a busy node two rows around it can be others.
        own = loaded.data / "raw-data" / f"{pod.name}.csv"
        run = read_run(own)
        zero = (run.metadata.clock or {})["zero_epoch_ns"]
        first = zero + min(r.start_ns for r in run.records)
        last = zero + max(r.end_ns for r in run.records)
        assert pod.sampled is not None
        for key, imported, live in zip(("nr_throttled", "throttled_time"), _across(marked),
                                       _across(own)):
            least = pod.sampled.inside(key, first, last)
            assert least <= imported <= pod.delta(key), (pod.name, key, least, imported, live,
                                                         pod.delta(key))
        assert _across(marked)[0] > 0   # the run was throttled


def test_cluster_counts_both_pods_own_cpu_stat(loaded: Loaded) -> None:
    result = _as_user(loaded, "cluster", "-n", NS, *loaded.window(), "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["until"] == pytest.approx(loaded.until, abs=1e-3)
    (row,) = answer["workloads"]
    assert row["workload"] == WORKLOAD and row["pods"] == 2
    assert row["periods_throttled"] == sum(p.delta("nr_throttled") for p in loaded.pods)
    assert row["throttled_ms"] == pytest.approx(
        sum(p.delta("throttled_time") for p in loaded.pods) / 1e6, abs=1e-3)


def test_passive_advise_counts_each_pods_own_cpu_stat(loaded: Loaded) -> None:
    result = _as_user(loaded, "advise", "--passive", "--k8s", WORKLOAD, "--p99", "50",
                      *loaded.window(), "--json")
    assert result.returncode in (0, 3), result.stderr   # 3: no limit meets the target
    workload = json.loads(result.stdout)["workload"]
    assert workload["until"] == pytest.approx(loaded.until, abs=1e-3)
    answered = {p["pod"]: p for p in workload["pods"]}
    assert set(answered) == {pod.name for pod in loaded.pods}
    for pod in loaded.pods:
        assert answered[pod.name]["periods_throttled"] == pod.delta("nr_throttled"), pod
        assert answered[pod.name]["throttled_ms"] == pytest.approx(
            pod.delta("throttled_time") / 1e6, abs=1e-3)
        assert (pod.group / "cpu.cfs_quota_us").read_text().strip() == "10000"   # no resize


def test_live_advise_resizes_both_pods_and_counts_the_sum_of_their_own_cpu_stat(
        loaded: Loaded, kube_node: kubenode.Node) -> None:
    """Live ``advise --k8s NS/deployment/limited`` as the user, the requests sent round-robin
    to the two pods (``--targets``: each pod's address, as the host reaches them): each
    candidate set on both pods with pods/resize, each run's periods throttled and throttled
    time the sum of what each pod's cpu.stat on its own node counted over the run, the answer
    one of the limits tried and as its runs say, and both pods' specs and quota files as they
    were at the end."""
    kube_node.kubectl("-n", NS, "create", "rolebinding", f"{NS}-resize",
                      "--clusterrole=throttle-lab-pod-resizer",
                      f"--serviceaccount={NS}:timeline-user", check=False)

    def state() -> Any:
        return [(kubectl_json(kube_node, "-n", NS, "get", "pod", pod.name)["spec"]["containers"],
                 (pod.group / "cpu.cfs_quota_us").read_bytes()) for pod in loaded.pods]

    targets = loaded.data / "both-pods.txt"
    targets.write_text("".join(f"GET {pod.url}\n\n" for pod in loaded.pods))
    before = state()
    with Sampler(loaded.pods[0].group) as first, Sampler(loaded.pods[1].group) as second:
        result = _as_user(loaded, "advise", "--k8s", WORKLOAD, "--targets", str(targets),
                          "--p99", "300", "--requests", "6", "--profile-seconds", "1",
                          "--max-runs", "3", "--no-alternatives", "--name", "live", "--json")
        time.sleep(0.5)   # a read after the last run's end
    print(result.stderr[-4000:])
    assert result.returncode == 0, result.stderr[-3000:]
    assert state() == before   # put back
    # the largest limit tried: the pods' nodes' CPUs as their agents say (the nodes share
    # this machine's CPUs, each its own agent)
    assert "up to node throttle-lab-node" in result.stdout + result.stderr
    assert f"'s {os.cpu_count()} CPUs" in result.stdout + result.stderr
    answer = advice(result, loaded.data, "live")
    assert answer is not None
    check_counted_by_the_group(answer, loaded.data, "live", quota_scale=2)
    assert answer["recommended"]["cpus"] in {r["cpus"] for r in answer["runs"]}
    counted = answer["inplace"]["cgroup"]
    assert counted
    seen: list[int] = []
    for name, report in counted.items():
        run = read_run(loaded.data / "raw-data" / f"{name}.csv")
        assert run.metadata.cgroup is not None
        assert all(pod.node in run.metadata.cgroup["source"] for pod in loaded.pods)
        zero = (run.metadata.clock or {})["zero_epoch_ns"]
        start = zero + min(r.start_ns for r in run.records)
        end = zero + max(r.end_ns for r in run.records)
        periods, throttled_ns = _across(loaded.data / "raw-data" / f"{name}.csv")
        assert report["nr_throttled"] == periods, (name, report)   # the run's own timeline
        # that timeline is the pods' agents' cpu.stat rows: from each pod's last row before
        # the first request to its first after the last answer, so it counted at least what
        # each pod's cpu.stat counted inside the run, and at most what it counted from just
        # before it to the agents' rows after it (100 ms apart; the runs are seconds apart)
        for key, tool in (("nr_throttled", periods), ("throttled_time", throttled_ns)):
            least = sum(s.inside(key, start, end) for s in (first, second))
            most = sum(s.delta(key, start - 500_000_000, end + 2_000_000_000)
                       for s in (first, second))
            assert least <= tool <= most, (name, key, least, tool, most)
        seen.append(periods)
    assert any(seen)   # the quota bit: the lowest limit tried throttled
