"""``advise --k8s NS/deployment/NAME --replicas``'s scale-and-restore logic
(``client.advise.replicas_live``, ``client.run.k8s_scale``) against the fake API server
(benchmarks/fake_kube.py) standing in for a Deployment: its ``scale`` subresource, its pods (the
ones past what the nodes hold stay Pending, unscheduled, as the scheduler leaves them), each
pod's limit changed by ``pods/resize``.

The runs are stood in for by a rule of the per-replica limit (the limits are really set on the
fake's pods first, as a run sets them); the count and the limits are the fake's own, read after
the end, an error mid-search or Ctrl-C mid-search. The restore of the limits is the live
advice's own (``client.run.inplace.InPlace``), with a limiter of the fake's pods."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from client.advise import AdviseError
from client.advise.replicas_live import LiveAsked, hpa_refusal, size_live
from client.analysis.goal import LatencyGoal, Measured
from client.data.files import Run
from client.render.replicas import format_sizing
from client.run.at_limit import AtLimit
from client.run.inplace import InPlace
from client.run.k8s_scale import Scaler, pods_now
from client.run.k8s_workloads import WorkloadRef
from client.run.kube_api import KubeApi, connect
from client.run.limiters.base import Limiter, LimiterError
from client.run.limiters.kubernetes import cpu_cores
from client.run.plan import LoadPlan
from client.run.record import RunSpec
from cpuquota.limit import Limit
from benchmarks.fake_kube import Cluster, fake_kube
from tests.support import http_timing

NS, NAME, HASH = "shop", "web", "5d"
SCALE = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}/scale"
PODS = f"/api/v1/namespaces/{NS}/pods"
RESIZE = re.compile(rf"/api/v1/namespaces/{NS}/pods/([^/]+)/resize")
TEMPLATE = "500m"            # the pod template's limit: every pod's when we come
NEED = {1: 1.6, 2: 0.7, 3: 0.5, 4: 0.4}   # the per-replica CPUs that meet the goal, per N
GOAL = LatencyGoal(50.0)


@dataclass
class Deployment:
    """The Deployment the fake serves: ``replicas`` wanted, the first ``capacity`` pods
    scheduled (Running, Ready), the rest Pending; each pod's limit as resized."""

    replicas: int = 2
    capacity: int = 3
    names: list[str] = field(default_factory=list)
    limits: dict[str, str] = field(default_factory=dict)
    made: int = 0
    # at each change of the count: whether every pod had the template's limit then
    scaled_at_template: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reconcile()

    def reconcile(self) -> None:
        self.names = self.names[:self.replicas]
        while len(self.names) < self.replicas:
            self.made += 1
            self.names.append(f"{NAME}-{HASH}-p{self.made}")
            self.limits[self.names[-1]] = TEMPLATE

    def pod(self, index: int, name: str) -> dict[str, Any]:
        scheduled = index < self.capacity
        return {
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"app": NAME, "pod-template-hash": HASH},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": f"{NAME}-{HASH}"}]},
            "spec": {"nodeName": "node-1" if scheduled else "", "containers": [
                {"name": "app", "resources": {"limits": {"cpu": self.limits[name]}}}]},
            "status": {"phase": "Running" if scheduled else "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}] if scheduled else [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/2 nodes are available: 2 Insufficient cpu."}]}}

    def get(self, path: str) -> Any:
        if path == SCALE:
            return {"kind": "Scale", "spec": {"replicas": self.replicas}}
        if path == PODS:
            return {"metadata": {}, "items": [self.pod(i, n) for i, n in enumerate(self.names)]}
        return None

    def patch(self, path: str, body: Any) -> Any:
        if path == SCALE:
            self.scaled_at_template.append(all(self.limits[n] == TEMPLATE for n in self.names))
            self.replicas = int(body["spec"]["replicas"])
            self.reconcile()
            return {"kind": "Scale", "spec": {"replicas": self.replicas}}
        if (found := RESIZE.fullmatch(path)) and found[1] in self.names:
            self.limits[found[1]] = body["spec"]["containers"][0]["resources"]["limits"]["cpu"]
            return self.pod(self.names.index(found[1]), found[1])
        return None

    def cpus(self) -> dict[str, float | None]:
        return {n: cpu_cores(self.limits[n]) for n in self.names}


