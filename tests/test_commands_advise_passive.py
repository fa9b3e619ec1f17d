"""``http-timing advise --passive``: the answer from a replay of a recorded window, no resize
and no load. A hand-made timeline (``tests/test_commands_import.make_timeline``: 2 s at 0.1
CPU, one 80 ms throttle) for the answer, its JSON and the refusals (one line, exit 2); the
real kernel for ``--cgroup --duration``: it records the group and leaves its quota as it was."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from client.data.files import read_run
from client.data.summary import summarize
from cpuquota.cgroupfs import read_cpu_limit
from tests.support import (exit_code_and_errors, http_timing, require_kernel_quota,
                           service_process)
from tests.test_commands_import import GROUP, make_timeline, vegeta_csv

STARTS_MS = [100, 300, 500, 700, 940, 1200, 1400]


def test_with_requests_the_smallest_limit_whose_replay_meets_the_target(tmp_path: Path) -> None:
    make_timeline(tmp_path)
    vegeta_csv(tmp_path, STARTS_MS)   # 30 ms each, one after another
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv",
                         "--requests-from", "r.csv", "--p99", "50", "--name", "p", "--json",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    at = data["predicted"]["at_recommended"]
    less = data["predicted"]["at_25_percent_less"]
    assert data["recommended"]["cpus"] == at["cpus"] and at["met"] and at["p99_ms"] <= 50
    assert less["cpus"] == pytest.approx(0.75 * at["cpus"], abs=0.001)
    assert data["recommended"]["kubernetes_limits_cpu"].endswith("m")
    assert data["requests"]["count"] == len(STARTS_MS)                    # what it saw
    assert data["window"]["seconds"] == 2.0 and data["window"]["periods"] == 20
    assert data["judged_by"].startswith("the requests' predicted latency")
    # each limit replayed is saved as a predicted run, as live advise saves each run: the
    # one at the answer holds the requests whose p99 the answer says
    runs = {read_run(tmp_path / p).metadata.extra["predicted"]["cpus"]: read_run(tmp_path / p)
            for p in data["runs"]}
    assert set(runs) == {None, *(r["cpus"] for r in data["replays"]), less["cpus"]}
    assert all(p.startswith("raw-data/p-replay-") for p in data["runs"])
    answered = runs[at["cpus"]]
    assert summarize(answered.records).p99_ms == pytest.approx(at["p99_ms"])
    assert answered.metadata.limit is None and answered.timeline is None   # no counter


def test_the_replay_runs_on_the_records_period_unless_told(tmp_path: Path) -> None:
    make_timeline(tmp_path, group={**GROUP, "quota_us": 5000, "period_us": 50000})
    vegeta_csv(tmp_path, STARTS_MS)
    args = ["advise", "--passive", "--timeline", "t.cgroup.csv", "--requests-from", "r.csv",
            "--p99", "50", "--json"]
    said = [json.loads(http_timing(*args, *more, cwd=tmp_path).stdout)
            for more in ([], ["--period-ms", "100"])]
    assert [d["recommended"]["period_ms"] for d in said] == [50, 100]
    fifty, hundred = (d["predicted"]["at_recommended"]["periods"] for d in said)
    assert fifty == pytest.approx(2 * hundred, abs=2)   # twice as many periods ran


def test_without_requests_it_judges_the_added_delay_and_says_so(tmp_path: Path) -> None:
    make_timeline(tmp_path)
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv", "--p99", "50",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "judged by the added delay of a request arriving at a random instant" in result.stdout
    assert "recommended: " in result.stdout and "at 25 % less (" in result.stdout
    assert "requests: none given" in result.stdout


def test_a_target_no_limit_can_meet_gets_no_recommendation_exit_3(tmp_path: Path) -> None:
    make_timeline(tmp_path)
    vegeta_csv(tmp_path, STARTS_MS)   # 30 ms each even without a limit
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv",
                         "--requests-from", "r.csv", "--p99", "20", "--json", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    data = json.loads(result.stdout)
    assert data["recommended"] is None and "even without one" in data["reason"]


@pytest.mark.parametrize("argv, expected", [
    (["--timeline", "short.cgroup.csv"], "too short to say anything"),
    (["--timeline", "nope.cgroup.csv"], "nope.cgroup.csv: no such file"),
    (["--timeline", "t.cgroup.csv", "--requests-from", "nope.csv"], "nope.csv: no such file"),
    ([], "--passive needs one of --timeline FILE"),
    (["--timeline", "t.cgroup.csv", "--cgroup", "/x"], "--passive needs one of"),
    (["--cgroup", "/sys/fs/cgroup/cpu"], "needs --duration S"),
    (["--timeline", "t.cgroup.csv", "--duration", "5"], "--duration goes with --passive"),
    (["--timeline", "t.cgroup.csv", "--url", "http://x/"], "--url: not with --passive"),
    (["--timeline", "t.cgroup.csv", "--max-throttled", "5"], "--max-throttled: not with"),
])
def test_refusals_are_one_line_and_exit_2(argv: list[str], expected: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    header = "t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n"
    (tmp_path / "short.cgroup.csv").write_text(header + "0,0,0,0,0\n500000000,9,5,0,0\n")
    code, err = exit_code_and_errors(["advise", "--passive", "--p99", "50", *argv], tmp_path,
                                     monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "raw-data").exists()   # nothing recorded


@pytest.mark.parametrize("argv, named", [
    (["--timeline", "t.cgroup.csv"], "--timeline"),
    (["--requests-from", "r.csv", "--since", "5m"], "--requests-from, --since"),
    (["--until", "2026-11-28T14:00:00Z"], "--until")])
def test_the_replay_options_go_with_passive(argv: list[str], named: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_code_and_errors(["advise", "--p99", "50", *argv], tmp_path, monkeypatch,
                                     capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{named}: with --passive only (a recorded window)" in err


@pytest.mark.root
def test_passive_on_a_group_records_it_and_leaves_its_quota(tmp_path: Path) -> None:
    require_kernel_quota()
    with service_process(["--cpus", "0.3"]) as (base, _proc):
        group = Path(httpx.get(base + "/limits", timeout=5).json()["cgroup"]["path"])
        version = 1 if (group / "cpu.cfs_quota_us").exists() else 2
        before = read_cpu_limit(group, version)
        result = http_timing("advise", "--passive", "--cgroup", str(group), "--duration", "1.5",
                             "--p99", "50", "--name", "p", "--json", cwd=tmp_path)
        assert read_cpu_limit(group, version) == before   # nothing changed
    assert result.returncode in (0, 3), result.stderr
    data = json.loads(result.stdout)   # what it records is said on stderr
    assert data["passive"] is True and data["window"]["seconds"] >= 1.0
    assert (tmp_path / "raw-data" / "p.cgroup.csv").exists()   # the record is kept
    assert (tmp_path / "raw-data" / "p.json").exists()
