"""A Deployment with only a pod-level CPU limit (``spec.template.spec.resources``, KEP-2837,
PodLevelResources on by default since 1.34), on the project's node (v1.37: in-place resize of
pod-level resources on by default since 1.36), recorded by the session's node agent: the
kubelet puts the quota on the pod's group and, the container having none, the same on the
container's. The pod level is the one named: ``watch k8s:NS/POD`` reads that quota (0.3 CPU)
as the pod group's, its figures within the pod group's own cpu.stat read around it; ``record``
writes it in the timeline's metadata, the agent in its window's; ``advise --k8s`` resizes the
pod-level resources in place and puts them back (spec, status, both quota files, restart
count and container id as before); ``cluster`` lists the Deployment at the pod-level limit and
says so. The namespace is removed at the end."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from client.analysis.cluster import NO_RECOMMENDATION, NO_WINDOW
from client.run.cgroup_lookup import find_pod_directory
from cpuquota.cgroupfs import read_cpu_stat
from kubenode import node as kubenode
from kubenode.images import has_image
from kubenode.project_images import SERVICE_IMAGE
from tests.advise_support import advice
from tests.kube import namespace_gone, one_live_pod, wait_for
from tests.recorder_support import RECORDER_NS
from tests.support import BIN, ROOT

pytestmark = pytest.mark.node

NS = "tl-podlevel-test"
CPU = Path("/sys/fs/cgroup/cpu")        # the node runs on cgroup v1 (tests/kube.py)
POD_CPU = "300m"


def pod_level_deployment() -> dict[str, Any]:
    """k8s/deployment-limited.yaml as ``podlevel``: its container without resources, the pod
    with them (the same memory, 300m of CPU)."""
    doc = yaml.safe_load((ROOT / "k8s" / "deployment-limited.yaml").read_text())
    doc["metadata"] = {"name": "podlevel", "namespace": NS,
                       "labels": {"app.kubernetes.io/component": "podlevel"}}
    labels = {"app.kubernetes.io/name": "throttle-lab", "app.kubernetes.io/component": "podlevel"}
    doc["spec"]["selector"]["matchLabels"] = labels
    doc["spec"]["template"]["metadata"]["labels"] = {**labels, "throttle-lab/record": "true"}
    spec = doc["spec"]["template"]["spec"]
    container = spec["containers"][0]
    spec["resources"] = {"requests": {"cpu": POD_CPU, "memory": "128Mi"},
                         "limits": {"cpu": POD_CPU, "memory": "384Mi"}}
    del container["resources"]
    return doc


@dataclass
class PodLevel:
    node: kubenode.Node
    env: dict[str, str]
    agent: str        # the node agent's pod (the session's recorder)

    def pod(self) -> dict[str, Any]:
        return one_live_pod(self.node, NS, "podlevel")

    def groups(self, pod: dict[str, Any]) -> tuple[Path, Path]:
        """(the pod's group, its container's) under the node's cgroup root."""
        group = find_pod_directory(CPU, pod["metadata"]["uid"], None)
        assert group is not None
        cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
        return group, group / cid

    def state(self) -> tuple[Any, ...]:
        """What must be as before: the pod's name, spec (pod-level resources, the
        container's none), status.resources, restart count, container id, QoS class, and
        both groups' quota files."""
        pod = self.pod()
        status = pod["status"]["containerStatuses"][0]
        group, container = self.groups(pod)
        return (pod["metadata"]["name"], pod["spec"].get("resources"),
                pod["spec"]["containers"][0].get("resources"), pod["status"].get("resources"),
                status["restartCount"], status["containerID"], pod["status"]["qosClass"],
                (group / "cpu.cfs_quota_us").read_text(),
                (container / "cpu.cfs_quota_us").read_text())


def _has_service_image(node: kubenode.Node) -> bool:
    return has_image(node.containerd_address, SERVICE_IMAGE)


