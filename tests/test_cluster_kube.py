"""``cluster`` and ``advise --passive --k8s`` on the project's node (marker ``node``): a
Deployment of one labelled pod limited to 100m, recorded by the session's node agent
(k8s/recorder/), sequential requests of ~30 ms of CPU sent to it from the host. Its row and the
passive answer count the periods the pod group's own ``cpu.stat`` counted over the load, and
no more than it counted since the pod began; nothing is resized (the quota file is as
before). http-timing runs as a user who holds only the roles of k8s/recorder/user-rbac.yaml."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubenode import node as kubenode
from kubenode.config import CGROUP_ROOT
from tests.kube import busy_deployment, pods_namespace, wait_for
from tests.prometheus_support import quiet
from tests.recorder_support import (cpu_stat, exported_throttled, kubectl_json, throttling,
                                    user_kubeconfig)
from tests.support import http_timing

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

NS = "tl-cluster-test"
CPU = Path("/sys/fs/cgroup/cpu")
ITERATIONS = 30000     # ~30 ms of CPU each: three 10 ms quotas
REQUESTS = 12
WORKLOAD = f"{NS}/deployment/busy"
# the window: the agent's whole record of the pod (it began before the load), so that it holds
# the load however long the tests before, and the command's start, took
WHOLE = "1h"


@dataclass
class Loaded:
    env: dict[str, str]
    group: Path
    before: dict[str, int]     # the pod group's cpu.stat around the load
    after: dict[str, int]
    began: float = 0.0         # time.monotonic() when the pod was ready


@pytest.fixture(scope="module")
def loaded(kube_node: kubenode.Node, node_recorder: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    with pods_namespace(kube_node, NS):
        kube_node.kubectl("apply", "-f", "-", input=json.dumps(busy_deployment(NS)))
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/busy", "--timeout=180s",
                          timeout=200)
        began = time.monotonic()
        (pod,) = kubectl_json(kube_node, "-n", NS, "get", "pods", "-l", "app=busy")["items"]
        (group,) = list((CPU / CGROUP_ROOT).rglob(f"pod{pod['metadata']['uid']}"))
        base = f"http://{pod['status']['podIP']}:7800"
        wait_for("the service in the pod", lambda: _healthy(base), 60, interval=0.5)
        url = f"{base}/cpuBurnFlow?iterations={ITERATIONS}"
        name, agent = pod["metadata"]["name"], node_recorder["status"]["podIP"]
        with httpx.Client(timeout=30) as client:
            client.get(url)   # the first request's imports are not the load's
            before = quiet(lambda: throttling(group))
            # the agent records the pod from before the load (it finds a new pod through the
            # API: on a slow machine after the load's first requests)
            wait_for("the agent holding the idle pod's periods throttled", lambda:
                     exported_throttled(agent, name) == before["nr_throttled"], 60, 0.2)
            for _ in range(REQUESTS):
                client.get(url)
        time.sleep(2)   # the last throttle ends; the agent flushes its rows
        after = cpu_stat(group)
        assert after["nr_throttled"] - before["nr_throttled"] >= REQUESTS, (before, after)
        # a user with the roles of k8s/recorder/user-rbac.yaml, the workloads' cluster-wide
        kubeconfig = user_kubeconfig(kube_node, tmp_path_factory.mktemp("user") / "config", NS)
        binding = f"{NS}-workloads"
        kube_node.kubectl("create", "clusterrolebinding", binding,
                          "--clusterrole=throttle-lab-workload-reader",
                          f"--serviceaccount={NS}:timeline-user")
        try:
            yield Loaded(dict(os.environ, KUBECONFIG=str(kubeconfig)), group, before, after,
                         began)
        finally:
            kube_node.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found",
                              check=False)


def _healthy(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def as_user(loaded: Loaded, monkeypatch: pytest.MonkeyPatch) -> Loaded:
    """The user's kubeconfig for http-timing, as a user sets it."""
    monkeypatch.setenv("KUBECONFIG", loaded.env["KUBECONFIG"])
    return loaded


