"""``http-timing advise --passive --replicas 1,2,3,4``: one row per replica count, the least
total marked once, the picture saved; one replica's answer is plain ``advise --passive``'s;
a workload's recorded pods (fetched windows: ``tests/data/cluster``) split M/N; bad input in
one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.advise.passive import Window
from client.advise.replicas import Spread, replicas_workload
from client.analysis.goal import LatencyGoal
from client.run.k8s_workloads import PodInfo, Workload, WorkloadRef
from tests.support import exit_code_and_errors, http_timing
from tests.test_analysis_spread import busy_capture

DATA = Path(__file__).parent / "data" / "cluster"


def test_one_row_per_count_the_least_marked_and_a_picture(tmp_path: Path) -> None:
    busy_capture(tmp_path)
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv", "--requests-from",
                         "r.csv", "--p99", "15", "--replicas", "4,1,2", "--spread",
                         "round-robin", "--name", "p", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout)
    rows = said["replicas"]
    assert [r["replicas"] for r in rows] == [1, 2, 4]
    assert all(r["met"] and r["p99_ms"] <= 15 for r in rows)
    assert all(r["total_cpus"] == pytest.approx(r["replicas"] * r["cpus"]) for r in rows)
    assert [r["least"] for r in rows].count(True) == 1
    best = next(r for r in rows if r["least"])
    assert best["total_cpus"] == min(r["total_cpus"] for r in rows)
    assert said["least"] == {"replicas": best["replicas"], "cpus": best["cpus"],
                             "total_cpus": best["total_cpus"]}
    assert said["picture"] == "pictures/p-replicas.png"
    assert (tmp_path / said["picture"]).stat().st_size > 10_000
    plain = json.loads(http_timing("advise", "--passive", "--timeline", "t.cgroup.csv",
                                   "--requests-from", "r.csv", "--p99", "15", "--json",
                                   cwd=tmp_path).stdout)
    assert rows[0]["cpus"] == plain["recommended"]["cpus"]
    text = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv", "--requests-from",
                       "r.csv", "--p99", "15", "--replicas", "1,2", "--name", "p",
                       cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "<- least" in text.stdout and "picked at random (seed 1)" in text.stdout


def test_a_goal_no_count_meets_is_exit_3(tmp_path: Path) -> None:
    busy_capture(tmp_path)
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv", "--requests-from",
                         "r.csv", "--p99", "5", "--replicas", "1,2", "--json", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    said = json.loads(result.stdout)
    assert said["least"] is None and not any(r["met"] for r in said["replicas"])
    assert all("even without one" in r["reason"] for r in said["replicas"])


@pytest.mark.parametrize("argv, expected", [
    (["--replicas", "0"], "--replicas: 0 must be >= 1"),
    (["--replicas", "1,x"], "--replicas takes whole numbers >= 1"),
    (["--replicas", "2,2"], "--replicas: 2 is given twice"),
    (["--replicas", "65"], "--replicas: 65 is more than 64 replicas"),
    (["--replicas", "1", "--spread", "round-robin", "--seed", "3"],
     "--seed goes with --spread random"),
    (["--spread", "random"], "--spread goes with --replicas"),
])
def test_bad_replicas_are_one_line_exit_2(argv: list[str], expected: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    busy_capture(tmp_path)
    code, err = exit_code_and_errors(["advise", "--passive", "--timeline", "t.cgroup.csv",
                                      "--p99", "15", *argv], tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_replicas_go_with_passive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_code_and_errors(["advise", "--p99", "15", "--replicas", "1,2"], tmp_path,
                                     monkeypatch, capsys)
    assert code == 2 and ("--replicas without --passive goes with --k8s NS/deployment/NAME"
                          in err), err


def test_a_workloads_pods_are_split_m_over_n(tmp_path: Path) -> None:
    """Two recorded pods (tests/data/cluster: shop's api, 0.5 CPU): at N = 2 each replica
    has its pod's own demand, so the answer is ``cluster``'s per-pod search; one replica has
    both pods' demand and needs more than either."""
    pods = ["shop_api-a", "shop_api-b"]
    workload = Workload(WorkloadRef("shop", "Deployment", "api"), 0.5, 0.25, 2,
                        tuple(PodInfo(p.split("_")[1], "node", True, True) for p in pods))
    fetched = ([DATA / f"{p}.cgroup.csv" for p in pods], [])
    goal = LatencyGoal(10.0, None, None)
    sized = replicas_workload(workload, 600, None, goal, Window(data_dir=tmp_path),
                              Spread((1, 2, 4)), fetched)
    from client.advise.cluster import advise_pods, pod_windows
    own = advise_pods(pod_windows(workload, 600, tmp_path, fetched).windows, 0.5, goal)
    one, two, four = sized.sizings
    assert own.at is not None and two.millicores == own.at.millicores
    assert one.millicores is not None and four.millicores is not None
    assert one.millicores > two.millicores > four.millicores
    said = sized.to_dict()
    assert said["spread"]["how"] == "even" and "2/N" in said["spread"]["says"]
    assert said["workload"]["recorded_pods"] == 2
