"""``advise --passive --hpa-target``: the HPA's rule run over a recorded ramp (0.2 CPU for a
minute, then 0.5 CPU), the replicas it runs computed by hand, the p99 they give counting the
requests served before a new replica was ready, and the highest target that keeps the goal;
the cluster's HPA read (a CPU utilization target only); bad input in one line, exit 2."""

from __future__ import annotations

import bisect
import json
from dataclasses import replace
from pathlib import Path

import pytest

from client.advise.hpa import HpaAsked, hpa_answer
from client.advise.replay import load_replay
from client.analysis.goal import LatencyGoal
from client.analysis.hpa import Behavior, HpaError, HpaRule, Policy, ScalingRules, rule_of
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from client.run.k8s_hpa import hpa_for
from client.run.k8s_workloads import WorkloadRef
from tests.support import exit_code_and_errors, http_timing
from tests.test_commands_import import GROUP, MS, ZERO, vegeta_csv

RULE = HpaRule(60, 1, 8)   # 60 % of a 0.1 CPU request: 60m a replica


def ramp_capture(tmp_path: Path, seconds: int = 120, row_ms: int = 20) -> tuple[Path, Path]:
    """A timeline at 1 CPU, never throttled, whose CPU is all its requests': each runs 10 ms
    on one CPU (its latency), one every 50 ms for 60 s (0.2 CPU), then one every 20 ms
    (0.5 CPU). The requests' file is vegeta's (an open loop)."""
    starts = list(range(50, 60_000, 50)) + list(range(60_000, seconds * 1000 - 50, 20))
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    for t in range(0, seconds * 1000 + 1, row_ms):
        k = bisect.bisect_right(starts, t)
        done = 10 * k - (10 - (t - starts[k - 1]) if k and t - starts[k - 1] < 10 else 0)
        rows.append(f"{t * MS},{done * MS},{t // 100},0,0")
    timeline = tmp_path / "t.cgroup.csv"
    timeline.write_text("\n".join(rows) + "\n")
    write_timeline_metadata(tmp_path / "t.json", TimelineMetadata(
        "t", TimelineClock(ZERO, 100), cgroup={**GROUP, "quota_us": 100000, "cpus": 1.0},
        host="here"))
    return timeline, vegeta_csv(tmp_path, starts, latency_ms=10)


def test_the_replicas_the_hpa_runs_over_the_ramp(tmp_path: Path) -> None:
    """By hand, at 0.2 CPU each and a 0.1 request: at 0 s one replica reads 200 % (its
    0.2 CPU, at the limit): 3.33 -> 4, new ones ready at 30 s; at 15 and 30 s the three new
    ones are 0 % on a scale-up (not ready, then no metric window): 200 of 400 = 50 % turns
    round, 4 stay; at 45 s four share 0.2 CPU, 50m each: 0.83 x 4 -> 4; at 75 s 0.5 CPU on
    four, 125m each: 2.08 x 4 -> 9, max 8; at 90 s the four new ones are 0 %: 500 of 800 =
    62 %, within the tolerance."""
    timeline, _ = ramp_capture(tmp_path)
    answer = hpa_answer(load_replay(timeline, None, None), LatencyGoal(30.0, None, None),
                        HpaAsked(RULE, 0.2, 0.1, 30.0))
    said = answer.to_dict()
    assert [(s["t_s"], s["replicas"], s["ready"], s["utilization_pct"]) for s in said["syncs"]] \
        == [(0, 4, 1, 200), (15, 4, 1, 200), (30, 4, 4, 200), (45, 4, 4, 50), (60, 4, 4, 50),
            (75, 8, 4, 125), (90, 8, 4, 125), (105, 8, 8, 125)]
    assert [(m["minute"], m["replicas"], m["ready_at_end"]) for m in said["per_minute"]] == \
        [(0, 4, 4), (1, 8, 8)]
    assert said["hpa"]["source"] == "--hpa-target" and said["hpa"]["max"] == 8


def test_the_highest_target_meets_and_one_more_misses(tmp_path: Path) -> None:
    timeline, _ = ramp_capture(tmp_path)
    replayed = load_replay(timeline, None, None)
    goal = LatencyGoal(30.0, None, None)
    answer = hpa_answer(replayed, goal, HpaAsked(RULE, 0.2, 0.1, 30.0))
    highest = answer.highest
    assert highest is not None and 1 <= highest < 221
    at = [hpa_answer(replayed, goal, HpaAsked(replace(RULE, target_pct=pct), 0.2, 0.1, 30.0))
          for pct in (highest, highest + 1)]
    assert at[0].met and not at[1].met
    # a lower target runs at least as many replicas, every minute
    low = hpa_answer(replayed, goal, HpaAsked(replace(RULE, target_pct=20), 0.2, 0.1, 30.0))
    high = at[1]
    assert all(a["replicas"] >= b["replicas"] for a, b in zip(low.run.per_minute(),
                                                             high.run.per_minute()))


