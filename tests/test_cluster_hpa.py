"""``cluster`` shows the HPA in the row of a workload that has one: its CPU target and min-max,
and, where the record allows (one recorded pod's window of a minute or more, a limit and a
request), the highest target that keeps the delay goal at the current limit, the same figure
``advise --passive --hpa`` replays (``client.advise.hpa.hpa_answer``); else why not. Against the
fake API server and agent (benchmarks/fake_kube.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client.advise.hpa import HpaAsked, hpa_answer
from client.advise.replay import load_replay
from client.analysis.goal import LatencyGoal
from client.analysis.hpa import rule_of
from client.commands import main as http_timing
from benchmarks.fake_kube import Cluster, fake_kube
from tests.test_advise_hpa import ramp_capture
from tests.test_cluster_agents import WINDOW, pod, workload

DATA = Path(__file__).parent / "data" / "cluster"
ROW_MS = 100   # the ramp's rows: coarser than its own test's, for a quicker replay
HPAS = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers"


def hpa(name: str, target: str, metric: dict[str, Any] | None = None, low: int = 1,
        high: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop"}, "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "minReplicas": low, "maxReplicas": high, "metrics": [metric or {
            "type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 60}}}]}}


def web(name: str) -> dict[str, Any]:
    """A Deployment of limit 0.2 CPU, request 0.1 (the ramp's HPA test's)."""
    found = workload("Deployment", name)
    found["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "200m"}, "requests": {"cpu": "100m"}}
    return found


def ramp_window(tmp_path: Path) -> tuple[str, str]:
    """The ramp (0.2 then 0.5 CPU over 120 s, tests/test_advise_hpa.py) as the agent sends a
    window: its CSV and the agent's metadata."""
    timeline, _ = ramp_capture(tmp_path, row_ms=ROW_MS)
    meta = json.loads((DATA / "shop_web-a.json").read_text())
    meta["cgroup"].update({"cpus": 1.0, "quota_us": 100000})
    return timeline.read_text(), json.dumps(meta)


def fake(tmp_path: Path, hpas: list[dict[str, Any]]) -> Cluster:
    ramp = ramp_window(tmp_path)
    return Cluster({
        "/apis/apps/v1/namespaces/shop/deployments": [web("web"), web("api"), web("cache"),
                                                      web("worker")],
        "/apis/apps/v1/namespaces/shop/statefulsets": [],
        "/apis/apps/v1/namespaces/shop/daemonsets": [],
        "/apis/apps/v1/namespaces/shop/replicasets": [
            {"metadata": {"name": f"{n}-5d", "namespace": "shop",
                          "ownerReferences": [{"kind": "Deployment", "name": n}]}}
            for n in ("web", "api", "cache", "worker")],
        "/api/v1/namespaces/shop/pods": [pod("web-5d-a", "web-5d", "node-1"),
                                         pod("api-5d-a", "api-5d", "node-1"),
                                         pod("api-5d-b", "api-5d", "node-1"),
                                         pod("cache-5d-a", "cache-5d", "node-1"),
                                         pod("worker-5d-a", "worker-5d", "node-1")],
        HPAS: hpas}, {"node-1": "new"}, {
        "shop/web-5d-a": ramp, "shop/api-5d-a": WINDOW, "shop/api-5d-b": WINDOW,
        "shop/cache-5d-a": WINDOW, "shop/worker-5d-a": WINDOW})


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    memory = {"type": "Resource", "resource": {"name": "memory", "target": {
        "type": "Utilization", "averageUtilization": 70}}}
    with fake_kube(fake(tmp_path, [hpa("web", "web"), hpa("api", "api", low=2, high=6),
                                   hpa("cache", "cache", memory)]), tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.chdir(tmp_path)
        yield config


def test_each_workloads_hpa_is_in_its_row_with_the_highest_target_where_the_record_allows(
        kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = http_timing(["cluster", "-n", "shop", "--p99", "30", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    said = json.loads(out.out)
    rows = {r["workload"]: r for r in said["workloads"] + said["no_quota"]}
    one = rows["shop/deployment/web"]["hpa"]
    assert (one["name"], one["target_cpu_utilization_pct"], one["min"], one["max"]) == \
        ("shop/web", 60, 1, 8)
    # the same figure the HPA's replay gives on the same window, rule, limit and request
    (tmp_path / "again").mkdir()
    timeline, _ = ramp_capture(tmp_path / "again", row_ms=ROW_MS)
    replayed = hpa_answer(load_replay(timeline, None, None), LatencyGoal(30.0, None, None),
                          HpaAsked(rule_of(hpa("web", "web")), 0.2, 0.1))
    assert replayed.highest is not None
    assert one["highest_target_pct"] == replayed.highest
    assert one["says"] == replayed.highest_says
    two = rows["shop/deployment/api"]["hpa"]
    assert (two["target_cpu_utilization_pct"], two["min"], two["max"]) == (60, 2, 6)
    assert two["highest_target_pct"] is None
    assert two["says"] == ("highest target not replayed: 2 recorded pods: the HPA's replay "
                           "takes the whole load from one pod's window")
    other = rows["shop/deployment/cache"]["hpa"]
    assert other["target_cpu_utilization_pct"] is None
    assert "scales on Resource memory Utilization" in other["says"]
    assert rows["shop/deployment/worker"]["hpa"] is None


def test_the_table_has_an_hpa_column_only_where_one_scales_a_workload(
        kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert http_timing(["cluster", "-n", "shop", "--p99", "30"]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("WORKLOAD"))
    cells = header.split()
    assert cells[cells.index("MODE") + 1] == "HPA"   # after VPA MODE
    web_line = next(line for line in text.splitlines()
                    if line.startswith("shop/deployment/web "))
    assert re.search(r"  60 % 1-8 \(≤ \d+ %\)  ", web_line), web_line
    assert "shop/deployment/api: HPA shop/api: CPU 60 % of the request, 2 to 6 replicas; " \
        "highest target not replayed: 2 recorded pods" in text
    (tmp_path / "none").mkdir()
    with fake_kube(fake(tmp_path / "none", []), tmp_path / "none") as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        assert http_timing(["cluster", "-n", "shop", "--p99", "30"]) == 0
        plain = capsys.readouterr().out
    header = next(line for line in plain.splitlines() if line.startswith("WORKLOAD"))
    assert "HPA" not in header.split() and "HPA" not in plain

