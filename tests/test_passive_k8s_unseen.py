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


def test_cluster_exits_3_when_no_workload_could_be_advised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    import client.advise.cluster_rows as command
    from client.analysis.cluster import NO_WINDOW, WorkloadLimits, none_advised
    from client.commands import main as http_timing
    from client.run.replay_input import read_recording

    (tmp_path / "w").mkdir()
    recording = read_recording(_pod(tmp_path / "w", "web-a", False))
    seen = cluster.row_of(WorkloadLimits("shop/deployment/web", 0.3, 0.3), [cluster.pod_window(
        "web-a", recording.samples, recording.period_ns, recording.limits,
        recording.zero_epoch_ns)], LatencyGoal(10.0, None, None))
    assert seen.recommended_cpus is not None
    # the replay found none, and said why; a workload none of whose pods' windows came
    unmet = dataclasses.replace(seen, recommended_cpus=None, notes=(
        "no recommendation: the target cannot be met by a CPU limit",))
    empty = dataclasses.replace(unmet, workload="shop/deployment/api", notes=(NO_WINDOW,))
    assert none_advised([unmet, empty]) and not none_advised([unmet, seen])
    no_quota = dataclasses.replace(unmet, workload="shop/deployment/x", no_quota="no quota")
    assert none_advised([unmet, no_quota]) and not none_advised([no_quota])
    not_replayed = dataclasses.replace(unmet, notes=())   # Prometheus's long windows
    assert not none_advised([not_replayed]) and not none_advised([])

    # the command: every row says why it has no recommendation, exit 3 (one line why)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(command, "list_workloads", lambda namespace: [WEB])
    monkeypatch.setattr(command, "_vpa_modes", lambda namespace, said: {})
    monkeypatch.setattr(command, "_hpas", lambda namespace, workloads, said: {})
    for rows, code in (([unmet, empty], 3), ([unmet, seen], 0)):
        monkeypatch.setattr(command, "rows_from_agents", lambda *args, rows=rows, **kwargs: (rows, []))
        assert http_timing(["cluster", "-n", "shop"]) == code
        err = capsys.readouterr().err
        assert ("no workload could be advised" in err) == (code == 3), err
