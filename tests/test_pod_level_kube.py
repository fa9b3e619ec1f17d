"""A Deployment with only a pod-level CPU limit (``spec.template.spec.resources``, KEP-2837,
PodLevelResources on by default since 1.34), on the project's node: the kubelet puts the quota
on the pod's group and, the container having none, the same on the container's;
``watch k8s:NS/POD`` reads that quota (0.3 CPU) from the pod's levels, its figures within the pod group's own cpu.stat
read around it; ``advise --k8s`` stops in one line before any resize, the pod untouched. The
namespace is removed at the end."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from client.run.cgroup_lookup import find_pod_directory
from cpuquota.cgroupfs import read_cpu_stat
from kubenode import node as kubenode
from kubenode.images import ctr_binary
from tests.kube import namespace_gone
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
    doc["spec"]["template"]["metadata"]["labels"] = dict(labels)
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

    def pod(self) -> dict[str, Any]:
        out = self.node.kubectl("-n", NS, "get", "pod", "-l",
                                "app.kubernetes.io/component=podlevel", "-o", "json")
        pods = [p for p in json.loads(out.stdout)["items"]
                if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]


def _has_service_image(node: kubenode.Node) -> bool:
    out = subprocess.run([ctr_binary(), "--address", node.containerd_address, "-n", "k8s.io",
                          "images", "ls", "-q"], capture_output=True, text=True, timeout=60)
    return "docker.io/library/throttle-lab:latest" in out.stdout.split()


@pytest.fixture(scope="module")
def pod_level(kube_node: kubenode.Node) -> Iterator[PodLevel]:
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
        yield PodLevel(kube_node, env)
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
        # a level of the pod's: the kubelet writes the pod-level limit on the pod's group and,
        # the container having none of its own, on the container's too (equal: either binds)
        assert line["quota_group"] is None or group.name in line["quota_group"], line
    assert before is not None and after is not None
    assert sum(line["nr_periods"] for line in lines) <= (after - before).nr_periods


def test_advise_on_a_pod_level_limit_says_why_in_one_line(pod_level: PodLevel,
                                                          tmp_path: Path) -> None:
    pod = pod_level.pod()
    before = (pod["spec"], pod["status"]["containerStatuses"][0]["restartCount"])
    url = f"http://{pod['status']['podIP']}:7800/cpuBurnFlow?iterations=5000"
    result = timed(pod_level, "advise", "--k8s", f"{NS}/deployment/podlevel", "--url", url,
                   "--p99", "80", cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and ("has a pod-level CPU limit (0.3 CPU, "
                                 "spec.resources.limits.cpu), the one that binds") in line
    after = pod_level.pod()
    assert (after["spec"], after["status"]["containerStatuses"][0]["restartCount"]) == before
