"""``cluster`` shows the HPA in the row of a workload that has one: its CPU target and min-max,
and, where the record allows (a window of a minute or more, several recorded pods' used CPU
pooled, a limit and a request), the highest target that keeps the delay goal at the current limit, the same figure
``advise --passive --hpa`` replays (``client.advise.hpa.hpa_answer``); else why not. Against the
fake API server and agent (benchmarks/fake_kube.py)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client.advise.hpa import HpaAsked, hpa_answer
from client.advise.pooled import pooled_load
from client.advise.replay import load_replay
from client.analysis.goal import LatencyGoal
from client.analysis.hpa import rule_of
from client.commands import main as http_timing
from client.render.cluster import HPA_COLUMNS
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
        "shop/web-5d-a": ramp, "shop/api-5d-a": ramp, "shop/api-5d-b": ramp,
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
    # two recorded pods: their used CPU pooled (twice the ramp), not refused
    (tmp_path / "b").mkdir()
    pods = [timeline, ramp_capture(tmp_path / "b", row_ms=ROW_MS)[0]]
    pooled = pooled_load(pods)
    both = hpa_answer(pooled.replayed, LatencyGoal(30.0, None, None),
                      HpaAsked(rule_of(hpa("api", "api", low=2, high=6)), 0.2, 0.1),
                      pooled=pooled)
    assert two["pooled"]["count"] == 2
    assert two["highest_target_pct"] == both.highest is not None
    assert two["says"] == f"{both.highest_says} (2 recorded pods' used CPU pooled)"
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
    assert re.search(r"shop/deployment/api: HPA shop/api: CPU 60 % of the request, 2 to 6 "
                     r"replicas; .*\(2 recorded pods' used CPU pooled\)", text), text
    (tmp_path / "none").mkdir()
    with fake_kube(fake(tmp_path / "none", []), tmp_path / "none") as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        assert http_timing(["cluster", "-n", "shop", "--p99", "30"]) == 0
        plain = capsys.readouterr().out
    header = next(line for line in plain.splitlines() if line.startswith("WORKLOAD"))
    assert "HPA" not in header.split() and "HPA" not in plain



def test_the_csv_has_the_hpa_columns_of_the_tables_cell(
        kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``cluster --csv``: the HPA's name, target, min, max and highest target in columns of
    their own (empty where no HPA scales the workload), the same figures as ``--json``."""
    assert http_timing(["cluster", "-n", "shop", "--p99", "30", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    hpas = {r["workload"]: r["hpa"] for r in said["workloads"] + said["no_quota"]}
    assert http_timing(["cluster", "-n", "shop", "--p99", "30", "--csv"]) == 0
    lines = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    rows = {r["workload"]: r for r in lines}
    assert set(rows) == set(hpas)
    for name, row in rows.items():
        got = [row[c] for c in HPA_COLUMNS]
        want = hpas[name] or {}
        assert got == ["" if want.get(k) is None else str(want[k])
                       for k in HPA_COLUMNS.values()], (name, got, want)
    web_row = rows["shop/deployment/web"]
    assert (web_row["hpa"], web_row["hpa_target_cpu_utilization_pct"], web_row["hpa_min"],
            web_row["hpa_max"]) == ("shop/web", "60", "1", "8")
    assert web_row["hpa_highest_target_pct"].isdigit()
    assert rows["shop/deployment/cache"]["hpa_target_cpu_utilization_pct"] == ""
    assert "scales on Resource memory Utilization" in rows["shop/deployment/cache"]["notes"]
    assert [rows["shop/deployment/worker"][c] for c in HPA_COLUMNS] == [""] * len(HPA_COLUMNS)


def test_advise_hpa_on_a_workload_of_two_recorded_pods_pools_them(
        kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``advise --passive --k8s shop/deployment/api --hpa``: its two recorded pods (the ramp
    each) pooled, answered as the library answers their pooled load, instead of refused."""
    args = ["advise", "--passive", "--k8s", "shop/deployment/api", "--p99", "30", "--hpa"]
    code = http_timing([*args, "--json"])
    out = capsys.readouterr()
    assert code in (0, 3), out.err
    said = json.loads(out.out)
    assert said["pooled"]["count"] == 2 and said["pooled"]["pods"] == ["api-5d-a", "api-5d-b"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pooled = pooled_load([ramp_capture(tmp_path / d, row_ms=ROW_MS)[0] for d in "ab"])
    both = hpa_answer(pooled.replayed, LatencyGoal(30.0, None, None),
                      HpaAsked(rule_of(hpa("api", "api", low=2, high=6)), 0.2, 0.1),
                      pooled=pooled).to_dict()
    assert said["per_minute"] == both["per_minute"]
    assert said["highest_target_pct"] == both["highest_target_pct"]
    assert (said["hpa"]["min"], said["hpa"]["max"]) == (2, 6)
    assert http_timing(args) == code
    text = capsys.readouterr().out
    assert "the load pooled from 2 pods (api-5d-a, api-5d-b)" in text, text


def test_advise_hpa_with_no_recorded_pod_is_one_line_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing to pool: the workload's pods are not recorded."""
    cluster = fake(tmp_path, [hpa("api", "api", low=2, high=6)])
    cluster.lists["/api/v1/namespaces/shop/pods"] = [pod("api-5d-a", "api-5d", "node-1", False),
                                                     pod("api-5d-b", "api-5d", "node-1", False)]
    with fake_kube(cluster, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        code = http_timing(["advise", "--passive", "--k8s", "shop/deployment/api", "--p99",
                            "30", "--hpa"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no pod of shop/deployment/api is recorded" in err, err
