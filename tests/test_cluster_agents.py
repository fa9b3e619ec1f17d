"""``cluster`` and ``advise --passive --k8s`` through the node agents, one request a node: a real
HTTP server on loopback stands in for the API server and each node's agent behind its
``pods/proxy`` (benchmarks/fake_kube.py). Each node's agent is asked once (``/windows``, streamed)
for all its pods' windows, the nodes at once, and a workload is handed on as soon as its pods'
windows are in; an older agent (404) is asked a pod at a time; a node whose agent does not
answer marks its pods and the rest are listed. The workloads are listed from the API's JSON,
without building the client's models. The same on the project's node:
tests/test_cluster_kube.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client.run import k8s_workloads
from client.run.kube_api import KubeApi, connect
from client.run.k8s_workloads import (fetch_all_windows, fold_pods, list_workloads,
                                      stream_all_windows)
from benchmarks.fake_kube import Cluster, fake_kube
from client.commands import main as http_timing

DATA = Path(__file__).parent / "data" / "cluster"   # windows in the agent's format
RECORDED = {"throttle-lab/record": "true"}
WINDOW = (DATA / "shop_web-a.cgroup.csv").read_text(), (DATA / "shop_web-a.json").read_text()


def workload(kind: str, name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"cpu": "200m"},
                                            "requests": {"cpu": "200m"}}}]}}},
            "status": {}}


def pod(name: str, owner: str, node: str, recorded: bool = True) -> dict[str, Any]:
    kind = "StatefulSet" if owner == "db" else "ReplicaSet"
    return {"metadata": {"name": name, "namespace": "shop",
                         "labels": RECORDED if recorded else {},
                         "ownerReferences": [{"kind": kind, "name": owner}]},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


PODS = [pod("web-5d-a", "web-5d", "node-1"), pod("web-5d-b", "web-5d", "node-2"),
        pod("api-7c-a", "api-7c", "node-1"), pod("api-7c-b", "api-7c", "node-1"),
        pod("db-0", "db", "node-3"), pod("db-1", "db", "node-3"),
        pod("cache-6f-a", "cache-6f", "node-4"), pod("web-5d-c", "web-5d", "node-2", False)]
LISTS = {
    "/apis/apps/v1/namespaces/shop/deployments": [workload("Deployment", n)
                                                  for n in ("web", "api", "cache")],
    "/apis/apps/v1/namespaces/shop/statefulsets": [workload("StatefulSet", "db")],
    "/apis/apps/v1/namespaces/shop/daemonsets": [],
    "/apis/apps/v1/namespaces/shop/replicasets": [
        {"metadata": {"name": f"{n}-{h}", "namespace": "shop",
                      "ownerReferences": [{"kind": "Deployment", "name": n}]}}
        for n, h in (("web", "5d"), ("api", "7c"), ("cache", "6f"))],
    "/api/v1/namespaces/shop/pods": PODS,
}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """node-1 and node-2: agents with /windows; node-3: an older agent; node-4: none
    answers. Every recorded pod has a window but api-7c-b."""
    fake = Cluster(dict(LISTS), {"node-1": "new", "node-2": "new", "node-3": "old",
                                 "node-4": "down"},
                   {f"shop/{p['metadata']['name']}": WINDOW for p in PODS
                    if p["metadata"]["name"] != "api-7c-b"})
    with fake_kube(fake, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield fake


def asked(fake: Cluster, endpoint: str) -> list[tuple[str, list[str]]]:
    return sorted((path.split("/pods/")[1].split(":")[0], query.get("key", query.get("pod", [])))
                  for path, query in fake.asked if path.endswith("/proxy/" + endpoint))


@pytest.mark.parametrize("until, window", [(None, ("400.000000", "1000.000000")),
                                           (700.0, ("100.000000", "700.000000"))])
def test_each_nodes_agent_is_asked_once_for_all_its_pods_windows(
        until: float | None, window: tuple[str, str], cluster: Cluster, tmp_path: Path) -> None:
    """``--since 600`` to ``--until``, or to now (the clock says 1000) without it."""
    workloads = list_workloads("shop")
    got = fetch_all_windows(workloads, 600.0, tmp_path / "w", until=until, now=lambda: 1000.0)
    assert asked(cluster, "windows") == [
        ("agent-node-1", ["shop/web-5d-a", "shop/api-7c-a", "shop/api-7c-b"]),
        ("agent-node-2", ["shop/web-5d-b"]),   # web-5d-c: not recorded, not asked
        ("agent-node-3", ["shop/db-0", "shop/db-1"]),   # the older one: 404
        ("agent-node-4", ["shop/cache-6f-a"])]   # it does not answer: 503
    windows = [q for p, q in cluster.asked if p.endswith("/proxy/windows")]
    assert all((q["from"], q["to"]) == ([window[0]], [window[1]]) for q in windows)
    # the older agent, a pod at a time: the CSV and its metadata
    assert asked(cluster, "timeline") == [("agent-node-3", ["db-0"])] * 2 + [
        ("agent-node-3", ["db-1"])] * 2
    agents = [p for p, _ in cluster.asked if p.endswith("/throttle-lab-recorder/pods")]
    assert len(agents) == 4   # each node's agent found once
    by = {str(w.ref): got[w.ref] for w in workloads}
    paths, missing = by["shop/deployment/web"]
    assert [p.name for p in paths] == ["shop_web-5d-a.cgroup.csv", "shop_web-5d-b.cgroup.csv"]
    assert missing == ["shop/web-5d-c: not recorded (label it throttle-lab/record=true for "
                       "the node agent)"]
    for path in paths:
        assert path.read_text() == WINDOW[0]
        assert json.loads(path.with_name(path.name.replace(".cgroup.csv", ".json"))
                          .read_text()) == json.loads(WINDOW[1])
    paths, missing = by["shop/deployment/api"]
    assert [p.name for p in paths] == ["shop_api-7c-a.cgroup.csv"]
    assert len(missing) == 1 and missing[0].startswith(
        "shop/api-7c-b: the agent throttle-lab-recorder/agent-node-1 has no timeline for "
        "shop/api-7c-b in that window (no timeline of shop/api-7c-b in that window)")
    paths, missing = by["shop/statefulset/db"]
    assert [p.name for p in paths] == ["shop_db-0.cgroup.csv", "shop_db-1.cgroup.csv"]
    assert paths[0].read_text() == WINDOW[0] and missing == []
    paths, missing = by["shop/deployment/cache"]   # node-4's agent does not answer
    assert paths == [] and len(missing) == 1 and missing[0].startswith(
        "shop/cache-6f-a: the agent throttle-lab-recorder/agent-node-4 does not answer "
        "through the API server's proxy (503: no endpoints)")


def test_a_workload_is_handed_on_as_soon_as_its_pods_windows_are_in(
        cluster: Cluster, tmp_path: Path) -> None:
    """node-1's stream holds back its last line until the test has the first workload:
    that workload came before the stream ended."""
    gate = threading.Event()
    cluster.agents = {"node-1": "new"}
    cluster.windows = {k: v for k, v in cluster.windows.items() if "api" in k or "web-5d-a" in k}
    held = cluster.windows.pop("shop/api-7c-a")
    original = dict(cluster.windows)

    class Gated(dict[str, tuple[str, str]]):
        def __contains__(self, key: object) -> bool:
            if key == "shop/api-7c-a":   # api's first pod: wait for the test
                assert gate.wait(30), "the client never took the first workload"
                return True
            return key in original

        def __getitem__(self, key: str) -> tuple[str, str]:
            return held if key == "shop/api-7c-a" else original[key]

    cluster.windows = Gated()
    workloads = [w for w in list_workloads("shop") if w.ref.name in ("web", "api")]
    for w in workloads:   # only node-1's pods
        object.__setattr__(w, "pods", tuple(p for p in w.pods if p.node == "node-1"))
    stream = stream_all_windows(workloads, 600.0, tmp_path / "w", until=1000.0)
    first, (paths, _) = next(stream)
    assert str(first.ref) == "shop/deployment/web" and not gate.is_set()
    assert [p.name for p in paths] == ["shop_web-5d-a.cgroup.csv"]
    gate.set()
    (second, (paths, missing)), = list(stream)
    assert str(second.ref) == "shop/deployment/api"
    assert [p.name for p in paths] == ["shop_api-7c-a.cgroup.csv"] and len(missing) == 1


def test_the_workloads_are_listed_without_building_the_clients_models(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client import ApiClient

    def no_models(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model or an API class was built")
    monkeypatch.setattr(ApiClient, "response_deserialize", no_models)
    # nor the API classes, whose modules took seconds to import
    monkeypatch.setattr(KubeApi, "core", property(no_models))
    monkeypatch.setattr(KubeApi, "apps", property(no_models))
    workloads = list_workloads("shop")
    web = next(w for w in workloads if str(w.ref) == "shop/deployment/web")
    assert [p.name for p in web.pods] == ["web-5d-a", "web-5d-b", "web-5d-c"]
    assert web.limit_cpus == pytest.approx(0.2)
    assert [(p.node, p.recorded) for p in web.pods] == [("node-1", True), ("node-2", True),
                                                        ("node-2", False)]
    assert workloads == fold_pods(
        LISTS["/apis/apps/v1/namespaces/shop/deployments"]
        + LISTS["/apis/apps/v1/namespaces/shop/statefulsets"],
        ["Deployment"] * 3 + ["StatefulSet"], LISTS["/apis/apps/v1/namespaces/shop/replicasets"],
        PODS)


def test_the_replicasets_are_listed_as_their_metadata_alone(cluster: Cluster) -> None:
    # a ReplicaSet carries its whole pod template; only its owner is read
    workloads = list_workloads("shop")
    accepts = {path.rsplit("/", 1)[-1]: accept for path, accept in cluster.accepts
               if path.startswith(("/api/v1/namespaces/shop/", "/apis/apps/v1/namespaces/"))}
    assert accepts["replicasets"].startswith(
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"), accepts
    assert all(accepts[what] == "application/json"
               for what in ("pods", "deployments", "statefulsets", "daemonsets")), accepts
    web = next(w for w in workloads if str(w.ref) == "shop/deployment/web")
    assert [p.name for p in web.pods] == ["web-5d-a", "web-5d-b", "web-5d-c"]


def test_a_list_is_read_a_page_at_a_time_keeping_only_what_the_rows_use(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = list_workloads("shop")
    monkeypatch.setattr(k8s_workloads, "LIST_PAGE", 3)
    big = dict(PODS[0], status={"phase": "Running", "conditions": [{"x": "y" * 1000}]})
    cluster.lists["/api/v1/namespaces/shop/pods"] = [big, *PODS[1:]]
    cluster.asked.clear()
    assert list_workloads("shop") == whole
    pages = [q for path, q in cluster.asked if path == "/api/v1/namespaces/shop/pods"]
    assert [q.get("continue") for q in pages] == [None, ["3"], ["6"]]   # 8 pods, 3 a page
    assert all(q["limit"] == ["3"] for q in pages)
    slim = k8s_workloads._listed(connect(), "pods", "shop")
    assert len(slim) == len(PODS) and "conditions" not in slim[0]["status"]
    assert slim[0]["metadata"]["labels"] == RECORDED


def test_cluster_lists_every_workload_and_marks_the_node_whose_agent_does_not_answer(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = http_timing(["cluster", "-n", "shop", "--json"])
    out = capsys.readouterr()
    # every recorded window sat throttled throughout: listed, none advised (exit 3), and why
    assert code == 3 and "no workload could be advised" in out.err, out.err
    rows = {r["workload"]: r for r in json.loads(out.out)["workloads"]}
    assert "no unthrottled stretch" in " ".join(rows["shop/deployment/web"]["notes"])
    assert set(rows) == {"shop/deployment/web", "shop/deployment/api", "shop/deployment/cache",
                         "shop/statefulset/db"}
    assert rows["shop/deployment/web"]["pods"] == 2 and rows["shop/statefulset/db"]["pods"] == 2
    cache = rows["shop/deployment/cache"]
    assert cache["pods"] == 0 and "does not answer" in cache["missing"][0]
    assert len([p for p, _ in cluster.asked if p.endswith("/proxy/windows")]) == 4   # a node


def test_advise_passive_k8s_asks_its_workloads_nodes_once_each(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = http_timing(["advise", "--passive", "--p99", "50", "--k8s", "shop/deploy/web"])
    said = capsys.readouterr()
    # the recorded windows sat throttled throughout: no answer (exit 3), and why
    assert code == 3 and "no unthrottled stretch" in said.out + said.err, said
    assert asked(cluster, "windows") == [("agent-node-1", ["shop/web-5d-a"]),
                                         ("agent-node-2", ["shop/web-5d-b"])]


def test_without_a_recorded_pod_nothing_is_asked(tmp_path: Path) -> None:
    (web,) = fold_pods([workload("Deployment", "web")], ["Deployment"],
                       LISTS["/apis/apps/v1/namespaces/shop/replicasets"][:1],
                       [pod("web-5d-c", "web-5d", "node-2", False)])
    assert list(stream_all_windows([web], 60.0, tmp_path, until=100.0)) == [
        (web, ([], ["shop/web-5d-c: not recorded (label it throttle-lab/record=true for the "
                    "node agent)"]))]
    assert k8s_workloads.FETCH_WORKERS >= 1
