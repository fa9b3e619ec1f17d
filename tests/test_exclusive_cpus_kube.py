"""Exclusive CPUs on the project's node (issue 58, item 3): node 2's kubelet restarted with the
static CPU manager for this module only (``kubenode.node.cpu_manager_policy``: 100m reserved,
its ``cpu_manager_state`` removed; put back to the default policy at the end, after the
namespace is gone). A Guaranteed Deployment with an integer CPU limit (1) placed there gets a
CPU of its own and, on 1.37, no CFS quota: the kernel's files (``cpu.cfs_quota_us`` of the pod's
group and its container's, printed) say so, and ``watch`` and ``record`` on
``k8s:NS/POD``, the node agent's metrics and ``cluster`` each say "no CPU quota: throttling
cannot happen here" and carry no throttling figure (null, not 0); ``cluster`` lists the
workload apart. No other node test has a pod on node 2 under this policy: node 2 carries the
session's taint (tests/kube.py) and only this module's pod tolerates it while it holds."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cpuquota.limit import NO_QUOTA
from kubenode import node as kubenode
from kubenode.config import member
from tests.kube import namespace_gone, one_live_pod, toleration, wait_for
from tests.recorder_support import RECORDER_NS
from tests.support import BIN, ROOT

pytestmark = pytest.mark.node

NS = "tl-exclusive-test"
CGROUP = Path("/sys/fs/cgroup")        # the node runs on cgroup v1 (tests/kube.py)
NODE = member(2)                       # the node whose kubelet runs the static policy here


def exclusive_deployment() -> dict[str, Any]:
    """k8s/deployment-limited.yaml as ``exclusive``: Guaranteed with 1 CPU (requests equal to
    limits, an integer CPU), on node 2, recorded by the node agent."""
    doc = yaml.safe_load((ROOT / "k8s" / "deployment-limited.yaml").read_text())
    doc["metadata"] = {"name": "exclusive", "namespace": NS,
                       "labels": {"app.kubernetes.io/component": "exclusive"}}
    labels = {"app.kubernetes.io/name": "throttle-lab",
              "app.kubernetes.io/component": "exclusive"}
    doc["spec"]["selector"]["matchLabels"] = labels
    doc["spec"]["template"]["metadata"]["labels"] = {**labels, "throttle-lab/record": "true"}
    spec = doc["spec"]["template"]["spec"]
    spec["tolerations"] = [*spec.get("tolerations", []), toleration()]
    spec["nodeSelector"] = {"kubernetes.io/hostname": NODE.name}
    container = spec["containers"][0]
    container["imagePullPolicy"] = "Never"   # imported into each node's containerd
    both = {"cpu": "1", "memory": "128Mi"}
    container["resources"] = {"requests": dict(both), "limits": dict(both)}
    return doc


@dataclass
class Exclusive:
    node: kubenode.Node
    env: dict[str, str]

    def pod(self) -> dict[str, Any]:
        return one_live_pod(self.node, NS, "exclusive")

    def groups(self, controller: str = "cpu") -> tuple[Path, Path]:
        """(the pod's group, its container's) under node 2's cgroup root in ``controller``."""
        pod = self.pod()
        uid = pod["metadata"]["uid"]
        (group,) = list((CGROUP / controller / NODE.cgroup_root / "kubepods").rglob(
            f"pod{uid}"))
        cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
        return group, group / cid


