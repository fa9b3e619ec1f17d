"""A pod whose CPU limit binds at the pod level (``spec.resources.limits.cpu``, KEP-2837):
``client.run.limiters.kubernetes`` resizes the pod-level resources through ``pods/resize``,
against the fake API server (benchmarks/fake_kube.py) through the official client: the bodies it
sends, its dry-run question before anything changes, and one line for each refusal (a server
without ``pods/resize``, the gate off: 422, a change dropped, a kubelet that cannot act), with
nothing changed left behind; ``--apply``'s Deployment patch at the pod level. The same on the
real API server and kubelet: tests/test_pod_level_kube.py."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from client.render.permanent import permanent_lines
from client.run.inplace import InPlace
from client.run.kube_api import connect
from client.run.limiters import LimiterError
from client.run.limiters.kubernetes import (KubernetesLimiter, binding_level, pod_resize_body,
                                            tied_containers)
from client.run.limiters.quota_source import GroupFiles
from client.run.pod_reach import THROUGH_API_ENV
from cpuquota.limit import Limit
from tests.cgroup_fixtures import v1_group
from benchmarks.fake_kube import Cluster, fake_kube
from tests.support import http_timing

KEY = "shop/api-1"
RESIZE = "/api/v1/namespaces/shop/pods/api-1/resize"


def pod_level_pod(cpu: str = "300m", request: str = "300m", memory: tuple[str, str] = (
        "384Mi", "128Mi"), qos: str = "Burstable", own: str | None = None) -> dict[str, Any]:
    """The node test's pod: its container without resources (or ``own`` cpu limit), the pod
    with them; the status as the 1.37 kubelet posts it."""
    resources = {"limits": {"cpu": cpu, "memory": memory[0]},
                 "requests": {"cpu": request, "memory": memory[1]}}
    container: dict[str, Any] = {"name": "app", "image": "throttle-lab:latest",
                                 "resources": {} if own is None else {"limits": {"cpu": own}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "shop", "name": "api-1", "uid": "u-1",
                         "labels": {"pod-template-hash": "abc12"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "api-abc12", "uid": "r-1"}]},
            "spec": {"containers": [container], "resources": copy.deepcopy(resources)},
            "status": {"phase": "Running", "qosClass": qos,
                       "resources": copy.deepcopy(resources),
                       "containerStatuses": [{"name": "app", "restartCount": 0, "ready": True,
                                              "image": "throttle-lab:latest", "imageID": "",
                                              "containerID": "containerd://abc",
                                              "resources": {}}]}}


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Cluster, Path]]:
    cluster = Cluster()
    cluster.pods[KEY] = pod_level_pod()
    group = v1_group(tmp_path / "cpu" / "kubepods" / "podu-1", quota_us=30000)
    cluster.quota_dirs[KEY] = group
    with fake_kube(cluster, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield cluster, group


def limiter(group: Path) -> KubernetesLimiter:
    api = connect()
    return KubernetesLimiter(None, api.core, "shop", "api-1", None, to_json=api.to_json,
                             timeout=2, server=api.server, request_timeout=5, apps=api.apps,
                             quota=GroupFiles(group, 1))


def resizes(cluster: Cluster) -> list[tuple[bool, Any]]:
    """(a dry run, the body) of each pods/resize patch, in order."""
    return [("dryRun" in query, body) for path, query, body in cluster.patches
            if path == RESIZE]


def test_the_pod_level_resized_in_place_and_put_back(served: tuple[Cluster, Path]) -> None:
    cluster, group = served
    limits = limiter(group)
    assert limits.level == "pod" and "pod-level resources" in limits.description
    # asked first, with nothing stored: a dry run 1m above the limit it has
    assert resizes(cluster) == [(True, {"spec": {"resources": {"limits": {"cpu": "301m"}}}})]
    assert cluster.pods[KEY]["spec"]["resources"]["limits"]["cpu"] == "300m"
    limits.apply(Limit(0.2))
    # Burstable: the pod-level request goes down with a limit below it...
    assert resizes(cluster)[-1] == (False, {"spec": {"resources": {
        "limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}}})
    read = limits.read()
    assert read is not None and read.quota_us == 20000, read
    limits.apply(Limit(0.5))
    # ...and back up to the one it had with a larger one
    assert resizes(cluster)[-1] == (False, {"spec": {"resources": {
        "limits": {"cpu": "500m"}, "requests": {"cpu": "300m"}}}})
    limits.apply(Limit(0.3))
    assert cluster.pods[KEY]["spec"]["resources"] == pod_level_pod()["spec"]["resources"]
    assert (group / "cpu.cfs_quota_us").read_text() == "30000"
    hint = limits.restore_hint(Limit(0.3))
    assert hint == ("kubectl patch pod api-1 -n shop --subresource resize --patch "
                    '\'{"spec":{"resources":{"limits":{"cpu":"300m"},"requests":{"cpu":"300m"}}}}\'')
    assert limits.unchanged() == ("pod shop/api-1, container app: restart count 0 and "
                                  "container id abc unchanged")


@pytest.mark.parametrize("mode, words", [
    ("422", "(422: Pod \"api-1\" is invalid: : Forbidden: resize of pods with pod-level "
            "resources is forbidden when InPlacePodLevelResourcesVerticalScalingEnabled"),
    ("drop", "(a dry run dropped the change)")])
def test_an_api_server_that_refuses_the_pod_level_says_why_in_one_line(
        served: tuple[Cluster, Path], mode: str, words: str) -> None:
    cluster, group = served
    cluster.resize, cluster.version = mode, "v1.35.4"
    with pytest.raises(LimiterError) as refused:
        limiter(group)
    line = str(refused.value)
    assert "\n" not in line and words in line, line
    assert line.startswith("the API server refuses to resize pod shop/api-1's pod-level "
                           "resources ("), line
    assert ("needs Kubernetes 1.36+ with InPlacePodLevelResourcesVerticalScaling on (this one "
            "is v1.35.4); judge it from its recorded window with advise --passive") in line
    assert [dry for dry, _ in resizes(cluster)] == [True]           # only the question
    assert cluster.pods[KEY] == pod_level_pod()                      # nothing changed
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "30000"


def test_a_server_without_pods_resize_says_1_33(served: tuple[Cluster, Path]) -> None:
    cluster, group = served
    cluster.resize, cluster.version = "404", "v1.32.9"
    with pytest.raises(LimiterError) as refused:
        limiter(group)
    assert str(refused.value) == ("the API server has no pods/resize subresource: in-place "
                                  "resize needs Kubernetes 1.33+ (this one is v1.32.9)")
    assert cluster.pods[KEY] == pod_level_pod()


def test_a_kubelet_that_cannot_act_has_the_spec_put_back(served: tuple[Cluster, Path]
                                                         ) -> None:
    """The API server takes it, the node's kubelet (its gate off) reports it Infeasible: one
    line, and the pod's spec is back at the limit it had."""
    cluster, group = served
    limits = limiter(group)
    cluster.resize = "infeasible"
    with pytest.raises(LimiterError) as refused:
        limits.apply(Limit(0.2))
    assert str(refused.value) == ("the kubelet cannot resize shop/api-1's pod-level resources "
                                  "to 200m: Infeasible: InPlacePodLevelResourcesVerticalScaling "
                                  "is disabled")
    assert resizes(cluster)[-1] == (False, {"spec": {"resources": {
        "limits": {"cpu": "300m"}, "requests": {"cpu": "300m"}}}})
    assert cluster.pods[KEY]["spec"] == pod_level_pod()["spec"]