class FakePodsLimiter(Limiter):
    """The fake's running pods resized alike through ``pods/resize``, read back from their
    specs (a kubelet that does at once what it is asked)."""

    kind = "k8s"
    can_remove = False

    def __init__(self, api: KubeApi, pods: list[str]) -> None:
        self.api, self.pods = api, pods
        self.description = f"pods/resize of {', '.join(pods)}"
        self.names = {"namespace": NS, "pods": pods}

    def read(self) -> Limit | None:
        listed = self.api.get_json(PODS)["items"]
        found = {cpu_cores(p["spec"]["containers"][0]["resources"]["limits"]["cpu"])
                 for p in listed if p["metadata"]["name"] in self.pods}
        return Limit(found.pop()) if len(found) == 1 else None

    def check(self, limit: Limit | None) -> None:
        if limit is None:
            raise LimiterError("a pod's limit cannot be taken away")

    def apply(self, limit: Limit | None) -> None:
        assert limit is not None
        for pod in self.pods:
            self.api.patch_json(f"{PODS}/{pod}/resize", {"spec": {"containers": [
                {"name": "app", "resources": {"limits": {"cpu": f"{limit.millicores}m"}}}]}})

    def restore_hint(self, limit: Limit | None) -> str:
        return f"kubectl -n {NS} patch pod ... --subresource resize ({limit})"

    def node_cpus(self) -> tuple[int, str]:
        return 2, "the node's 2 CPUs"