def test_the_row_counts_what_the_pods_cpu_stat_counted(as_user: Loaded, tmp_path: Path
                                                        ) -> None:
    loaded = as_user
    result = http_timing("cluster", "-n", NS, "--since", WHOLE, "--json", "--data-dir",
                         str(tmp_path / "windows"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["workloads"]
    assert row["workload"] == WORKLOAD and row["limit_cpus"] == 0.1 and row["pods"] == 1
    load = loaded.after["nr_throttled"] - loaded.before["nr_throttled"]
    assert load <= row["periods_throttled"] <= loaded.after["nr_throttled"], row   # the kernel's
    load_ms = (loaded.after["throttled_time"] - loaded.before["throttled_time"]) / 1e6
    assert load_ms <= row["throttled_ms"] <= loaded.after["throttled_time"] / 1e6
    assert row["added_delay_p99_now_ms"] is not None and row["recommended_cpus"] is not None
    table = http_timing("cluster", "-A", "--since", WHOLE, cwd=tmp_path)
    assert table.returncode == 0 and WORKLOAD in table.stdout, table.stderr
    assert (loaded.group / "cpu.cfs_quota_us").read_text().strip() == "10000"   # untouched


def test_passive_advise_answers_from_the_recorded_window(as_user: Loaded, tmp_path: Path
                                                         ) -> None:
    loaded = as_user
    result = http_timing("advise", "--passive", "--k8s", WORKLOAD, "--p99", "50", "--since",
                         WHOLE, "--json", cwd=tmp_path)
    assert result.returncode in (0, 3), result.stderr
    data = json.loads(result.stdout)
    (pod,) = data["workload"]["pods"]
    load = loaded.after["nr_throttled"] - loaded.before["nr_throttled"]
    assert load <= pod["periods_throttled"] <= loaded.after["nr_throttled"]
    assert data["passive"] is True and data["replays"]
    if data["recommended"] is not None:
        assert data["predicted"]["at_recommended"]["met"]
    assert (tmp_path / pod["timeline"]).exists()   # the fetched window is kept in the data dir
    assert (loaded.group / "cpu.cfs_quota_us").read_text().strip() == "10000"   # no resize


def test_passive_replicas_answer_per_count(as_user: Loaded, tmp_path: Path) -> None:
    """``--replicas 1,2``: one row per count from the one pod's window split 1/N; one
    replica's answer is the plain passive one; nothing is resized. The busy Deployment has no
    Service (the user lists the namespace's): one line, exit 2, unless ``--spread`` says how
    its requests would be spread."""
    loaded = as_user
    # one window for both answers: the agent goes on recording the busy pod meanwhile
    args = ["advise", "--passive", "--k8s", WORKLOAD, "--p99", "50", "--since", WHOLE,
            "--until", f"{time.time() - 1:.3f}", "--json"]
    refused = http_timing(*args, "--replicas", "1,2", cwd=tmp_path)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, \
        refused.stderr
    assert f"no Service in namespace {NS} selects the pods of" in refused.stderr
    result = http_timing(*args, "--replicas", "1,2", "--spread", "random", cwd=tmp_path)
    assert result.returncode in (0, 3), result.stderr
    data = json.loads(result.stdout)
    assert [r["replicas"] for r in data["replicas"]] == [1, 2]
    assert data["workload"]["recorded_pods"] == 1 and data["spread"]["how"] == "even"
    assert "--spread random assumed over what the Service does" in data["spread"]["says"]
    assert (tmp_path / data["picture"]).exists()
    plain = json.loads(http_timing(*args, cwd=tmp_path).stdout)
    if plain["recommended"] is not None:
        assert data["replicas"][0]["cpus"] == plain["recommended"]["cpus"]
    assert (loaded.group / "cpu.cfs_quota_us").read_text().strip() == "10000"   # no resize


def _hpa(metric: dict[str, Any]) -> str:
    """An autoscaling/v2 HPA on the busy Deployment that cannot change it (min = max = 1)."""
    return json.dumps({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "busy", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                    "name": "busy"},
                 "minReplicas": 1, "maxReplicas": 1, "metrics": [metric]}})


def test_the_workloads_hpa_is_replayed_and_another_metric_refused(
        as_user: Loaded, kube_node: kubenode.Node, tmp_path: Path) -> None:
    loaded = as_user
    # the HPA's replay needs a minute of record
    time.sleep(max(0.0, 75 - (time.monotonic() - loaded.began)))
    args = ["advise", "--passive", "--k8s", WORKLOAD, "--p99", "50", "--since", WHOLE,
            "--hpa"]
    try:
        kube_node.kubectl("apply", "-f", "-", input=_hpa({
            "type": "Resource", "resource": {"name": "memory", "target": {
                "type": "Utilization", "averageUtilization": 70}}}))
        refused = http_timing(*args, cwd=tmp_path)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert "scales on Resource memory Utilization" in refused.stderr, refused.stderr
        kube_node.kubectl("apply", "-f", "-", input=_hpa({
            "type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 70}}}))
        result = http_timing(*args, "--max", "3", "--json", cwd=tmp_path)
        assert result.returncode in (0, 3), result.stderr
        hpa = json.loads(result.stdout)["hpa"]
        assert hpa["source"] == f"HPA {NS}/busy" and hpa["target_cpu_utilization_pct"] == 70
        assert (hpa["min"], hpa["max"]) == (1, 3)
        assert hpa["request_cpus"] == 0.1 and hpa["limit_cpus"] == 0.1   # the pod template's
    finally:
        kube_node.kubectl("-n", NS, "delete", "hpa", "busy", "--ignore-not-found", check=False)
    deployment = kubectl_json(kube_node, "-n", NS, "get", "deployment", "busy")
    assert deployment["spec"]["replicas"] == 1
    assert (loaded.group / "cpu.cfs_quota_us").read_text().strip() == "10000"   # no resize
