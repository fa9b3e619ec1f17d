"""End to end: ``http-timing predict`` (the quota model), text and JSON, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import http_timing, usage_error

REPORT_KEYS = {"count", "errors", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms",
               "throttled_fraction", "stall_ms", "period_ms", "throughput_rps", "limit"}




def test_predict_text_and_json(tmp_path: Path) -> None:
    result = http_timing("predict", "--service-ms", "5", "--cpus", "0.3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "delayed by throttling: 16 of 100 requests (16.0 %), stall 70.0 ms typical" \
        in result.stdout
    assert "latency ms: p50 5.00  p90 75.00" in result.stdout
    data = json.loads(http_timing("predict", "--service-ms", "5", "--cpus", "0.1",
                                  "--requests", "10", "--json", cwd=tmp_path).stdout)
    assert REPORT_KEYS <= set(data)
    assert (data["count"], data["throttled_fraction"], data["stall_ms"]) == (10, 0.4, 90.0)
    burst = json.loads(http_timing("predict", "--service-ms", "5", "--cpus", "0.3",
                                   "--burst-ms", "20", "--period-ms", "100", "--concurrency",
                                   "2", "--cores", "2", "--overhead-ms", "0.5", "--json",
                                   cwd=tmp_path).stdout)
    assert burst["model"]["burst_ms"] == 20 and burst["model"]["concurrency"] == 2


@pytest.mark.parametrize("args", [
    ["predict", "--cpus", "0.3"],
    ["predict", "--service-ms", "5", "--cpus", "0"],
    ["predict", "--service-ms", "nan", "--cpus", "1"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--requests", "0"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--concurrency", "two"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--burst-ms", "31"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--period-ms", "2000"],
    ["predict", "--service-ms", "60000", "--cpus", "0.01", "--requests", "100000"],
])
def test_bad_input_is_one_line_and_exit_2(runs: Path, args: list[str],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    usage_error(args, runs, monkeypatch, capsys)


def test_bad_input_from_the_console_script(runs: Path) -> None:
    result = http_timing("predict", "--service-ms", "5", "--cpus", "0", cwd=runs)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == ("http-timing predict: --cpus 0: a limit must be above 0 CPU; "
                                     "predict models a limit (with --timeline, none in the list "
                                     "is no limit) (see http-timing predict --help)")