@dataclass(frozen=True)
class Nowhere:
    """No group to sample: the stand-in runs read no throttling."""

    spec: str = f"k8s:{NS}/deployment/{NAME}"
    usage_counter: str = "none"

    def sampled(self) -> None:
        return None

    def marked(self, run: Run) -> Run:
        return run


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    state = Deployment()
    fake = Cluster(lists={f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers": []},
                   get=state.get, patch=state.patch)
    with fake_kube(fake, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield state


def opened(api: KubeApi) -> AtLimit:
    """The Deployment's running pods now, at a limit set in place (the live advice's
    ``InPlace``, its limiter the fake's pods)."""
    pods = list(pods_now(api.get_json(PODS)["items"], NAME).ready)
    limiter = FakePodsLimiter(api, pods)
    template = RunSpec(url="http://web.shop/", plan=LoadPlan.from_options(requests=1),
                       name="-", data_dir=Path("."), iterations=0, command=())
    return InPlace(Nowhere(), limiter, limiter.read(), template, len(pods))


@dataclass
class Rule:
    """A run at a limit stood in for: the limit set on the pods (as a run sets it), then p99
    20 ms where the per-replica CPUs reach ``NEED[N]``, else 80 ms; ``stop``: raise this at
    the given run (1-based) after setting the limit."""

    state: Deployment
    stop: tuple[int, BaseException] | None = None
    calls: list[tuple[int, int]] = field(default_factory=list)   # (N, millicores)

    def __call__(self, at: AtLimit, limit: Limit, role: str, name: str) -> Measured:
        assert isinstance(at, InPlace)
        at.apply(limit)
        n = len(self.state.names)
        self.calls.append((n, limit.millicores))
        assert set(self.state.cpus().values()) == {limit.cpus}, "every pod resized alike"
        if self.stop is not None and len(self.calls) == self.stop[0]:
            raise self.stop[1]
        p99 = 20.0 if limit.cpus >= NEED[n] else 80.0
        return Measured(name, role, limit, 100, 0, p99 / 2, p99 * 0.8, p99, None,
                        GOAL.misses(p99 * 0.8, p99, None))


def asked(counts: tuple[int, ...], tmp_path: Path) -> LiveAsked:
    return LiveAsked(counts, GOAL, LoadPlan.from_options(requests=100), "t",
                     datetime.now(timezone.utc), tmp_path, 100.0)


def scaler() -> Scaler:
    return Scaler(connect(), WorkloadRef(NS, "Deployment", NAME), pending_timeout_s=0.3,
                  poll_s=0.02)


def assert_back(state: Deployment) -> None:
    assert state.replicas == 2 and len(state.names) == 2
    assert set(state.cpus().values()) == {0.5}, state.limits
    assert all(state.scaled_at_template), "a count changed while a pod had a limit we set"


def test_each_count_its_smallest_limit_the_least_total_and_all_put_back(
        deployment: Deployment, tmp_path: Path) -> None:
    said: list[str] = []
    rule = Rule(deployment)
    api = connect()
    sized = size_live(asked((1, 2, 3), tmp_path), scaler(), lambda: opened(api), rule,
                      said.append)
    assert_back(deployment)
    assert {n for n, _ in rule.calls} == {1, 2, 3}
    assert len(deployment.scaled_at_template) == 4       # 1, 2, 3, then back to 2
    answer = sized.to_dict()
    rows = answer["replicas"]
    assert [r["replicas"] for r in rows] == [1, 2, 3]
    for row in rows:
        n, cpus = row["replicas"], row["cpus"]
        tried = [m / 1000 for k, m in rule.calls if k == n]
        assert row["met"] and cpus >= NEED[n] and row["p99_ms"] <= GOAL.p99_ms
        assert cpus == min(c for c in tried if c >= NEED[n])
        below = [c for c in tried if c < NEED[n]]
        assert below and cpus <= max(below) * 1.1 + 0.001, (cpus, below)   # bracketed
        assert row["total_cpus"] == pytest.approx(n * cpus)
        assert len(row["pods"]) == n
    assert [r["least"] for r in rows].count(True) == 1
    best = next(r for r in rows if r["least"])
    assert best["total_cpus"] == min(r["total_cpus"] for r in rows)
    assert answer["restored"]["replicas"] == 2 and answer["restored"]["limits_as_before"]
    text = format_sizing(answer)
    assert "<- least" in text and "(measured)" in text and "put back: 2 replicas" in text
    assert any("restored" in line for line in said)


def test_a_search_cut_short_by_max_runs_says_so(deployment: Deployment, tmp_path: Path) -> None:
    api = connect()
    few = LiveAsked((1,), GOAL, LoadPlan.from_options(requests=100), "t",
                    datetime.now(timezone.utc), tmp_path, 100.0, max_runs=2)
    sized = size_live(few, scaler(), lambda: opened(api), Rule(deployment))
    (row,) = sized.to_dict()["replicas"]
    assert not row["met"] and sized.least is None
    assert "none of the limits tried, up to" in row["reason"]
    assert "(--max-runs 2 reached)" in row["reason"]
    assert_back(deployment)


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), AdviseError("the run failed")],
                         ids=["ctrl-c", "error"])
def test_ctrl_c_or_an_error_mid_search_puts_the_count_and_limits_back(
        deployment: Deployment, tmp_path: Path, stop: BaseException) -> None:
    rule = Rule(deployment, (4, stop))         # in N = 2's search (N = 1 takes 3 or more)
    api = connect()
    with pytest.raises(type(stop)):
        size_live(asked((1, 3, 4), tmp_path), scaler(), lambda: opened(api), rule)
    assert len(rule.calls) == 4
    assert any(m != 500 for _, m in rule.calls), "the limits were changed before the stop"
    assert_back(deployment)


