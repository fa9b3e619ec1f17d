"""End to end: the real ``http-timing`` console script against a real uvicorn server."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import time
from pathlib import Path

import httpx

from tests.support import BIN, free_port, http_timing, interrupted_after_rows, running_service, service_process, stop_by_pid, wait_for_rows

ORIGINAL_LINE = re.compile(r"^(\d+) Status code (\d+) time (\d+)$")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))




def test_run_prints_original_lines_and_saves_raw_data_and_picture(tmp_path: Path) -> None:
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "1000",
                             "--requests", "7", "--name", "r1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    per_request = [ORIGINAL_LINE.match(line) for line in lines[:7]]
    assert all(per_request), lines
    assert [int(m.group(2)) for m in per_request if m] == [200] * 7
    assert re.match(r"^7 requests in \d+ms avg [\d.]+ms$", lines[7])
    assert lines[8].startswith("latency ms: p50 ")
    rows = read_rows(tmp_path / "raw-data" / "r1.csv")
    assert [int(r["seq"]) for r in rows] == list(range(7))
    assert all(int(r["server_cpu_ns"]) > 0 for r in rows)
    # the printed latency is the saved one
    assert [int(m.group(3)) for m in per_request if m] == [int(r["latency_ns"]) for r in rows]
    meta = json.loads((tmp_path / "raw-data" / "r1.json").read_text())
    assert meta["url"].endswith("/cpuBurnFlow?iterations=1000")
    assert meta["requests"] == 7 and meta["completed"] == 7 and meta["limits"]["cpu_count"] >= 1
    assert meta["version"] and meta["host"] and meta["started_at"]
    assert (tmp_path / "pictures" / "r1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_new_connection_and_custom_dirs(tmp_path: Path) -> None:
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "0", "--requests",
                             "3", "--new-connection", "--name", "nc", "--data-dir", "d",
                             "--pictures-dir", "p", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not ORIGINAL_LINE.match(result.stdout.splitlines()[0])  # --quiet
    assert (tmp_path / "d" / "nc.csv").exists() and (tmp_path / "p" / "nc.png").exists()
    assert json.loads((tmp_path / "d" / "nc.json").read_text())["url"].endswith("/cpuBurnFlow")


def test_non_2xx_is_recorded_and_exit_code_is_non_zero(tmp_path: Path) -> None:
    with running_service(max_iterations=10) as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "11",
                             "--requests", "2", "--name", "bad", cwd=tmp_path)
    assert result.returncode == 1
    assert "Status code 422 time" in result.stdout
    rows = read_rows(tmp_path / "raw-data" / "bad.csv")
    assert [r["status"] for r in rows] == ["422", "422"] and rows[0]["error"] == "HTTP 422"


def test_unreachable_service_is_one_clear_line(tmp_path: Path) -> None:
    """Said first, in one line, within seconds, nothing written: and no advice to start
    burn-service for a URL that is not burn-service's default address."""
    port = free_port()
    started = time.monotonic()
    result = http_timing("--url", f"http://127.0.0.1:{port}/cpuBurnFlow", "--requests", "50",
                         cwd=tmp_path)
    assert time.monotonic() - started < 10
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"http-timing: cannot reach http://127.0.0.1:{port}/cpuBurnFlow?iterations=5000: "
        f"connection refused: nothing listens on 127.0.0.1:{port}"]
    assert not (tmp_path / "raw-data").exists() and not (tmp_path / "pictures").exists()