@pytest.fixture(scope="module")
def pod_level(kube_node: kubenode.Node, node_recorder: dict[str, Any]) -> Iterator[PodLevel]:
    if not _has_service_image(kube_node):   # a node of its own: the images from here
        kubenode.load_project_images(kube_node.lay, print, ROOT)
    namespace_gone(kube_node, NS)
    kube_node.kubectl("create", "namespace", NS)
    try:
        kube_node.kubectl("apply", "-f", "-", input=json.dumps(pod_level_deployment()))
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/podlevel",
                          "--timeout=240s", timeout=260)
        env = dict(os.environ, KUBECONFIG=str(kube_node.lay.kubeconfig),
                   PATH=f"{kube_node.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        yield PodLevel(kube_node, env, node_recorder["metadata"]["name"])
    finally:
        kube_node.kubectl("delete", "namespace", NS, "--wait=false", check=False, timeout=60)


def timed(at: PodLevel, *args: str, cwd: Path, timeout: float = 300
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=cwd, env=at.env,
                          capture_output=True, text=True, timeout=timeout)


def test_watch_reads_the_pod_level_quota_from_the_pods_levels(pod_level: PodLevel,
                                                               tmp_path: Path) -> None:
    pod = pod_level.pod()
    group = find_pod_directory(CPU, pod["metadata"]["uid"], None)
    assert group is not None
    assert int((group / "cpu.cfs_quota_us").read_text()) == 30000   # the kubelet's pod level
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    assert int((group / cid / "cpu.cfs_quota_us").read_text()) == 30000   # and the container's
    before = read_cpu_stat(group, 1)
    result = timed(pod_level, "watch", f"k8s:{NS}/{pod['metadata']['name']}", "--interval",
                   "0.3", "--count", "3", cwd=tmp_path, timeout=120)
    after = read_cpu_stat(group, 1)
    assert result.returncode == 0, result.stderr
    assert "no CPU quota" not in result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert line["quota_cpus"] == pytest.approx(0.3), line
        # the kubelet writes the pod-level limit on the pod's group and, the container having
        # none of its own, on the container's too: the spec says it is the pod's
        assert line["quota_group"].endswith("/" + group.name), line
    assert before is not None and after is not None
    assert sum(line["nr_periods"] for line in lines) <= (after - before).nr_periods


def test_record_names_the_pod_level_quota(pod_level: PodLevel, tmp_path: Path) -> None:
    pod = pod_level.pod()
    group, container = pod_level.groups(pod)
    result = timed(pod_level, "record", f"k8s:{NS}/{pod['metadata']['name']}", "--duration",
                   "2", "--name", "rec", "--data-dir", str(tmp_path), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "rec.json").read_text())["cgroup"]
    assert meta["quota_group"].endswith("/" + group.name) and meta["cpus"] == 0.3, meta
    assert [level["path"] for level in meta["levels"]] == [str(group), str(container)], meta


def test_the_agent_names_the_pod_level_quota(pod_level: PodLevel) -> None:
    """The agent's window of the container names the pod's group as the quota in force."""
    pod = pod_level.pod()
    group, _ = pod_level.groups(pod)
    key = f"{NS}/{pod['metadata']['name']}/{pod['spec']['containers'][0]['name']}"
    proxy = f"/api/v1/namespaces/{RECORDER_NS}/pods/{pod_level.agent}:9742/proxy"
    now = time.time()

    def window() -> dict[str, Any]:
        out = pod_level.node.kubectl("get", "--raw", f"{proxy}/windows?from={now - 600:.6f}"
                                     f"&to={time.time():.6f}&key={key}").stdout
        return json.loads(out.splitlines()[0])

    wait_for("the agent's window of the container", lambda: "meta" in window(), 60, 1)
    meta = window()["meta"]["cgroup"]
    assert meta["quota_group"].endswith("/" + group.name) and meta["cpus"] == 0.3, meta
    assert meta["levels"][0]["path"].endswith("/" + group.name), meta


def test_advise_resizes_the_pod_level_in_place_and_puts_it_back(pod_level: PodLevel,
                                                                tmp_path: Path) -> None:
    before = pod_level.state()
    pod = pod_level.pod()
    assert before[7:] == ("30000\n", "30000\n")
    url = f"http://{pod['status']['podIP']}:7800/cpuBurnFlow?iterations=5000"
    result = timed(pod_level, "advise", "--k8s", f"{NS}/deployment/podlevel", "--url", url,
                   "--p99", "80", "--requests", "60", "--profile-seconds", "3", "--name", "p",
                   "--json", cwd=tmp_path, timeout=900)
    print(result.stderr[-6000:])
    assert pod_level.state() == before     # spec, status, restarts, id, both quota files
    answer = advice(result, tmp_path, "p")
    if answer is None:
        return      # refused after the profile (checked): the pod missed 80 ms at 2 CPUs
    inplace = answer["inplace"]
    assert inplace["kind"] == "k8s" and "its pod-level resources" in inplace["set_by"]
    assert inplace["original"]["quota_us"] == inplace["left_at"]["quota_us"] == 30000
    assert inplace["unchanged"].endswith("unchanged"), inplace["unchanged"]
    # the runs were at other limits than 0.3 CPU: resized at the pod level, in place
    quotas = {round(run["quota_cpus"], 3) for run in inplace["cgroup"].values()}
    assert quotas - {0.3}, quotas
    if answer["recommended"] is not None:
        permanent = "\n".join(inplace["permanent"])
        assert "pod-level spec.resources: limits.cpu" in permanent, permanent
        assert '"spec":{"template":{"spec":{"resources":' in permanent, permanent


def test_cluster_lists_it_at_the_pod_level_limit(pod_level: PodLevel, tmp_path: Path) -> None:
    result = timed(pod_level, "cluster", "-n", NS, "--since", "1h", "--json", cwd=tmp_path,
                   timeout=300)
    # 3: no workload could be advised, each row saying why (its window, recorded while the
    # advise test swept the pod at lower limits, may sit throttled in nearly every period)
    assert result.returncode in (0, 3), (result.stderr, result.stdout)
    (row,) = json.loads(result.stdout)["workloads"]
    assert row["workload"] == f"{NS}/deployment/podlevel" and row["limit_cpus"] == 0.3, row
    if result.returncode == 3:
        assert row["recommended_cpus"] is None, row
        assert any(note == NO_WINDOW or note.startswith(NO_RECOMMENDATION)
                   for note in row["notes"]), row
    assert any(note.startswith("the pod-level limit (spec.resources.limits.cpu, on the pod's "
                               "group) is the one that binds") for note in row["notes"]), row
