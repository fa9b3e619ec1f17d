"""What holds for every outcome of ``http-timing advise``, busy machine or idle: the exit code
is a documented one; an answer agrees with the runs it recorded (their files, the group's
counters in them); a refusal is one line and nothing ran after the profile. Which outcome a
run reaches moves with the machine's load; how fast the answer is, is benchmarks/advise.py's."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from client.analysis.advise import MAIN_ROLES
from client.analysis.goal import LatencyGoal, judge_requests
from client.commands.advise import EXIT_NOT_MET, LESS
from client.commands.common import EXIT_OK
from client.data.files import read_run

__all__ = ["EXIT_REFUSED", "REFUSED", "advice", "check_agrees_with_its_runs",
           "check_counted_by_the_group", "check_refused"]

EXIT_REFUSED = 2    # a target the service misses without any limit: bad input
REFUSED = "is below what the service does without any CPU limit"


def advice(result: subprocess.CompletedProcess[str], cwd: Path, name: str
           ) -> dict[str, Any] | None:
    """The answer of ``advise ... --name NAME`` run in ``cwd``, checked against its own runs
    (exit 0: a limit; 3: none up to the ceiling met), or None when it refused because even
    without a limit the service missed the target on this machine now (exit 2, checked)."""
    assert result.returncode in (EXIT_OK, EXIT_REFUSED, EXIT_NOT_MET), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    if result.returncode == EXIT_REFUSED:
        check_refused(result, cwd, name)
        return None
    answer: dict[str, Any] = json.loads(
        (cwd / "pictures" / f"{name}-advise.json").read_text())
    if result.stdout.startswith("{"):     # --json: stdout is the same answer
        assert json.loads(result.stdout) == answer
    assert (answer["recommended"] is None) == (result.returncode == EXIT_NOT_MET)
    check_agrees_with_its_runs(answer, cwd, result.stdout + result.stderr)
    return answer


def check_refused(result: subprocess.CompletedProcess[str], cwd: Path, name: str) -> None:
    """The refusal is one line (the last of stderr; without ``--json`` the only one) naming
    the profile's file; the profile is kept, no other run was made, no answer written."""
    lines = result.stderr.strip().splitlines()
    assert lines and (len(lines) == 1 or "--json" in result.args), result.stderr[-3000:]
    line = lines[-1]
    assert line.startswith("http-timing: the target p99 <= ") and REFUSED in line, line
    assert f"{name}-advise-none.csv" in line and "no limit can make it faster" in line
    assert [x for x in lines if x.startswith("http-timing:")] == [line]
    profile = read_run(cwd / "raw-data" / f"{name}-advise-none.csv")
    assert profile.records
    # the runs: files beside a run (its group's timeline, its threads) are not runs
    assert sorted(p.name for p in (cwd / "raw-data").glob("*.csv")
                  if not p.name.endswith((".cgroup.csv", ".threads.csv"))) == [
        f"{name}-advise-none.csv"], sorted(p.name for p in (cwd / "raw-data").iterdir())
    assert not list((cwd / "pictures").glob(f"{name}-advise*"))


def _judged(cwd: Path, run: dict[str, Any], target: LatencyGoal) -> None:
    """A run's judged figures are those of its own file: the requests over the target that
    the counters say throttling delayed, and those it did not (counted apart)."""
    records = [r for r in read_run(cwd / "raw-data" / f"{run['name']}.csv").records if r.ok]
    delayed = [r.counters_throttled for r in records]
    assert None not in delayed, run["name"]
    judged = judge_requests([r.latency_ms for r in records], [bool(d) for d in delayed],
                            target)
    assert run["slow_unthrottled"] == judged.slow_unthrottled, run
    assert run["throttled_over_target"] == judged.throttled_over, run
    assert run["judged_p99_ms"] == pytest.approx(judged.p99_ms), run


def _pool(runs: list[dict[str, Any]], cpus: float) -> list[dict[str, Any]]:
    return [r for r in runs if r["role"] in MAIN_ROLES and r["cpus"] == cpus]