def test_requests_served_before_a_new_replica_is_ready_count(tmp_path: Path) -> None:
    """With the requests: the longer a new replica takes to be ready, the longer one replica
    carries the first minute's 0.2 CPU at its 0.2 CPU limit, and the worse the p99."""
    timeline, requests = ramp_capture(tmp_path)
    replayed = load_replay(timeline, requests, None)
    goal = LatencyGoal(30.0, None, None)
    p99 = {}
    for ready_after in (0.0, 45.0):
        answer = hpa_answer(replayed, goal, HpaAsked(RULE, 0.2, 0.1, ready_after), 0, requests)
        said = answer.to_dict()
        assert said["requests"]["count"] == len(replayed.requests or [])
        p99[ready_after] = said["predicted"]["p99_ms"]
    assert p99[0.0] < p99[45.0]
    assert p99[0.0] >= 10.0   # each request's own 10 ms of CPU


def test_the_command_prints_the_minutes_and_exits_by_the_goal(tmp_path: Path) -> None:
    ramp_capture(tmp_path)
    args = ["advise", "--passive", "--timeline", "t.cgroup.csv", "--p99", "30",
            "--hpa-target", "60", "--hpa-request", "0.1", "--hpa-limit", "0.2", "--max", "8"]
    text = http_timing(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "minute  replicas" in text.stdout and "highest target:" in text.stdout
    said = json.loads(http_timing(*args, "--json", cwd=tmp_path).stdout)
    assert [m["replicas"] for m in said["per_minute"]] == [4, 8]
    missed = http_timing(*args[:-4], "--hpa-limit", "0.2", "--max", "1", cwd=tmp_path)
    assert missed.returncode == 3, missed.stderr   # one replica at 0.2 CPU cannot carry 0.5


@pytest.mark.parametrize("argv, expected", [
    (["--hpa-target", "60", "--hpa-limit", "0.2"], "--hpa-request CPUS: the HPA's utilization"),
    (["--hpa-target", "60", "--hpa-request", "0.1", "--min", "3", "--max", "2"],
     "1 <= min <= max"),
    (["--min", "2"], "--min: with --hpa-target PCT, or --hpa"),
    (["--hpa"], "--hpa reads the HPA of a workload: it goes with --k8s"),
    (["--hpa-target", "60", "--replicas", "1,2"], "--replicas and the HPA: one at a time"),
])
def test_bad_hpa_options_are_one_line_exit_2(argv: list[str], expected: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ramp_capture(tmp_path, seconds=70, row_ms=100)
    code, err = exit_code_and_errors(["advise", "--passive", "--timeline", "t.cgroup.csv",
                                      "--p99", "30", *argv], tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_a_window_under_a_minute_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ramp_capture(tmp_path, seconds=30, row_ms=100)
    code, err = exit_code_and_errors(["advise", "--passive", "--timeline", "t.cgroup.csv",
                                      "--p99", "30", "--hpa-target", "60", "--hpa-request",
                                      "0.1"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "the window is 30 s" in err and "at least 60 s" in err, err


def test_hpa_only_with_passive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_code_and_errors(["advise", "--p99", "30", "--hpa-target", "60"], tmp_path,
                                     monkeypatch, capsys)
    assert code == 2 and "--hpa-target: with --passive only" in err, err


# ---- the cluster's HPA (autoscaling/v2) --------------------------------------------------------

def hpa(metrics: list[dict[str, object]] | None, **spec: object) -> dict[str, object]:
    return {"metadata": {"namespace": "shop", "name": "api"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "api"},
                     "minReplicas": 2, "maxReplicas": 6,
                     **({} if metrics is None else {"metrics": metrics}), **spec}}


CPU_70 = {"type": "Resource", "resource": {"name": "cpu", "target": {
    "type": "Utilization", "averageUtilization": 70}}}


def test_the_clusters_hpa_is_read_as_its_rule() -> None:
    assert rule_of(hpa([CPU_70])) == HpaRule(70, 2, 6)
    assert rule_of(hpa(None)).target_pct == 80   # the API's default: CPU at 80 %
    rule = rule_of(hpa([CPU_70], behavior={"scaleDown": {"stabilizationWindowSeconds": 60}}))
    assert rule.behavior == Behavior(Behavior().up, ScalingRules(
        60.0, "Max", (Policy("Percent", 100, 15.0),)))
    found = hpa_for(WorkloadRef("shop", "Deployment", "api"), [hpa([CPU_70])])
    assert found is not None
    assert hpa_for(WorkloadRef("shop", "Deployment", "web"), [hpa([CPU_70])]) is None


@pytest.mark.parametrize("metric, named", [
    ({"type": "Resource", "resource": {"name": "memory", "target": {
        "type": "Utilization", "averageUtilization": 70}}}, "Resource memory Utilization"),
    ({"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "AverageValue", "averageValue": "200m"}}}, "Resource cpu AverageValue"),
    ({"type": "Pods", "pods": {"metric": {"name": "rps"}}}, "scales on Pods"),
])
def test_an_hpa_on_another_metric_is_one_line(metric: dict[str, object], named: str) -> None:
    with pytest.raises(HpaError, match=named) as raised:
        rule_of(hpa([CPU_70, metric]))
    assert "only a CPU utilization target" in str(raised.value)
    assert "\n" not in str(raised.value)