@pytest.fixture(scope="module")
def exclusive(kube_node: kubenode.Node, node_recorder: dict[str, Any]) -> Iterator[Exclusive]:
    namespace_gone(kube_node, NS)
    kubenode.cpu_manager_policy(kube_node.lay, NODE.index, "static")
    try:
        kube_node.kubectl("create", "namespace", NS)
        kube_node.kubectl("apply", "-f", "-", input=json.dumps(exclusive_deployment()))
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/exclusive",
                          "--timeout=240s", timeout=260)
        env = dict(os.environ, KUBECONFIG=str(kube_node.lay.kubeconfig),
                   PATH=f"{kube_node.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        yield Exclusive(kube_node, env)
    finally:
        kube_node.kubectl("delete", "namespace", NS, "--wait=false", check=False, timeout=60)
        namespace_gone(kube_node, NS)   # the pod gone before the policy goes back
        kubenode.cpu_manager_policy(kube_node.lay, NODE.index, "none")


def timed(at: Exclusive, *args: str, cwd: Path, timeout: float = 300
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=cwd, env=at.env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_kernel_gives_exclusive_cpus_no_quota(exclusive: Exclusive) -> None:
    pod = exclusive.pod()
    assert pod["status"]["qosClass"] == "Guaranteed" and pod["spec"]["nodeName"] == NODE.name
    group, container = exclusive.groups()
    _, cpuset = exclusive.groups("cpuset")
    quotas = {str(path): (path / "cpu.cfs_quota_us").read_text().strip()
              for path in (group, container)}
    cpus = (cpuset / "cpuset.cpus").read_text().strip()
    print(f"cpu.cfs_quota_us (pod, container): {quotas}; the container's cpuset.cpus: {cpus}")
    assert list(quotas.values()) == ["-1", "-1"], quotas
    assert cpus not in ("", "0") and "0" not in cpus.replace("-", ",").split(","), cpus


def test_watch_and_record_say_no_quota_and_claim_no_throttling(exclusive: Exclusive,
                                                                tmp_path: Path) -> None:
    name = exclusive.pod()["metadata"]["name"]
    watched = timed(exclusive, "watch", f"k8s:{NS}/{name}", "--interval", "0.3", "--count",
                    "3", cwd=tmp_path, timeout=120)
    print(watched.stderr)
    assert watched.returncode == 0 and NO_QUOTA in watched.stderr, watched.stderr
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert line["quota_cpus"] is None and line["quota_group"] is None, line
        assert (line["nr_periods"], line["nr_throttled"], line["throttled_ms"],
                line["throttled_share"]) == (None, None, None, None), line
    recorded = timed(exclusive, "record", f"k8s:{NS}/{name}", "--duration", "2", "--name",
                     "rec", "--data-dir", str(tmp_path), cwd=tmp_path, timeout=120)
    print(recorded.stderr)
    assert recorded.returncode == 0 and NO_QUOTA in recorded.stderr, recorded.stderr
    meta = json.loads((tmp_path / "rec.json").read_text())["cgroup"]
    assert (meta["quota_us"], meta["cpus"], meta["quota_group"], meta["levels"]) == (
        None, None, None, []), meta


def agent_ip(exclusive: Exclusive) -> str:
    """The pod IP of node 2's agent (the session's recorder DaemonSet)."""
    out = exclusive.node.kubectl("-n", RECORDER_NS, "get", "pods", "--field-selector",
                                 f"spec.nodeName={NODE.name}", "-o", "json").stdout
    (agent,) = [p for p in json.loads(out)["items"]
                if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
    return str(agent["status"]["podIP"])


def test_the_agents_metrics_say_no_quota(exclusive: Exclusive) -> None:
    pod = exclusive.pod()["metadata"]["name"]
    url = f"http://{agent_ip(exclusive)}:9742/metrics"

    def series() -> list[str]:
        return [line for line in httpx.get(url, timeout=10).text.splitlines()
                if f'pod="{pod}"' in line]

    found = wait_for("the agent's series of the pod", lambda: [
        line for line in series() if line.startswith("throttle_lab_cpu_no_quota{")], 90, 1)
    print(*found, sep="\n")
    assert all(line.rsplit(" ", 1)[1] == "1" for line in found), found
    text = httpx.get(url, timeout=10).text
    (help_line,) = [line for line in text.splitlines()
                    if line.startswith("# HELP throttle_lab_cpu_no_quota ")]
    assert NO_QUOTA in help_line, help_line
    claims = [line for line in series() if line.startswith((
        "throttle_lab_cpu_cfs_throttled", "throttle_lab_cpu_cfs_quota_seconds"))]
    assert claims == [], claims


def test_cluster_lists_it_apart_with_no_throttling_figure(exclusive: Exclusive,
                                                          tmp_path: Path) -> None:
    time.sleep(3)   # the agent's window of the pod has a few rows
    listed = timed(exclusive, "cluster", "-n", NS, "--since", "1h", "--json", cwd=tmp_path,
                   timeout=300)
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    assert answer["workloads"] == [], answer["workloads"]
    (row,) = answer["no_quota"]
    print(json.dumps(row)[:2000])
    assert row["workload"] == f"{NS}/deployment/exclusive" and row["limit_cpus"] == 1, row
    assert row["no_quota"].startswith(NO_QUOTA) and "static CPU manager" in row["no_quota"]
    assert (row["periods_throttled"], row["throttled_ms"]) == (None, None), row
    text = timed(exclusive, "cluster", "-n", NS, "--since", "1h", cwd=tmp_path, timeout=300)
    assert text.returncode == 0, text.stderr
    assert f"{NO_QUOTA}, so no throttling figure (1 workload(s)):" in text.stdout, text.stdout


def test_advise_refuses_in_one_line(exclusive: Exclusive, tmp_path: Path) -> None:
    """A live advice cannot give the pod a quota and take it away again: one line, exit 2,
    the pod untouched."""
    before = exclusive.pod()["spec"]["containers"][0]["resources"]
    result = timed(exclusive, "advise", "--k8s", f"{NS}/deployment/exclusive", "--url",
                   "http://127.0.0.1:9/", "--p99", "50", cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert NO_QUOTA in result.stderr and "static CPU manager" in result.stderr, result.stderr
    assert exclusive.pod()["spec"]["containers"][0]["resources"] == before
