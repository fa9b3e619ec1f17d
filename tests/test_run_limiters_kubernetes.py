"""``client.run.limiters.kubernetes``'s pure parts on pod documents: the resize body keeps the
QoS class, the resize's state, quantities, the identity checked across a resize; and the
limiter's sequence against a scripted API object and a fixture quota file. The same against the
real API server and kubelet: tests/test_commands_advise_k8s.py."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from client.run.service_group import resolve_cgroup
from client.run.limiters import LIMITERS, LimiterError
from client.run.limiters.kubernetes import (KubernetesLimiter, container_name, cpu_cores,
                                            resize_body, resize_state)
from cpuquota.limit import Limit
from tests.cgroup_fixtures import fake_proc, mount_line, v1_group


def pod(qos: str = "Burstable", limit: str = "500m", request: str | None = "200m",
        memory: tuple[str, str] | None = None, policy: str | None = None) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": limit} if limit else {}
    requests: dict[str, str] = {"cpu": request} if request else {}
    if memory:
        limits["memory"], requests["memory"] = memory
    container: dict[str, Any] = {"name": "app", "resources": {"limits": limits,
                                                              "requests": requests}}
    if policy:
        container["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": policy}]
    return {"metadata": {"namespace": "shop", "name": "api-1"},
            "spec": {"containers": [container]},
            "status": {"qosClass": qos, "containerStatuses": [
                {"name": "app", "restartCount": 0, "containerID": "containerd://abc",
                 "resources": {"limits": {"cpu": limit}}}]}}


def test_quantities() -> None:
    assert cpu_cores("300m") == pytest.approx(0.3) and cpu_cores("1.5") == 1.5
    assert cpu_cores(2) == 2.0 and cpu_cores(None) is None
    with pytest.raises(LimiterError, match="quantity"):
        cpu_cores("lots")


def test_the_qos_class_is_kept() -> None:
    burstable = resize_body(pod(), "app", Limit(0.3))
    assert burstable == {"spec": {"containers": [
        {"name": "app", "resources": {"limits": {"cpu": "300m"}}}]}}
    below = resize_body(pod(), "app", Limit(0.1))        # under the 200m request: moved down
    assert below["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m"}
    guaranteed = resize_body(pod("Guaranteed", "500m", "500m"), "app", Limit(0.3))
    assert guaranteed["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "300m"}, "requests": {"cpu": "300m"}}
    with pytest.raises(LimiterError, match="would make the pod Guaranteed"):
        resize_body(pod(memory=("1Gi", "1Gi")), "app", Limit(0.1))
    with pytest.raises(LimiterError, match="no cpu limit"):
        resize_body(pod("BestEffort", "", None), "app", Limit(0.3))
    with pytest.raises(LimiterError, match="RestartContainer"):
        resize_body(pod(policy="RestartContainer"), "app", Limit(0.3))
    with pytest.raises(LimiterError, match="no container web"):
        resize_body(pod(), "web", Limit(0.3))


def test_the_resize_state() -> None:
    document = pod()
    assert resize_state(document, "app") == (0.5, None)
    document["status"]["conditions"] = [{"type": "PodResizePending", "status": "True",
                                         "reason": "Infeasible", "message": "Node didn't have "
                                         "enough capacity"}]
    applied, pending = resize_state(document, "app")
    assert applied == 0.5 and pending is not None and pending.startswith("Infeasible")


class ScriptedApi:
    """``read_namespaced_pod`` / ``patch_namespaced_pod_resize`` on a pod document; the
    "kubelet" applies a patch (status and quota file) after ``lag`` reads, or never
    (``infeasible``)."""

    def __init__(self, document: dict[str, Any], quota_dir: Path, *, lag: int = 2,
                 infeasible: bool = False) -> None:
        self.document, self.quota_dir, self.lag, self.infeasible = document, quota_dir, lag, \
            infeasible
        self.pending: str | None = None
        self.reads = 0
        self.patches: list[dict[str, Any]] = []

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> dict[str, Any]:
        self.reads += 1
        if self.pending is not None and not self.infeasible:
            self.lag -= 1
            if self.lag <= 0:
                status = self.document["status"]["containerStatuses"][0]
                status["resources"]["limits"]["cpu"] = self.pending
                (self.quota_dir / "cpu.cfs_quota_us").write_text(
                    str(round(cpu_cores(self.pending) * 100000)))   # type: ignore[operator]
                self.pending = None
        return copy.deepcopy(self.document)

    def patch_namespaced_pod_resize(self, name: str, namespace: str,
                                    body: dict[str, Any], **_: Any) -> None:
        self.patches.append(body)
        self.pending = body["spec"]["containers"][0]["resources"]["limits"]["cpu"]
        if self.infeasible:
            self.document["status"]["conditions"] = [
                {"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                 "message": "too big"}]


def limiter(tmp_path: Path, api: ScriptedApi) -> KubernetesLimiter:
    top = tmp_path / "cpu"
    v1_group(top, quota_us=-1)
    group = v1_group(top / "kubepods" / "app", quota_us=50000, cpuacct_usage=1)
    proc = fake_proc(tmp_path / "proc", [mount_line(30, "/", top, "cgroup", "rw,cpu,cpuacct")])
    api.quota_dir = group
    return KubernetesLimiter(resolve_cgroup(str(group), proc=proc), api, "shop", "api-1",
                             "app", to_json=lambda obj: obj, timeout=2)


def test_a_resize_in_force_once_status_and_quota_file_say_so(tmp_path: Path) -> None:
    api = ScriptedApi(pod(), tmp_path)
    limits = limiter(tmp_path, api)
    limits.apply(Limit(0.3))
    assert api.patches == [{"spec": {"containers": [
        {"name": "app", "resources": {"limits": {"cpu": "300m"}}}]}}]
    read = limits.read()
    assert read is not None and read.quota_us == 30000
    assert "--subresource resize" in limits.restore_hint(Limit(0.5))
    with pytest.raises(LimiterError, match="taken away"):
        limits.check(None)


class LateStatusApi(ScriptedApi):
    """A kubelet that acted on a resize to 700m (the quota file says 70000) but has not
    posted it: the status still says 500m, so a resize back to 500m reads as done at once.
    Then, on its own time, it acts on 500m (the quota file) with the 700m status posted
    meanwhile; the 500m status comes with the read after one that showed 700m."""

    def __init__(self, document: dict[str, Any], quota_dir: Path) -> None:
        super().__init__(document, quota_dir)
        self.seen: list[str] = []
        self.acted = threading.Event()

    def _status(self, cpu: str) -> None:
        self.document["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] = cpu

    def _act(self) -> None:
        """On the timer's thread; the quota file changes at once, as a kernel file does."""
        self._status("700m")
        staged = self.quota_dir / "cpu.cfs_quota_us.new"
        staged.write_text("50000")
        staged.replace(self.quota_dir / "cpu.cfs_quota_us")
        self.acted.set()

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> dict[str, Any]:
        if self.acted.is_set() and self.seen[-1:] == ["700m"]:
            self._status("500m")
        self.seen.append(self.document["status"]["containerStatuses"][0]["resources"][
            "limits"]["cpu"])
        return copy.deepcopy(self.document)

    def patch_namespaced_pod_resize(self, name: str, namespace: str,
                                    body: dict[str, Any], **_: Any) -> None:
        self.patches.append(body)
        threading.Timer(0.3, self._act).start()