def test_bad_arguments_are_one_line_not_a_traceback(tmp_path: Path) -> None:
    for args in (["--requests", "0"], ["--iterations", "-5"], ["--timeout", "nan"],
                 ["--url", "ftp://x/"], ["--name", "../escape"]):
        result = http_timing(*args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr and result.stderr.strip(), args


def test_plot_and_report_read_the_original_text_capture(tmp_path: Path) -> None:
    capture = tmp_path / "graph-30.txt"
    capture.write_text("26 Status code 200 time 5207306\n31 Status code 200 time 5064695\n"
                       "154 Status code 200 time 69835568\n3 requests in 230ms avg 26ms\n")
    result = http_timing("plot", str(capture), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "pictures" / "graph-30.png").exists()
    report = http_timing("report", str(capture), "--json", cwd=tmp_path)
    data = json.loads(report.stdout)
    assert {"count", "errors", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"} <= set(data)
    assert data["count"] == 3 and data["errors"] == 0
    assert abs(data["p50_ms"] - 5.207306) < 1e-9 and abs(data["max_ms"] - 69.835568) < 1e-9
    text = http_timing("report", str(capture), cwd=tmp_path)
    assert "p50 5.21" in text.stdout


def test_unreadable_inputs_to_plot_and_report(tmp_path: Path) -> None:
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "cols.csv").write_text("seq,foo\n1,2\n")
    for args in (["report", "missing.csv"], ["report", "empty.csv"], ["plot", "cols.csv"],
                 ["plot", "empty.csv", "cols.csv"]):
        result = http_timing(*args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_sigint_mid_run_keeps_every_completed_request(tmp_path: Path) -> None:
    with running_service() as base:
        csv_path = tmp_path / "raw-data" / "int.csv"
        code, out, err = interrupted_after_rows(
            [str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow", "--iterations", "20000",
             "--requests", "100000", "--name", "int"], tmp_path, csv_path, 5)
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    printed = [line for line in out.splitlines() if ORIGINAL_LINE.match(line)]
    rows = read_rows(csv_path)
    assert len(rows) == len(printed) >= 5
    assert all(r["latency_ns"].isdigit() and r["status"] == "200" for r in rows)
    meta = json.loads((tmp_path / "raw-data" / "int.json").read_text())
    assert meta["interrupted"] is True and meta["completed"] == len(rows)
    assert (tmp_path / "pictures" / "int.png").exists()


def test_server_dying_mid_run_is_recorded_and_run_ends(tmp_path: Path) -> None:
    with service_process() as (base, service):
        proc = subprocess.Popen([str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow",
                                 "--iterations", "5000", "--requests", "100000", "--name", "die",
                                 "--timeout", "2", "--quiet"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            csv_path = tmp_path / "raw-data" / "die.csv"
            wait_for_rows(csv_path, 3)  # the client starts slowly on a busy machine
            service.kill()
            service.wait()
            out, err = proc.communicate(timeout=60)
        finally:
            stop_by_pid(proc)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "consecutive connection failures" in err
    rows = read_rows(tmp_path / "raw-data" / "die.csv")
    assert rows[0]["status"] == "200"
    assert [r["status"] for r in rows[-5:]] == ["0"] * 5 and rows[-1]["error"]


def test_output_piped_into_head_is_no_traceback_and_keeps_the_data(tmp_path: Path) -> None:
    with running_service() as base:
        result = subprocess.run(
            f'"{BIN / "http-timing"}" --url {base}/cpuBurnFlow --iterations 100 --requests 40 '
            f'--name piped --no-plot | head -2; echo "rc=${{PIPESTATUS[0]}}"',
            shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True,
            timeout=120)
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    assert len(result.stdout.splitlines()) == 3 and result.stdout.endswith("rc=0\n")
    assert len(read_rows(tmp_path / "raw-data" / "piped.csv")) == 40


def burn_requests_answered(base: str) -> float:
    """The service's own count of /cpuBurnFlow requests (``/metrics``)."""
    text = httpx.get(base + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("throttle_lab_http_requests_total{")
               and 'route="/cpuBurnFlow"' in line)


def test_warmup_requests_reach_the_server_but_are_not_recorded(tmp_path: Path) -> None:
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "100",
                             "--requests", "4", "--warmup", "3", "--name", "w", "--no-plot",
                             cwd=tmp_path)
        answered = burn_requests_answered(base)
    assert result.returncode == 0, result.stderr
    assert answered == 7
    rows = read_rows(tmp_path / "raw-data" / "w.csv")
    assert [r["seq"] for r in rows] == ["0", "1", "2", "3"]
    assert json.loads((tmp_path / "raw-data" / "w.json").read_text())["warmup"] == 3
    assert sum(1 for line in result.stdout.splitlines() if ORIGINAL_LINE.match(line)) == 4