def test_more_replicas_than_the_nodes_hold_is_one_line_and_put_back(
        deployment: Deployment, tmp_path: Path) -> None:
    rule = Rule(deployment)
    api = connect()
    with pytest.raises(AdviseError) as caught:
        size_live(asked((1, 4), tmp_path), scaler(), lambda: opened(api), rule)
    line = str(caught.value)
    assert "\n" not in line
    assert f"{NS}/deployment/{NAME}: 4 replicas are more than the nodes hold" in line
    assert "Pending after 0.3 s (0/2 nodes are available: 2 Insufficient cpu.)" in line
    assert {n for n, _ in rule.calls} == {1}     # N = 1 searched, N = 4 never ran
    assert_back(deployment)


def test_an_hpa_on_the_workload_stops_it_unless_told() -> None:
    hpa = ("shop/web", {"spec": {"minReplicas": 2, "maxReplicas": 6}})
    with pytest.raises(AdviseError, match="the HPA shop/web scales shop/deployment/web "
                       r"\(2 to 6 replicas\): it would change the replica count"):
        hpa_refusal("shop/deployment/web", hpa, False)
    assert "going on (--despite-hpa)" in (hpa_refusal("shop/deployment/web", hpa, True) or "")
    assert hpa_refusal("shop/deployment/web", None, False) is None


def test_the_command_refuses_an_hpa_in_one_line_before_any_change(
        deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hpa = {"metadata": {"name": "web", "namespace": NS}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
        "minReplicas": 1, "maxReplicas": 4, "metrics": []}}
    fake_lists = {f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers": [hpa]}
    with fake_kube(Cluster(fake_lists, get=deployment.get, patch=deployment.patch),
                   tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        result = http_timing("advise", "--k8s", f"{NS}/deployment/{NAME}", "--url",
                             "http://127.0.0.1:9/", "--replicas", "1,2", "--p99", "50",
                             cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "the HPA shop/web scales shop/deployment/web (1 to 4 replicas)" in result.stderr
    assert "--despite-hpa" in result.stderr
    assert deployment.replicas == 2 and len(deployment.scaled_at_template) == 0


@pytest.mark.parametrize("args, words", [
    (["--replicas", "1,2", "--url", "http://127.0.0.1:9/"], "goes with --k8s"),
    (["--k8s", "shop/deployment/web", "--url", "http://127.0.0.1:9/", "--replicas", "1,2",
      "--spread", "random"], "--spread: with --passive only"),
    (["--k8s", "shop/statefulset/web", "--url", "http://127.0.0.1:9/", "--replicas", "1"],
     "a Deployment only"),
    (["--despite-hpa"], "--despite-hpa: with --k8s NS/deployment/NAME --replicas only"),
])
def test_bad_live_replicas_input_is_one_line(tmp_path: Path, args: list[str],
                                             words: str) -> None:
    result = http_timing("advise", "--p99", "50", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_pods_now_tells_ready_starting_and_unscheduled_apart() -> None:
    state = Deployment(replicas=4, capacity=2)
    items = state.get(PODS)["items"]
    items[1]["status"]["conditions"][1]["status"] = "False"   # scheduled, not ready yet
    items.append(json.loads(json.dumps(items[0])) | {"metadata": {
        **items[0]["metadata"], "name": "web-5d-old", "deletionTimestamp": "2026-01-01T00:00Z"}})
    other = json.loads(json.dumps(items[0]))
    other["metadata"]["ownerReferences"][0]["name"] = "webber-5d"
    other["metadata"]["name"] = "webber-5d-x"
    now = pods_now([*items, other], NAME)
    assert now.ready == ("web-5d-p1",) and now.starting == ("web-5d-p2",)
    assert [name for name, _ in now.pending] == ["web-5d-p3", "web-5d-p4"]
    assert now.pending[0][1] == "0/2 nodes are available: 2 Insufficient cpu."
    assert set(now.limits) == {"web-5d-p1", "web-5d-p2", "web-5d-p3", "web-5d-p4"}
