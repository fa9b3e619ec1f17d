"""``http-timing advise`` end to end: real services under real limits, every run kept, every
service stopped by its pid; whichever outcome the machine's load leads to (an answer, none up
to the ceiling, a refusal because the service misses the target even without a limit), it is
one advise documents, and an answer agrees with the runs it recorded and the kernel's counters
in them (tests/advise_support.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from client.data.files import read_run
from tests.advise_support import advice, check_refused
from tests.support import (BIN, gone, http_timing, interrupted_after_rows,
                           require_kernel_quota, usage_error)

PNG = b"\x89PNG\r\n\x1a\n"


def check_runs_kept_and_stopped(cwd: Path, answer: dict[str, Any]) -> None:
    """Every run of the answer is raw data like any other, its service stopped by its pid."""
    for run in answer["runs"]:
        saved = read_run(cwd / "raw-data" / f"{run['name']}.csv")
        assert len(saved.records) == run["requests"]
        assert saved.metadata.service is not None and gone(saved.metadata.service["pid"])
        limit = saved.metadata.limit   # as the service said (/limits)
        assert (limit.cpus if limit else None) == pytest.approx(run["cpus"])


def test_inprocess_advice_finds_a_bracketed_limit_and_measures_the_usage_rules(
        tmp_path: Path) -> None:
    result = http_timing("advise", "--backend", "inprocess", "--p99", "60", "--requests", "30",
                         "--iterations", "3000", "--profile-seconds", "2", "--name", "t",
                         "--json", cwd=tmp_path, timeout=240)
    assert "[1] profile no limit" in result.stderr   # progress went to stderr
    answer = advice(result, tmp_path, "t")   # stdout is the JSON alone, as in pictures/
    if answer is None:
        return      # refused after the profile (checked): the machine missed 60 ms unlimited
    assert answer["target"] == {"p99_ms": 60, "p90_ms": None, "max_throttled": None}
    runs = answer["runs"]
    assert runs[0]["role"] == "profile" and runs[0]["cpus"] is None
    assert runs[1]["role"] == "guess" and runs[1]["cpus"] == answer["model_guess"]["cpus"]
    assert all(r["name"].startswith("t-advise-") for r in runs)
    assert len({r["name"] for r in runs}) == len(runs)
    rec, lower = answer["recommended"], answer["next_lower"]
    if rec is not None:     # else no limit up to the in-process ceiling, 1 CPU, met (exit 3)
        assert 0 < rec["cpus"] <= 1 and rec["period_ms"] == 100 and rec["burst_ms"] == 0
        assert rec["kubernetes_limits_cpu"] == f"{rec['millicores']}m"
        assert rec["docker"] == f"--cpus {rec['cpus']:g}"
        if lower is not None:   # bracketed within 10 %, unless --max-runs ended the search
            assert rec["cpus"] <= lower["cpus"] * 1.1 or "--max-runs" in result.stderr
    assert answer["search"]["ceiling_cpus"] == 1
    # the rules apply to the profile's per-second usage (what they were applied to); a machine
    # too busy for a /metrics scrape within its timeout leaves none, and no rule is run
    per_second = answer["profile"]["usage_cpus_per_second"]
    assert len(answer["usage_based"]) == (2 if per_second else 0), per_second
    for usage in answer["usage_based"]:
        assert usage["met"] in (True, False) and usage["measured"]["cpus"] == usage["cpus"]
        assert any(r["cpus"] == usage["cpus"] for r in runs[1:])   # measured, really
    # shorter periods (no burst in-process), run where the model says they need <= 90 %
    assert isinstance(answer["alternatives"], list) == (rec is not None)
    for alt in answer["alternatives"] or []:
        assert alt["kind"] == "period" and alt["measured"]
        for tried in alt["measured"]:
            assert tried["period_ms"] < 100 and tried["cpus"] <= rec["cpus"] * 0.9
            assert f"-period{tried['period_ms']:g}" in tried["name"]
    check_runs_kept_and_stopped(tmp_path, answer)
    pictures = tmp_path / "pictures"
    assert (pictures / "t-advise.png").read_bytes()[:8] == PNG
    assert json.loads((pictures / "t-advise.json").read_text()) == answer
    assert "| the latency target (advise) |" in (pictures / "t-advise.md").read_text()


def check_profile_is_what_the_service_measured(cwd: Path, answer: dict[str, Any]) -> None:
    """The profile's CPU per request is the one the service measured in the profile run (the
    burn's Server-Timing ``cpu``, the quota charges that and the HTTP around it), its burn a
    calibrated one (/limits)."""
    profile = answer["profile"]
    run = read_run(cwd / "raw-data" / f"{answer['runs'][0]['name']}.csv")
    burns = sorted(r.server_cpu_ns / 1e6 for r in run.records if r.server_cpu_ns)
    assert burns and profile["burn_cpu_ms"] == pytest.approx(burns[len(burns) // 2], rel=0.05)
    assert profile["cpu_ms_per_request"] >= 0.9 * profile["burn_cpu_ms"]
    assert (run.metadata.limits or {})["burn"]["calibrated"] is True   # how exact it is:
    # benchmarks.burn_calibration


def check_judged_by_the_kernels_counters(cwd: Path, answer: dict[str, Any]) -> None:
    """Each run's requests slow without throttling are those of its own file over the target
    in which the service's cgroup counted no throttled period (Server-Timing's
    ``kernel-throttled``), and the rest over it are the ones throttling delayed."""
    target = answer["target"]["p99_ms"]
    for run in answer["runs"][1:]:
        records = [r for r in read_run(cwd / "raw-data" / f"{run['name']}.csv").records if r.ok]
        assert all(r.kernel_nr_throttled is not None for r in records), run["name"]
        over = [r for r in records if r.latency_ms > target]
        assert run["slow_unthrottled"] == sum(r.kernel_nr_throttled == 0 for r in over)
        assert run["throttled_over_target"] == sum((r.kernel_nr_throttled or 0) > 0 for r in over)


def test_kernel_advice_agrees_with_the_runs_it_recorded(tmp_path: Path) -> None:
    """~5 ms requests back to back, p99 <= 30 ms: every service stopped, every run kept; an
    answer agrees with its own runs, judged by the requests the kernel throttled (the
    recommended limit met the target, the next lower limit it tried did not), and says how
    many requests were slow without throttling."""
    require_kernel_quota()
    result = http_timing("advise", "--backend", "kernel", "--p99", "30", "--requests", "100",
                         "--iterations", "5000", "--profile-seconds", "3", "--no-alternatives",
                         "--name", "k", "--json", cwd=tmp_path, timeout=240)
    answer = advice(result, tmp_path, "k")
    run = read_run(tmp_path / "raw-data" / "k-advise-none.csv")   # the profile, kept
    assert run.records and gone(run.metadata.service["pid"])
    if answer is None:
        return      # refused after the profile (checked): the machine missed 30 ms unlimited
    check_profile_is_what_the_service_measured(tmp_path, answer)
    check_runs_kept_and_stopped(tmp_path, answer)
    check_judged_by_the_kernels_counters(tmp_path, answer)
    at = answer["at_recommended"]
    if at is None:
        return      # none met up to the ceiling (exit 3): the largest limit tried missed
    tables = (tmp_path / "pictures" / "k-advise.md").read_text()
    assert (f"Slow without throttling: {at['slow_unthrottled']} of {at['requests']} requests "
            "at the answer") in tables
    assert "| slow without throttling |" in tables


@pytest.mark.parametrize(("args", "message"), [
    (["--p99", "0"], "argument --p99: must be a number > 0 (got 0)"),
    (["--p99", "fast"], "argument --p99: must be a number > 0 (got 'fast')"),
    (["--p99", "30", "--p90", "40"], "--p90 40 ms is above --p99 30 ms"),
    (["--p99", "30", "--max-throttled", "150"], "--max-throttled must be a percentage in"),
    (["--p99", "40000"], "--p99 40000 ms is not below --timeout 30 s"),
    (["--p99", "30", "--rate", "5", "--concurrency", "2"], "cannot be combined"),
    (["--p99", "30", "--name", "a/b"], "plain file name prefix"),
    (["--p99", "30", "--burst-ms", "5"], "--backend inprocess has no burst"),
    ([], "the following arguments are required: --p99"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(["advise", "--backend", "inprocess", *args], tmp_path, monkeypatch,
                       capsys)
    assert message in line
    assert not (tmp_path / "raw-data").exists()   # nothing was started


def test_a_target_below_the_unlimited_p99_is_one_line_after_the_profile(tmp_path: Path) -> None:
    result = http_timing("advise", "--backend", "inprocess", "--p99", "0.2", "--iterations",
                         "3000", "--profile-seconds", "1", "--name", "b", cwd=tmp_path,
                         timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("http-timing: the target p99 <= 0.2 ms is below what the "
                                    "service does without any CPU limit (p99 ")
    check_refused(result, tmp_path, "b")   # one line; the profile kept, nothing else ran
    profile = read_run(tmp_path / "raw-data" / "b-advise-none.csv")
    assert gone(profile.metadata.service["pid"])


def test_ctrl_c_stops_the_service_and_keeps_the_requests(tmp_path: Path) -> None:
    csv_path = tmp_path / "raw-data" / "i-advise-none.csv"
    code, _, err = interrupted_after_rows(
        [str(BIN / "http-timing"), "advise", "--backend", "inprocess", "--p99", "60",
         "--iterations", "1000", "--profile-seconds", "60", "--name", "i"], tmp_path, csv_path, 5)
    assert code == 130, err
    assert "interrupted after 0 run(s)" in err and "Traceback" not in err
    run = read_run(csv_path)
    assert len(run.records) >= 5  # what was on disk when Ctrl-C came, at least
    assert run.metadata.interrupted is True and run.metadata.completed == len(run.records)
    assert gone(run.metadata.service["pid"])
    assert not (tmp_path / "pictures").exists()     # no answer from a profile cut short