def test_apply_patches_the_pod_templates_pod_level_resources(
        served: tuple[Cluster, Path]) -> None:
    cluster, group = served
    limits = limiter(group)
    said = limits.patch_deployment(Limit(0.45))
    assert said.startswith("applied: deployment shop/api, pod-level spec.resources.limits.cpu "
                           "450m (rolling out"), said
    patched = [body for path, _, body in cluster.patches if "/deployments/" in path]
    assert patched == [{"spec": {"template": {"spec": {"resources": {
        "limits": {"cpu": "450m"}}}}}}]
    limits.patch_deployment(Limit(0.25))   # below the pod-level request: it comes along
    below = [body for path, _, body in cluster.patches if "/deployments/" in path]
    assert below[-1] == {"spec": {"template": {"spec": {"resources": {
        "limits": {"cpu": "250m"}, "requests": {"cpu": "250m"}}}}}}
    lines = permanent_lines("k8s", limits.names, Limit(0.45))
    assert lines[0] == "Deployment shop/api, pod-level spec.resources: limits.cpu 450m"
    assert json.loads(lines[1].split(" -p ")[1].strip("'")) == patched[0]


def test_which_level_binds_and_what_moves_with_it() -> None:
    """A tie (the container's own limit equal to the pod's) is the pod level's: the spec says
    the limit is pod-level, and a pod-level resize moves the tied container's along."""
    assert binding_level(pod_level_pod(), "app") == "pod"
    assert binding_level(pod_level_pod(own="300m"), "app") == "pod"
    assert binding_level(pod_level_pod(own="200m"), "app") == "container"
    no_pod_level = pod_level_pod(own="200m")
    del no_pod_level["spec"]["resources"]
    assert binding_level(no_pod_level, "app") == "container"
    tied = pod_level_pod(own="300m")
    assert tied_containers(tied) == ["app"]
    assert pod_resize_body(tied, Limit(0.4)) == {"spec": {
        "resources": {"limits": {"cpu": "400m"}},
        "containers": [{"name": "app", "resources": {"limits": {"cpu": "400m"}}}]}}
    with pytest.raises(LimiterError, match="below container app's own cpu limit"):
        pod_resize_body(pod_level_pod(own="200m"), Limit(0.1))


