"""End to end: ``http-timing report`` (throttling), ``report --predict``, ``predict``,
``compare``, with runs recorded from a real ``burn-service`` (in-process throttle at 30 %,
and unlimited) and the original script's text lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from client.cli import main
from tests.support import BIN, running_service, service_process

REPORT_KEYS = {"count", "errors", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms",
               "throttled_fraction", "stall_ms", "period_ms", "throughput_rps", "limit"}
ORIGINAL_0_3 = ("26 Status code 200 time 5207306\n31 Status code 200 time 5064695\n"
                "36 Status code 200 time 4997000\n41 Status code 200 time 4951787\n"
                "154 Status code 200 time 69835568\n257 Status code 200 time 69930524\n"
                "6 requests in 327ms avg 54ms\n")


def http_timing(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with raw-data/throttled.* (in-process 30 %), raw-data/free.* (no limit)
    and graph-30.txt (the original's lines)."""
    cwd = tmp_path_factory.mktemp("explain")
    with service_process(["--cpu-limit", "30"]) as (base, _):
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "5000",
                             "--requests", "60", "--name", "throttled", "--quiet", "--no-plot",
                             cwd=cwd)
        assert result.returncode == 0, result.stderr
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "2000",
                             "--requests", "30", "--name", "free", "--quiet", "--no-plot",
                             cwd=cwd)
        assert result.returncode == 0, result.stderr
    (cwd / "graph-30.txt").write_text(ORIGINAL_0_3)
    return cwd


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
    assert "in-process 30 %" in str(data["limit"]) and data["limit_cpus"] == 0.3
    assert str(data["throttled_source"]).startswith("server counters")
    # ~5 ms of CPU per request at 30 %: some requests wait for the next 100 ms cycle
    assert 0 < data["throttled_fraction"] < 1  # type: ignore[operator]
    assert 10 < data["stall_ms"] < 200  # type: ignore[operator]
    assert data["throughput_rps"] > 0 and data["period_ms"] > 0  # type: ignore[operator]
    assert data["server_cpu_ms"] > 0  # type: ignore[operator]
    text = http_timing("report", "raw-data/throttled.csv", cwd=runs).stdout.splitlines()
    assert text[0] == f"run: throttled ({Path('raw-data/throttled.csv')})"
    assert text[2].startswith("latency ms: p50 ")
    assert text[3].startswith("throttled: ") and "of 60 requests" in text[3]
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
    assert lines[1] == "limit: 0.3 CPU (30 ms per 100 ms period), from in-process"
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


def test_predict_text_and_json(tmp_path: Path) -> None:
    result = http_timing("predict", "--service-ms", "5", "--cpus", "0.3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "throttled: 16 of 100 requests (16.0 %), stall 70.0 ms typical" in result.stdout
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


def test_compare_prints_the_table_and_saves_picture_and_markdown(runs: Path) -> None:
    result = http_timing("compare", "raw-data/free.csv", "raw-data/throttled.json",
                         "graph-30.txt", "-o", "cmp/all.png", "--title", "three", cwd=runs)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "limit", "requests"]
    assert [line.split()[0] for line in lines[1:4]] == ["free", "throttled", "graph-30"]
    assert lines[1].split()[1] == "none" and "0.3 CPU (in-process)" in lines[2]
    assert lines[3].split()[1] == "unknown" and lines[3].endswith("33 %")
    assert lines[4] == f"picture: {Path('cmp/all.png')}, table: {Path('cmp/all.md')}"
    assert (runs / "cmp" / "all.png").read_bytes()[:4] == b"\x89PNG"
    md = (runs / "cmp" / "all.md").read_text()
    assert "| graph-30 | unknown | 6 |" in md and "| throttled | 0.3 CPU (in-process) | 60 |" in md


@pytest.mark.parametrize("args", [
    ["predict", "--cpus", "0.3"],
    ["predict", "--service-ms", "5", "--cpus", "0"],
    ["predict", "--service-ms", "nan", "--cpus", "1"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--requests", "0"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--concurrency", "two"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--burst-ms", "31"],
    ["predict", "--service-ms", "5", "--cpus", "0.3", "--period-ms", "2000"],
    ["report", "graph-30.txt", "--predict", "--cpus", "0.3", "--burst-ms", "40"],
    ["predict", "--service-ms", "60000", "--cpus", "0.01", "--requests", "100000"],
    ["compare"],
    ["compare", "missing.csv"],
    ["compare", "graph-30.txt", "-o", "table.txt"],
    ["report", "graph-30.txt", "--cpus", "0.3"],
    ["report", "graph-30.txt", "--predict", "--cpus", "-1"],
    ["report", "missing.csv", "--predict"],
    ["report"],
])
def test_bad_input_is_one_line_and_exit_2(runs: Path, args: list[str],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # In-process through the console script's main (a subprocess each would take seconds).
    monkeypatch.chdir(runs)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors, as the console script would exit
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, args
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_bad_input_from_the_console_script(runs: Path) -> None:
    result = http_timing("predict", "--service-ms", "5", "--cpus", "0", cwd=runs)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == ("http-timing predict: argument --cpus: must be a number > 0 "
                                     "(got 0) (see http-timing predict --help)")
