"""``advise --passive --k8s``: a workload whose recorded pods sat throttled in nearly every
period, with no requests that carry their own CPU, gets no answer and the reason in one line
(exit 3, as ``--timeline`` does); the node agent's windows come from a fake source here
(``client.advise.cluster.fetch_windows``, the one seam to the agents)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import client.advise.cluster as cluster
from client.advise.cluster import advise_workload
from client.advise.passive import Window
from client.analysis.goal import LatencyGoal
from client.run.k8s_workloads import PodInfo, Workload, WorkloadRef
from tests.test_passive_range import PERIOD_MS, timeline

WEB = Workload(WorkloadRef("shop", "Deployment", "web"), 0.3, 0.3, 2,
               (PodInfo("web-a", "node-1", True, True), PodInfo("web-b", "node-1", True, True)))


def _pod(tmp_path: Path, pod: str, throttled: bool) -> Path:
    """The node agent's window of ``pod`` at 0.3 CPU: every period throttled (it ran 30 ms,
    then sat), or every other one."""
    folder = tmp_path / pod
    folder.mkdir()

    def period_throttled(p: int) -> bool:
        return throttled or p % 2 == 0

    def used(t: int) -> float:
        period, into = divmod(t, PERIOD_MS)
        done = sum(30 if period_throttled(p) else 10 for p in range(period))
        return done + min(30 if period_throttled(period) else 10, into)

    timeline(folder, 2.0, 0.3, used, period_throttled)
    path = folder / f"shop_{pod}.cgroup.csv"
    (folder / "t.cgroup.csv").rename(path)
    (folder / "t.json").rename(folder / f"shop_{pod}.json")
    return path


def _answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *throttled: bool) -> dict[str, Any]:
    paths = [_pod(tmp_path, f"web-{x}", t) for x, t in zip("ab", throttled)]
    monkeypatch.setattr(cluster, "fetch_windows", lambda *args, **kwargs: (paths, []))
    answer = advise_workload(WEB, 600.0, None, LatencyGoal(60.0),
                             Window(data_dir=tmp_path / "raw"))
    return answer.to_dict() | {"met": answer.met}


def test_pods_throttled_throughout_get_no_answer_and_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = _answer(tmp_path, monkeypatch, True, True)
    assert not said["met"] and said["recommended"] is None
    reason = said["reason"]
    assert "\n" not in reason and reason.startswith(
        "shop/deployment/web: each of its pods was throttled in nearly every period of its "
        "window (web-a: 20 of 20, web-b: 20 of 20 periods)")
    assert "no unthrottled stretch shows the CPU the quota hid" in reason
    assert "record a window with unthrottled stretches" in reason   # what to give
    # what the record shows is kept: the window without a limit and at its own
    assert [r["cpus"] for r in said["replays"]] == [0.3] and said["no_limit"]["cpus"] is None


def test_one_pod_with_unthrottled_stretches_is_enough_to_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = _answer(tmp_path, monkeypatch, True, False)
    assert said["met"] and said["reason"] is None and said["recommended"]["cpus"] > 0
