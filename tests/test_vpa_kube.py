"""A workload under a VerticalPodAutoscaler, on the project's node: the VPA CRD installed by the
test (tests/data/vpa/crd.yaml, no VPA controller), the limited Deployment in a namespace of its
own, and a VPA object targeting it. ``advise --k8s`` (live and ``--passive``) and ``--apply``
stop in one line, exit 2, the pod untouched; ``--despite-vpa`` goes on, says so, and puts the
limit back; a VPA with ``updateMode: Off`` does not stop it. The CRD, the VPA and the
namespace are removed at the end."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubenode import node as kubenode
from kubenode.images import has_image
from kubenode.project_images import SERVICE_IMAGE
from tests.kube import namespace_gone, namespaced_overlay, one_live_pod, shipped_limit
from tests.support import BIN, ROOT

pytestmark = pytest.mark.node

NS = "tl-vpa-test"
CRD = ROOT / "tests" / "data" / "vpa" / "crd.yaml"
URL = "http://{ip}:7800/cpuBurnFlow?iterations=5000"
LIMIT = shipped_limit()


@dataclass
class UnderVpa:
    node: kubenode.Node
    env: dict[str, str]

    def pod(self) -> dict[str, Any]:
        return one_live_pod(self.node, NS, "limited")

    def state(self) -> tuple[Any, ...]:
        pod = self.pod()
        status = pod["status"]["containerStatuses"][0]
        return (pod["metadata"]["name"], pod["spec"]["containers"][0]["resources"],
                status.get("resources"), status["restartCount"], status["containerID"])

    def vpa(self, mode: str) -> None:
        body = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                "metadata": {"name": "limited-vpa", "namespace": NS},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": "limited"},
                         "updatePolicy": {"updateMode": mode}}}
        self.node.kubectl("apply", "-f", "-", input=json.dumps(body))


def _has_service_image(node: kubenode.Node) -> bool:
    return has_image(node.containerd_address, SERVICE_IMAGE)


@pytest.fixture(scope="module")
def under_vpa(kube_node: kubenode.Node, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[UnderVpa]:
    overlay = namespaced_overlay(ROOT / "k8s", tmp_path_factory.mktemp("vpa-overlay"), NS, [
        ("batch/v1", "Job", "http-timing"), ("apps/v1", "Deployment", "limitless"),
        ("networking.k8s.io/v1", "Ingress", "*")])
    if not _has_service_image(kube_node):   # a node of its own: the images from here
        kubenode.load_project_images(kube_node.lay, print, ROOT)
    namespace_gone(kube_node, NS)
    kube_node.kubectl("apply", "-f", str(CRD))
    try:
        kube_node.kubectl("wait", "--for", "condition=established", "--timeout=60s",
                          "crd/verticalpodautoscalers.autoscaling.k8s.io", timeout=70)
        kube_node.kubectl("apply", "-k", str(overlay), timeout=120)
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/limited",
                          "--timeout=300s", timeout=320)
        env = dict(os.environ, KUBECONFIG=str(kube_node.lay.kubeconfig),
                   PATH=f"{kube_node.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        yield UnderVpa(kube_node, env)
    finally:
        kube_node.kubectl("delete", "-k", str(overlay), "--wait=false", check=False,
                          timeout=120)
        kube_node.kubectl("delete", "-f", str(CRD), "--wait=true", check=False, timeout=120)


def timed(under: UnderVpa, *args: str, cwd: Path, timeout: float = 600
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=cwd, env=under.env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_vpa_in_an_updating_mode_stops_advise_and_apply_in_one_line(
        under_vpa: UnderVpa, tmp_path: Path) -> None:
    under_vpa.vpa("InPlaceOrRecreate")
    before = under_vpa.state()
    pod, ip = before[0], under_vpa.pod()["status"]["podIP"]
    said = (f"http-timing: {NS}/deployment/limited is under VPA {NS}/limited-vpa (updateMode "
            "InPlaceOrRecreate): the VPA will change the limit again")
    for argv in (["--k8s", f"{NS}/deployment/limited"],
                 ["--cgroup", f"k8s:{NS}/{pod}", "--apply"]):
        result = timed(under_vpa, "advise", *argv, "--url", URL.format(ip=ip), "--p99", "80",
                       cwd=tmp_path, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(said) and "--despite-vpa" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    passive = timed(under_vpa, "advise", "--passive", "--k8s", f"{NS}/deployment/limited",
                    "--p99", "80", cwd=tmp_path, timeout=120)
    assert passive.returncode == 2 and passive.stderr.startswith(said), passive.stderr
    assert under_vpa.state() == before   # nothing was resized
    assert not any(tmp_path.iterdir())   # and no run was made


def test_despite_vpa_goes_on_and_puts_the_limit_back(under_vpa: UnderVpa,
                                                     tmp_path: Path) -> None:
    under_vpa.vpa("Recreate")
    before = under_vpa.state()
    ip = under_vpa.pod()["status"]["podIP"]
    result = timed(under_vpa, "advise", "--k8s", f"{NS}/deployment/limited", "--url",
                   URL.format(ip=ip), "--p99", "80", "--requests", "30", "--profile-seconds",
                   "2", "--max-runs", "3", "--no-alternatives", "--name", "v", "--json",
                   "--despite-vpa", cwd=tmp_path, timeout=900)
    assert result.returncode in (0, 3), result.stderr[-3000:]
    assert (f"advise: --despite-vpa: VPA {NS}/limited-vpa (updateMode Recreate) targets "
            f"{NS}/deployment/limited") in result.stderr
    answer = json.loads(result.stdout)
    assert answer["inplace"]["left_at"]["quota_us"] == LIMIT.quota_us
    assert under_vpa.state() == before   # resources, restarts, container id as they were


def test_a_vpa_that_does_not_update_lets_advise_go_on(under_vpa: UnderVpa,
                                                      tmp_path: Path) -> None:
    under_vpa.vpa("Off")
    result = timed(under_vpa, "advise", "--passive", "--k8s", f"{NS}/deployment/limited",
                   "--p99", "80", cwd=tmp_path, timeout=120)
    # past the VPA: what stops it now, if anything, is the recording (no agent runs here)
    assert "VPA" not in result.stderr, result.stderr