def test_the_pod_levels_qos_class_is_kept() -> None:
    guaranteed = pod_level_pod(memory=("128Mi", "128Mi"), qos="Guaranteed")
    assert pod_resize_body(guaranteed, Limit(0.5)) == {"spec": {"resources": {
        "limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}}}
    burstable = pod_level_pod(request="200m", memory=("128Mi", "128Mi"))
    with pytest.raises(LimiterError, match="would make the pod Guaranteed"):
        pod_resize_body(burstable, Limit(0.2))
    below = pod_level_pod(request="100m")
    below["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    with pytest.raises(LimiterError, match="below the sum of pod shop/api-1's containers'"):
        pod_resize_body(below, Limit(0.05))


def test_ctrl_c_puts_the_pod_level_limit_back(served: tuple[Cluster, Path]) -> None:
    """As the container's: the block that changes the limit puts it back however it ends."""
    cluster, group = served
    limits = limiter(group)
    held = InPlace(SimpleNamespace(spec="k8s:shop/api-1"), limits, limits.read(), None)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with held.restoring(said.append):
            held.apply(Limit(0.2))
            assert (group / "cpu.cfs_quota_us").read_text() == "20000"
            raise KeyboardInterrupt
    assert said[0].startswith("in place: k8s:shop/api-1 now has ") and \
        "kubectl patch pod api-1 -n shop --subresource resize" in said[0]
    assert said[-1].startswith("in place: restored: ") and "pod-level resources" in said[-1]
    assert cluster.pods[KEY]["spec"] == pod_level_pod()["spec"]
    assert cluster.pods[KEY]["status"]["resources"] == pod_level_pod()["status"]["resources"]
    assert (group / "cpu.cfs_quota_us").read_text() == "30000"


@pytest.mark.parametrize("mode", ["422", "404"])
def test_advise_on_a_cluster_that_refuses_is_one_line_exit_2(
        served: tuple[Cluster, Path], tmp_path: Path, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``advise --cgroup k8s:`` as a user runs it (the pod on another node: through its
    agent), the API server refusing: one line saying why and what to do, exit 2, no stored
    change."""
    cluster, _ = served
    cluster.resize, cluster.version = mode, "v1.35.4"
    cluster.pods[KEY]["spec"]["nodeName"] = "node-a"
    cluster.agents["node-a"] = "new"
    monkeypatch.setenv(THROUGH_API_ENV, "1")
    result = http_timing("advise", "--cgroup", "k8s:shop/api-1", "--url",
                         "http://127.0.0.1:9/", "--p99", "50", cwd=tmp_path, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    needs = ("needs Kubernetes 1.36+ with InPlacePodLevelResourcesVerticalScaling on"
             if mode == "422" else "in-place resize needs Kubernetes 1.33+")
    assert needs in lines[0], lines[0]
    assert [dry for dry, _ in resizes(cluster)] == [True]
    assert cluster.pods[KEY]["spec"]["resources"] == pod_level_pod()["spec"]["resources"]