def check_agrees_with_its_runs(answer: dict[str, Any], cwd: Path, said: str) -> None:
    """The answer is what its recorded runs say: the recommended limit's runs met the target
    (no request over it delayed by throttling, or the mean of their judged p99 within it),
    the next lower limit tried missed it (else the answer is the smallest limit tried), every
    miss of the search was the quota's (requests over the target it delayed) or failed
    requests; with none met, the largest limit tried missed."""
    p99 = answer["target"]["p99_ms"]
    target = LatencyGoal(p99, answer["target"]["p90_ms"], answer["target"]["max_throttled"])
    runs = answer["runs"]
    assert runs[0]["role"] == "profile" and runs[0]["met"] is None
    for run in runs:
        assert len(read_run(cwd / "raw-data" / f"{run['name']}.csv").records) == run["requests"]
        if run["cpus"] is not None:
            _judged(cwd, run, target)
    main = [r for r in runs if r["role"] in MAIN_ROLES]
    assert main, runs
    for run in main:
        if run["met"] is False and answer["target"]["max_throttled"] is None:
            assert run["throttled_over_target"] > 0 or run["errors"], run
    tried = sorted({r["cpus"] for r in main})
    rec, at, lower = answer["recommended"], answer["at_recommended"], answer["next_lower"]
    if lower is not None:
        pool = _pool(runs, lower["cpus"])
        assert lower["met"] is False and lower["missed"], lower
        assert lower["name"] == " + ".join(r["name"] for r in pool), (lower, pool)
    if rec is None:           # none met: the largest limit tried missed
        assert at is None and answer["reason"], answer
        assert lower is not None and lower["cpus"] == tried[-1], (lower, tried)
        return
    pool = _pool(runs, rec["cpus"])
    assert at["cpus"] == rec["cpus"] and at["met"] is True and not at["missed"], at
    assert at["name"] == " + ".join(r["name"] for r in pool) and at["runs"] == len(pool), at
    # met: throttling pushed no request past the target, or the judged p99 is within it
    # (LatencyGoal.judge); a busy machine may slow every request, throttled or not
    assert at["throttled_over_target"] == 0 or at["judged_p99_ms"] <= p99, at
    assert at["judged_p99_ms"] == pytest.approx(sum(r["judged_p99_ms"] for r in pool)
                                                / len(pool)), (at, pool)
    assert at["runs"] >= 2 or "--max-runs" in said, at   # confirmed, unless runs ran out
    if lower is None:         # the smallest limit tried met
        assert rec["cpus"] == tried[0], (rec, tried)
    else:                     # nothing tried between the two
        assert lower["cpus"] < rec["cpus"], (lower, rec)
        assert not [c for c in tried if lower["cpus"] < c < rec["cpus"]], (lower, rec, tried)
    for cpus in tried:        # above the answer, a limit run once met
        if cpus > rec["cpus"] and len(_pool(runs, cpus)) == 1:
            assert _pool(runs, cpus)[0]["met"] is True, cpus


def check_counted_by_the_group(answer: dict[str, Any], cwd: Path, name: str,
                               quota_scale: int = 1) -> None:
    """On a running service: each run's throttled periods (and periods) in the answer are
    the changes of the group's cpu.stat its own timeline recorded, at the limit the run
    says (``quota_scale`` pods: their quotas summed); 25 % less was run at 0.75 x the answer,
    its figures those of its own files."""
    counted = answer["inplace"]["cgroup"]
    less = answer["inplace"]["less_25"]
    names = {r["name"] for r in answer["runs"]}
    if less is not None:
        names |= set(less["name"].split(" + "))
    assert set(counted) == names, (set(counted), names)
    limits = {r["name"]: r["cpus"] for r in answer["runs"]}
    for run in names:
        timeline = read_run(cwd / "raw-data" / f"{run}.csv").timeline
        report = counted[run]
        assert timeline and report is not None, run
        assert report["nr_throttled"] == timeline[-1].nr_throttled - timeline[0].nr_throttled, \
            (run, report, timeline[0], timeline[-1])
        assert report["nr_periods"] == timeline[-1].nr_periods - timeline[0].nr_periods, \
            (run, report, timeline[0], timeline[-1])
        cpus = limits.get(run, less["cpus"] if less else None)
        if cpus is not None:
            assert report["quota_cpus"] == pytest.approx(quota_scale * cpus), run
    rec = answer["recommended"]
    if rec is None or less is None:
        assert less is None or rec is not None
        return
    assert less["role"] == "less"
    assert less["cpus"] == math.floor(rec["millicores"] * LESS) / 1000, (less, rec)
    files = [read_run(cwd / "raw-data" / f"{run}.csv") for run in less["name"].split(" + ")]
    assert less["requests"] == sum(len(f.records) for f in files), less
    for f in files:
        assert f.metadata.limit is not None
        assert f.metadata.limit.cpus == pytest.approx(quota_scale * less["cpus"]), less
    tail = ("so a tighter limit met it too this time" if less["met"]
            else "so the answer is not loose")
    assert tail in (cwd / "pictures" / f"{name}-advise.md").read_text(), less
