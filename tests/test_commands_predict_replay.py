"""``http-timing predict --timeline``: a recorded window replayed at other limits, end to end.
A hand-made timeline for the text, the JSON and the refusals (one line, exit 2); the real
kernel for what it says was recorded (the group's own cpu.stat) and for a real run's plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.data.timeline import read_timeline
from tests.import_support import recorded_service
from tests.support import exit_code_and_errors, http_timing
from tests.test_commands_import import make_timeline, vegeta_csv

STARTS_MS = [100, 300, 500, 700, 940, 1200, 1400]


def test_without_requests_a_row_per_limit_of_periods_throttled_and_added_delay(
        tmp_path: Path) -> None:
    make_timeline(tmp_path)
    result = http_timing("predict", "--timeline", "t.cgroup.csv", "--cpus", "0.1,2",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "a window of 2.00 s (20 periods of 100 ms" in result.stdout
    assert "recorded: limit 0.1 CPU; 1 of 20 periods throttled" in result.stdout
    assert "estimated: 4 % of the window was throttled in the record" in result.stdout
    assert "added delay p50 ms" in result.stdout and "added delay p99 ms" in result.stdout
    data = json.loads(http_timing("predict", "--timeline", "t.cgroup.csv", "--cpus", "0.1,2",
                                  "--json", cwd=tmp_path).stdout)
    tight, loose = data["limits"]
    assert tight["periods_throttled"] > 0 and tight["added_delay_p99_ms"] > 0
    assert loose["periods_throttled"] == 0 and loose["added_delay_p99_ms"] == 0
    assert data["requests"] is None and data["demand"]["exact"] is False


def test_with_requests_each_ones_latency_at_each_limit(tmp_path: Path) -> None:
    make_timeline(tmp_path)
    vegeta_csv(tmp_path, STARTS_MS)   # 30 ms each; the one at 940 ms met the throttle
    result = http_timing("predict", "--timeline", "t.cgroup.csv", "--requests-from", "r.csv",
                         "--cpus", "0.1,2", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["requests"]["count"] == len(STARTS_MS)
    tight, loose = data["limits"]
    assert loose["p99_ms"] <= 30 <= tight["p50_ms"]   # never faster than its unthrottled part
    text = http_timing("predict", "--timeline", "t.cgroup.csv", "--requests-from", "r.csv",
                       "--cpus", "0.1", cwd=tmp_path).stdout
    assert f"requests: {len(STARTS_MS)} from r.csv, placed by their Unix times" in text
    assert "limit    periods throttled  p50 ms  p90 ms  p99 ms" in text


@pytest.mark.parametrize("argv, expected", [
    (["--timeline", "nope.cgroup.csv", "--cpus", "1"], "nope.cgroup.csv: no such file"),
    (["--timeline", "short.cgroup.csv", "--cpus", "1"], "too short to say anything"),
    (["--timeline", "idle.cgroup.csv", "--cpus", "1"], "the group used no CPU in the window"),
    (["--timeline", "t.cgroup.csv", "--cpus", "1,x"], "--cpus: 'x' is not a number of CPUs"),
    (["--timeline", "t.cgroup.csv", "--cpus", "1", "--requests", "5"], "--requests: for the"),
    (["--timeline", "t.cgroup.csv", "--cpus", "1", "--requests-from", "t.json"], "t.json"),
    (["--service-ms", "5", "--cpus", "1", "--requests-from", "r.csv"], "goes with --timeline"),
])
def test_refusals_are_one_line_and_exit_2(argv: list[str], expected: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    header = "t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n"
    (tmp_path / "short.cgroup.csv").write_text(header + "0,0,0,0,0\n500000000,9,5,0,0\n")
    (tmp_path / "idle.cgroup.csv").write_text(header + "0,7,0,0,0\n3000000000,7,0,0,0\n")
    code, err = exit_code_and_errors(["predict", *argv], tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert "Traceback" not in err


@pytest.mark.root
def test_a_real_services_record_replays_with_the_kernels_counts_and_the_runs_plan(
        tmp_path: Path) -> None:
    """What it says was recorded is the group's cpu.stat between the timeline's first and last
    rows; the requests are sent as the run's own plan says (one at a time), whatever the gaps
    a busy client left. How close the replay at the recorded limit comes to the run's own
    latencies is a benchmark (``benchmarks.replay_accuracy``)."""
    with recorded_service(tmp_path) as rec:
        run = http_timing("--url", rec.url, "--requests", "10", "--name", "load",
                          cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    result = http_timing("predict", "--timeline", "raw-data/t.cgroup.csv", "--requests-from",
                         "raw-data/load.csv", "--cpus", "0.1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    samples = read_timeline(tmp_path / "raw-data" / "t.cgroup.csv")
    first, last = samples[0], samples[-1]
    recorded = data["recorded"]
    assert recorded["periods_throttled"] == last.nr_throttled - first.nr_throttled > 0
    assert recorded["periods"] == last.nr_periods - first.nr_periods
    assert recorded["throttled_ms"] == pytest.approx((last.throttled_ns - first.throttled_ns)
                                                     / 1e6)
    requests = data["requests"]
    assert requests["loop"] == ("closed loop of one (one after another): each sent its "
                                "recorded gap after the one before it ended (from the run's "
                                "JSON: the run's plan)")
    assert requests["count"] + requests["outside_window"] + requests["failed"] == 10
    (replayed,) = data["limits"]
    assert 0 < replayed["periods_throttled"] <= replayed["periods"]
    assert replayed["p50_ms"] <= replayed["p90_ms"] <= replayed["p99_ms"]