def test_a_restore_waits_for_the_status_posted_after_the_quota(tmp_path: Path) -> None:
    """The status read before the quota is acted on may be stale: once the quota file shows
    the limit, the status must show it again before the limit is in force."""
    api = LateStatusApi(pod(), tmp_path)
    limits = limiter(tmp_path, api)
    (api.quota_dir / "cpu.cfs_quota_us").write_text("70000")   # 700m acted on, not posted
    limits.apply(Limit(0.5))
    assert api.acted.is_set() and "700m" in api.seen and api.seen[-1] == "500m"
    assert api.document["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] \
        == "500m"


def test_a_resize_in_progress_is_not_in_force() -> None:
    document = pod()
    document["status"]["conditions"] = [{"type": "PodResizeInProgress", "status": "True"}]
    assert resize_state(document, "app") == (0.5, "InProgress: the kubelet is acting on a "
                                                   "resize")


def test_an_infeasible_resize_is_one_line(tmp_path: Path) -> None:
    limits = limiter(tmp_path, ScriptedApi(pod(), tmp_path, infeasible=True))
    with pytest.raises(LimiterError, match="cannot resize shop/api-1 to 300m: Infeasible"):
        limits.apply(Limit(0.3))


class OldApi(ScriptedApi):
    """An API server before 1.33: no pods/resize subresource (404 on a pod that is there)."""

    def patch_namespaced_pod_resize(self, name: str, namespace: str,
                                    body: dict[str, Any], **_: Any) -> None:
        raise type("ApiException", (Exception,), {"status": 404, "reason": "Not Found"})()


def test_a_cluster_without_pods_resize_is_one_line_saying_1_33(tmp_path: Path) -> None:
    limits = limiter(tmp_path, OldApi(pod(), tmp_path))
    with pytest.raises(LimiterError) as refused:
        limits.apply(Limit(0.3))
    line = str(refused.value)
    assert line.startswith("the API server has no pods/resize subresource: in-place resize "
                           "needs Kubernetes 1.33+") and "\n" not in line


def test_a_container_limit_below_the_pod_level_one_is_the_containers_to_resize(
        tmp_path: Path) -> None:
    """KEP-2837: a pod-level limit above the container's own leaves the container's binding:
    the container is resized as before (the pod level's own resize:
    tests/test_run_limiters_pod_level.py)."""
    below = pod(limit="300m")
    below["spec"]["resources"] = {"limits": {"cpu": "400m"}}
    limits = limiter(tmp_path, ScriptedApi(below, tmp_path))
    assert limits.level == "container" and limits.description.endswith("container app")
    limits.apply(Limit(0.25))
    assert limits.read() is not None


def test_registered_as_k8s() -> None:
    assert "k8s" in LIMITERS


def test_a_burstable_request_goes_down_with_the_limit_and_back_up() -> None:
    document = pod(limit="500m", request="300m")
    down = resize_body(document, "app", Limit(0.2), request=0.3)
    assert down["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "200m"}
    document["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200m"
    up = resize_body(document, "app", Limit(0.45), request=0.3)
    assert up["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "450m"},
                                                         "requests": {"cpu": "300m"}}


def test_which_container() -> None:
    document = pod()
    assert container_name(document, None) == "app"
    assert container_name(document, "abc") == "app"      # by its id, as --cgroup k8s: takes
    document["spec"]["containers"].append({"name": "sidecar"})
    with pytest.raises(LimiterError, match="2 containers \\(app, sidecar\\): say which with "
                       "--container"):
        container_name(document, None)
    with pytest.raises(LimiterError, match="no container web"):
        container_name(document, "web")


def test_restart_policy_refused_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(LimiterError, match="--allow-restart"):
        limiter(tmp_path, ScriptedApi(pod(policy="RestartContainer"), tmp_path))
    allowed = resize_body(pod(policy="RestartContainer"), "app", Limit(0.3), allow_restart=True)
    assert allowed["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "300m"}


def test_the_restore_hint_and_what_did_not_change(tmp_path: Path) -> None:
    api = ScriptedApi(pod(limit="500m", request="200m"), tmp_path)
    limits = limiter(tmp_path, api)
    hint = limits.restore_hint(Limit(0.5))
    assert hint == ("kubectl patch pod api-1 -n shop --subresource resize --patch "
                    '\'{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"500m"},'
                    '"requests":{"cpu":"200m"}}}]}}\'')
    assert limits.unchanged() == ("pod shop/api-1, container app: restart count 0 and "
                                  "container id abc unchanged")
    api.document["status"]["containerStatuses"][0]["restartCount"] = 1
    assert "CHANGED: restart count 0 -> 1" in limits.unchanged()
