"""The node agent (agent/, Go) against real v1 groups with a kernel quota on this host, with
its static source: its /metrics counters are the groups' own cpu.stat, its per-period wait
histogram counts the throttled periods the kernel counted, promtool accepts the exposition,
a group that goes stops being exported, and a restart resumes the timeline losing no row."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.agent_support import (AGENT_DIR, go_tool, parse_metrics, quota_groups,
                                 running_agent, stop_agent, write_targets)
from tests.support import require

pytestmark = pytest.mark.root

BURN = "sh -c 'while :; do :; done'"


def labels(pod: str) -> str:
    return f'container="",level="group",namespace="",pod="{pod}"'


def wait_for(predicate, timeout: float = 30.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def quiet(group_stat, periods: int = 3, period_s: float = 0.1) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The group's cpu.stat once it has stopped moving (its period timer stops after a period
    without use)."""
    last = group_stat()
    while True:
        time.sleep(periods * period_s)
        now = group_stat()
        if now == last:
            return now
        last = now


def test_metrics_are_the_groups_cpu_stat_and_the_histogram_counts_throttled_periods(
        tmp_path: Path) -> None:
    with quota_groups("metrics", 2) as (busy, idle), \
            running_agent(tmp_path, {"busy": busy.cpu, "idle": idle.cpu}) as agent:
        wait_for(lambda: f'throttle_lab_cpu_cfs_periods_total{{{labels("busy")}}}' in
                 agent.metrics(), what="the group in /metrics")
        burner = subprocess.Popen(busy.join_command(BURN))
        try:
            wait_for(lambda: busy.cpu_stat()["nr_throttled"] >= 8, timeout=60,
                     what="8 throttled periods")
        finally:
            burner.kill()
            burner.wait()
        stat = quiet(busy.cpu_stat)
        time.sleep(0.1)   # a few ticks of the agent after the last change
        text = agent.metrics()
        m = parse_metrics(text)
        b = labels("busy")
        assert m[f"throttle_lab_cpu_cfs_periods_total{{{b}}}"] == stat["nr_periods"]
        assert m[f"throttle_lab_cpu_cfs_throttled_periods_total{{{b}}}"] == stat["nr_throttled"]
        assert m[f"throttle_lab_cpu_cfs_throttled_seconds_total{{{b}}}"] == pytest.approx(
            stat["throttled_time"] / 1e9, abs=1e-9)
        assert m[f"throttle_lab_cpu_usage_seconds_total{{{b}}}"] == pytest.approx(
            busy.usage_ns() / 1e9, abs=1e-9)
        # the group was watched from before its first throttle: one wait per throttled period,
        # and the waits add up to the throttled time
        assert m[f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_count{{{b}}}"] == \
            stat["nr_throttled"]
        assert m[f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_sum{{{b}}}"] == \
            pytest.approx(stat["throttled_time"] / 1e9, rel=1e-9)
        # a single thread throttled at 0.2 CPU waits at most a period each time
        assert m[f'throttle_lab_cpu_cfs_throttled_period_wait_seconds_bucket{{{b},le="0.1"}}'] \
            >= stat["nr_throttled"] - 1
        assert m[f"throttle_lab_cpu_cfs_quota_seconds{{{b}}}"] == 0.02
        i = labels("idle")
        assert m[f"throttle_lab_cpu_cfs_throttled_periods_total{{{i}}}"] == 0
        assert m[f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_count{{{i}}}"] == 0

        # idle groups are not re-read (their cpu.stat cannot move: agent/internal/agent/
        # node.go); once the group runs again, its counters are followed again
        time.sleep(1.0)
        burner = subprocess.Popen(busy.join_command(BURN))
        try:
            wait_for(lambda: busy.cpu_stat()["nr_throttled"] >= stat["nr_throttled"] + 4,
                     timeout=60, what="4 more throttled periods")
        finally:
            burner.kill()
            burner.wait()
        again = quiet(busy.cpu_stat)
        time.sleep(0.1)
        m2 = parse_metrics(agent.metrics())
        assert m2[f"throttle_lab_cpu_cfs_periods_total{{{b}}}"] == again["nr_periods"]
        assert m2[f"throttle_lab_cpu_cfs_throttled_periods_total{{{b}}}"] == \
            again["nr_throttled"]
        assert m2[f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_count{{{b}}}"] == \
            again["nr_throttled"]
        assert m2[f"throttle_lab_cpu_usage_seconds_total{{{b}}}"] == pytest.approx(
            busy.usage_ns() / 1e9, abs=1e-9)

        promtool = shutil.which("promtool")
        require(promtool is not None, "promtool is not installed (Debian prometheus: "
                "scripts/install-system-deps.sh)")
        assert promtool is not None
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr

        # a target that leaves the source stops being exported (bounded label sets)
        write_targets(agent.targets, {"idle": idle.cpu})
        wait_for(lambda: 'pod="busy"' not in agent.metrics(), timeout=15,
                 what="busy to leave /metrics")
        assert f'throttle_lab_cpu_cfs_periods_total{{{i}}}' in agent.metrics()


def test_a_group_with_no_quota_is_said_so_and_makes_no_throttling_claim(tmp_path: Path) -> None:
    """A real v1 group with no quota (cfs_quota_us -1, nor above: exclusive CPUs under the
    static CPU manager look so) burning CPU: /metrics has throttle_lab_cpu_no_quota 1 for it,
    its usage as the kernel counted it, and no series of periods or throttling at all."""
    with quota_groups("noquota", 1, quota_us=-1) as (free,), \
            running_agent(tmp_path, {"free": free.cpu}) as agent:
        f = labels("free")
        wait_for(lambda: f"throttle_lab_cpu_no_quota{{{f}}}" in agent.metrics(),
                 what="the group in /metrics")
        burner = subprocess.Popen(free.join_command(BURN))
        try:
            wait_for(lambda: free.usage_ns() >= 200_000_000, timeout=60, what="0.2 s of CPU")
        finally:
            burner.kill()
            burner.wait()
        used = free.usage_ns()
        time.sleep(0.3)   # a few ticks of the agent after the last change
        text = agent.metrics()
        m = parse_metrics(text)
        assert m[f"throttle_lab_cpu_no_quota{{{f}}}"] == 1
        assert m[f"throttle_lab_cpu_usage_seconds_total{{{f}}}"] == pytest.approx(
            used / 1e9, abs=1e-9)
        assert free.cpu_stat()["nr_periods"] == 0   # the kernel counted no period either
        claims = [line for line in text.splitlines() if 'pod="free"' in line and
                  line.startswith(("throttle_lab_cpu_cfs_", "throttle_lab_cpu_cfs_quota"))]
        assert claims == []
        assert "no CPU quota: throttling cannot happen here" in text   # its HELP


def rows(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_restart_resumes_the_timeline_losing_no_completed_row(tmp_path: Path) -> None:
    timelines = tmp_path / "timelines"
    with quota_groups("restart", 1) as (group,):
        burner = subprocess.Popen(group.join_command(BURN))
        try:
            # in both groups before the agent looks (it reads usage from the cpuacct twin
            # when both hold the same processes: a changed source would start a new file)
            wait_for(lambda: str(burner.pid) in (group.cpuacct / "cgroup.procs").read_text(),
                     what="the burner in its groups")
            with running_agent(tmp_path, {"g": group.cpu}, timelines=timelines) as agent:
                time.sleep(1.5)
            (csv,) = timelines.glob("g_*.cgroup.csv")
            before = rows(csv)
            assert len(before) > 50 and agent.proc.returncode == 0
            # SIGTERM wrote every row; a SIGKILL may cut the last one: both resume the file
            with running_agent(tmp_path, {"g": group.cpu}, timelines=timelines) as agent:
                time.sleep(1.5)
                stop_agent(agent, signal.SIGKILL)
            killed = csv.read_text()
            after_kill = killed[:killed.rfind("\n") + 1].splitlines()
            with running_agent(tmp_path, {"g": group.cpu}, timelines=timelines) as agent:
                time.sleep(1.5)
                served = agent.timeline("g").text.splitlines()
        finally:
            burner.kill()
            burner.wait()
        assert [p.name for p in timelines.glob("*.cgroup.csv")] == [csv.name]
        final = rows(csv)
        assert final[:len(before)] == before, "rows written before the restart were lost"
        assert final[:len(after_kill)] == after_kill, "whole rows before the SIGKILL were lost"
        assert len(final) > len(after_kill) > len(before)
        t = [int(line.split(",")[0]) for line in final[1:]]
        assert t == sorted(t) and len(set(t)) == len(t), "one clock across the restarts"
        throttled = [int(line.split(",")[3]) for line in final[1:]]
        assert throttled == sorted(throttled) and throttled[-1] > 0
        # the served window (all of it) is the file, up to the rows not flushed yet
        assert served[:len(after_kill)] == after_kill


def test_an_idle_group_is_read_at_the_idle_rate_and_at_the_fast_rate_once_it_throttles(
        tmp_path: Path) -> None:
    """Adaptive resolution (agent/internal/agent/adaptive.go): an idle group's rows come every
    --idle-interval; the reading that first shows a throttled period comes within one idle
    interval of it, and from there the rows come every --interval; nothing is lost: the
    histogram's count is nr_throttled and its sum the throttled time, the rows' counters the
    group's cpu.stat, and the rows and periods of each rate are counted."""
    idle_s = 0.5
    with quota_groups("adaptive", 1) as (group,), \
            running_agent(tmp_path, {"g": group.cpu}, "--interval", "10ms",
                          "--idle-interval", "500ms", "--hold", "1s") as agent:
        time.sleep(2.5)   # past the hold of a new group, three idle-rate rows at least
        burner = subprocess.Popen(group.join_command(BURN))
        try:
            wait_for(lambda: group.cpu_stat()["nr_throttled"] >= 10, timeout=60,
                     what="10 throttled periods")
        finally:
            burner.kill()
            burner.wait()
        stat = quiet(group.cpu_stat)
        time.sleep(2.5)   # the hold runs out; an idle-rate row and a flush after it
        m = parse_metrics(agent.metrics())
        csv = agent.timeline("g").text.splitlines()
    g = labels("g")
    assert m[f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_count{{{g}}}"] == \
        stat["nr_throttled"]
    assert m[f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_sum{{{g}}}"] == \
        pytest.approx(stat["throttled_time"] / 1e9, rel=1e-9)
    assert 0 <= m[f"throttle_lab_cpu_cfs_throttled_periods_coarse_total{{{g}}}"] <= \
        stat["nr_throttled"]
    assert m['throttle_lab_agent_rows_total{rate="fast"}'] > 0
    assert m['throttle_lab_agent_rows_total{rate="idle"}'] >= 5
    header = csv[0].split(",")
    rows_ = [dict(zip(header, map(int, line.split(",")))) for line in csv[1:]]
    last = rows_[-1]
    assert (last["nr_periods"], last["nr_throttled"], last["throttled_ns"]) == \
        (stat["nr_periods"], stat["nr_throttled"], stat["throttled_time"])
    gaps = [(b["t_ns"] - a["t_ns"]) / 1e9 for a, b in zip(rows_, rows_[1:])]
    first = next(i for i, r in enumerate(rows_) if r["nr_throttled"] > 0)
    # before the burn (after the new group's hold): idle-rate rows on an idle_s grid (the
    # 10 ms grid, dithered by less than a step). A tick read late makes its gap longer and the
    # next one shorter by as much, so two gaps in a row always span an interval at least
    # (the fast rate's span 20 ms), and one at least is a whole interval
    # (the burn's start: the first row whose usage rose by more than 5 ms; the rows from there
    # to the first throttled period come at the fast rate once the agent sees the usage climb)
    burn = next((i for i, (a, b) in enumerate(zip(rows_, rows_[1:]), 1)
                 if b["usage_ns"] - a["usage_ns"] > 5_000_000), first)
    idle_gaps = [gap for gap, r in zip(gaps[:burn - 1], rows_[1:burn]) if r["t_ns"] / 1e9 > 1.2]
    assert len(idle_gaps) >= 2 and max(idle_gaps) >= idle_s - 0.02, (idle_gaps, gaps)
    assert all(a + b >= idle_s - 0.02 for a, b in zip(idle_gaps, idle_gaps[1:])), idle_gaps
    # the first throttled period is seen at the next idle-rate reading at the latest
    assert gaps[first - 1] <= 2 * idle_s, gaps[first - 1]
    # then the fast rate while it throttles: most gaps one --interval (a busy machine makes
    # some late), none an idle interval
    throttling = gaps[first:first + 20]
    assert len(throttling) == 20 and max(throttling) < idle_s - 0.1, throttling
    assert sorted(throttling)[10] < 0.05, throttling
    # and after the hold, the idle rate again: no gap at the fast rate, and one at least a whole
    # idle interval (a tick read late shortens the gaps after it, as above)
    assert gaps[-1] > idle_s / 2 and max(gaps[-3:]) >= idle_s - 0.02, gaps[-5:]

@pytest.mark.timeout(960)   # a cold Go cache compiles client-go first: minutes beside the suite
def test_the_go_unit_tests_pass() -> None:
    """agent/'s own tests: the pod watch (client-go's fake clientset), the pod lookup for both
    drivers, quota level order, resume, windows, retention, the per-period wait derivation."""
    go = go_tool()
    require(go is not None, "Go is not installed (the node agent is a Go program: agent/)")
    assert go is not None
    result = subprocess.run([go, "test", "./..."], cwd=AGENT_DIR,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "FAIL" not in result.stdout
