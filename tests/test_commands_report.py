"""End to end: ``http-timing report`` (throttling) and ``report --predict``, with runs recorded
from a real ``burn-service`` (in-process throttle at 5 %, and unlimited) and the original
script's text lines (the ``runs`` fixture, tests/conftest.py); and ``limit_for``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from client.commands.options import CliError
from client.commands.report import build_report_parser, limit_for
from client.data.files import Run, read_run
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from cpuquota.limit import Limit
from tests.support import http_timing, usage_error

MS = 1_000_000

REPORT_KEYS = {"count", "errors", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms",
               "throttled_fraction", "stall_ms", "period_ms", "throughput_rps", "limit"}


def report_json(cwd: Path, *args: str) -> dict[str, object]:
    result = http_timing("report", *args, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_report_of_a_throttled_run_uses_the_server_counters(runs: Path) -> None:
    data = report_json(runs, "raw-data/throttled.csv")
    assert REPORT_KEYS <= set(data)
    assert data["count"] == 60 and data["errors"] == 0
    assert "in-process 5 %" in str(data["limit"]) and data["limit_cpus"] == 0.05
    assert str(data["throttled_source"]).startswith("server counters")
    # ~5 ms of CPU per request at 5 ms per 100 ms cycle: requests wait for the next cycle
    assert 0 < data["throttled_fraction"] <= 1  # type: ignore[operator]
    # the typical extra delay of a throttled request is the pause the service itself counted
    # (Server-Timing ``throttle``), whatever the machine's speed or load made of it
    paused = sorted(r.server_throttle_ns / 1e6 for r in read_run(runs / "raw-data/throttled.csv").records
                    if r.server_throttle_ns)
    assert paused, "the service paused no request"
    typical = paused[len(paused) // 2]
    assert data["stall_ms"] == pytest.approx(typical, rel=0.5, abs=5), paused  # type: ignore[operator]
    assert data["throughput_rps"] > 0 and data["period_ms"] > 0  # type: ignore[operator]
    assert data["server_cpu_ms"] > 0  # type: ignore[operator]
    text = http_timing("report", "raw-data/throttled.csv", cwd=runs).stdout.splitlines()
    assert text[0] == f"run: throttled ({Path('raw-data/throttled.csv')})"
    assert text[2].startswith("latency ms: p50 ")
    assert text[3].startswith("delayed by throttling: ") and "of 60 requests" in text[3]
    assert any(line.startswith("stall: ") for line in text)
    assert any(line.startswith("period: ") and line.endswith("ms (inferred from stalls)")
               or line.startswith("period: 100 ms") for line in text)
    assert any(line.startswith("throughput: ") for line in text)


def test_report_of_an_unlimited_run(runs: Path) -> None:
    data = report_json(runs, "raw-data/free.csv")
    assert data["limit"] == "no CPU limit" and data["limit_cpus"] is None
    assert data["throttled_fraction"] <= 0.1  # type: ignore[operator]  # a noisy machine


def test_report_of_the_original_text_capture(runs: Path) -> None:
    data = report_json(runs, "graph-30.txt")
    assert REPORT_KEYS <= set(data)
    assert data["count"] == 6 and data["throttled_fraction"] == pytest.approx(2 / 6)
    assert data["throttled_source"] == "latency distribution"
    assert data["stall_ms"] == pytest.approx(64.85, abs=0.1)
    assert data["period_ms"] == 100 and data["period_source"] == "default"


def test_report_predict_overlays_measured_and_predicted(runs: Path) -> None:
    result = http_timing("report", "raw-data/throttled.csv", "--predict", cwd=runs)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "limit: 0.05 CPU (5 ms per 100 ms period), from in-process"
    assert lines[2].startswith("model: ") and "server CPU per request" in lines[2]
    # a third column when the run spent all its quota: the model with the quota charged
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["measured",
                                                                              "predicted"])
    columns = len(lines[header].split())
    assert header == (3 if columns == 2 else 4) and columns in (2, 3)
    assert lines[header + 1].split()[:2] == ["p50", "ms"]
    assert len(lines[header + 1].split()) == 2 + columns
    assert any(line.startswith("The run ") for line in lines)
    assert lines[-1] == f"picture: {Path('pictures/throttled-predict.png')}"
    assert (runs / "pictures" / "throttled-predict.png").read_bytes()[:4] == b"\x89PNG"
    data = report_json(runs, "raw-data/throttled.csv", "--predict", "-o", "p/x.png")
    predicted = data["predicted"]
    assert isinstance(predicted, dict) and REPORT_KEYS <= set(predicted)
    assert "charged_ms" in data and "predicted_charged" in data
    assert predicted["count"] == 60 and isinstance(data["explanation"], list)
    assert (runs / "p" / "x.png").exists() and data["picture"] == str(Path("p/x.png"))


def test_report_predict_on_a_text_capture_needs_the_limit(runs: Path) -> None:
    missing = http_timing("report", "graph-30.txt", "--predict", cwd=runs)
    assert missing.returncode == 2 and "give --cpus" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    data = report_json(runs, "graph-30.txt", "--predict", "--cpus", "0.3")
    assert data["model_limit"] == "0.3 CPU (30 ms per 100 ms period)"
    assert data["predicted"]["count"] == 6  # type: ignore[index]
    no_limit = http_timing("report", "raw-data/free.csv", "--predict", cwd=runs)
    assert no_limit.returncode == 2 and "no CPU limit" in no_limit.stderr


@pytest.mark.parametrize("args", [
    ["report", "graph-30.txt", "--predict", "--cpus", "0.3", "--burst-ms", "40"],
    ["report", "graph-30.txt", "--cpus", "0.3"],
    ["report", "graph-30.txt", "--predict", "--cpus", "-1"],
    ["report", "missing.csv", "--predict"],
    ["report"],])
def test_bad_input_is_one_line_and_exit_2(runs: Path, args: list[str],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    usage_error(args, runs, monkeypatch, capsys)


def opts(*argv: str) -> argparse.Namespace:
    return build_report_parser().parse_args(["r.csv", *argv])


def run_with(metadata: dict[str, Any]) -> Run:
    records = [RequestRecord(i, i * 8 * MS, 8 * MS, 200) for i in range(5)]
    return Run(Path("r.csv"), records, RunMetadata.from_dict({"name": "r", **metadata}))


INPROCESS = {"limits": {"workers": 1, "cgroup": None,
                        "inprocess": {"cpu_limit_percent": 30, "cycle_ms": 50, "mode": "cfs"}}}


def test_limit_from_metadata_or_flags() -> None:
    run = run_with(INPROCESS)
    assert limit_for(run, opts()) == Limit(0.3, 50, 0, "in-process")
    assert limit_for(run, opts("--period-ms", "100")) == Limit(0.3, 100, 0, "in-process")
    assert limit_for(run, opts("--cpus", "0.1")) == Limit(0.1, 50, 0, "--cpus")
    with pytest.raises(CliError, match="no limits in its metadata: a text capture"):
        limit_for(run_with({}), opts())
    with pytest.raises(CliError, match="shows no CPU limit"):
        limit_for(run_with({"limits": {"cgroup": None, "inprocess": None}}), opts())
    with pytest.raises(CliError, match=r"--burst-ms must be in \[0, 15\]"):
        limit_for(run, opts("--burst-ms", "16"))


def test_parser_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        opts("--cpus", "zero")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == ("http-timing report: argument --cpus: must be a number > 0 (got 'zero') "
                   "(see http-timing report --help)\n")
