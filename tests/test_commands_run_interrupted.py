"""Reliability cases of ``http-timing`` that tests/test_commands_run.py does not cover: SIGTERM
mid-run, a server that accepts connections but never answers (the per-request ``--timeout``),
``--max-failures`` deciding when a dead server ends the run, and the service's concurrency cap
(503 + Retry-After) seen by a concurrent run as answers, not as connection failures."""

from __future__ import annotations

import csv
import json
import re
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

from tests.support import BIN, running_service, service_process, stop_by_pid, wait_for_rows

ORIGINAL_LINE = re.compile(r"^(\d+) Status code (\d+) time (\d+)$")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "http-timing"), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen[str]) -> None:
    stop_by_pid(proc)


def test_sigterm_mid_run_keeps_every_completed_request(tmp_path: Path) -> None:
    with running_service() as base:
        proc = _start(["--url", base + "/cpuBurnFlow", "--iterations", "20000",
                       "--requests", "100000", "--name", "term"], tmp_path)
        try:
            csv_path = tmp_path / "raw-data" / "term.csv"
            wait_for_rows(csv_path, 5)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            _stop(proc)
    assert proc.returncode != 0 and "Traceback" not in err and "interrupted" in err
    printed = [line for line in out.splitlines() if ORIGINAL_LINE.match(line)]
    rows = read_rows(csv_path)
    assert len(rows) == len(printed) >= 5  # no half-written row, none lost
    assert all(r["status"] == "200" and r["latency_ns"].isdigit() for r in rows)
    meta = json.loads((tmp_path / "raw-data" / "term.json").read_text())
    assert meta["interrupted"] is True and meta["completed"] == len(rows)
    assert meta["summary"]["count"] == len(rows)


def test_a_server_that_never_answers_fails_each_request_after_the_timeout(tmp_path: Path) -> None:
    # A listening socket nobody accepts from: connections succeed (the kernel's backlog),
    # requests are sent, and no answer ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [str(BIN / "http-timing"), "--url", f"http://127.0.0.1:{port}/cpuBurnFlow",
             "--requests", "100", "--timeout", "0.3", "--max-failures", "3", "--name", "hang",
             "--no-plot"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - started
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    rows = read_rows(tmp_path / "raw-data" / "hang.csv")
    assert len(rows) == 3  # --max-failures 3 stopped it
    for row in rows:
        assert row["status"] == "0" and "timeout" in row["error"].lower()
        assert 0.25e9 <= int(row["latency_ns"]) < 5e9  # cut by the 0.3 s timeout
    assert elapsed < 60


def _run_until_server_dies(
    tmp_path: Path, name: str, max_failures: str, requests: str = "100000",
) -> tuple[subprocess.Popen[str], list[dict[str, str]]]:
    with service_process() as (base, service):
        proc = _start(["--url", base + "/cpuBurnFlow", "--iterations", "5000", "--requests",
                       requests, "--name", name, "--timeout", "2", "--max-failures", max_failures,
                       "--quiet", "--no-plot"], tmp_path)
        try:
            wait_for_rows(tmp_path / "raw-data" / f"{name}.csv", 5)
            service.kill()
            service.wait()
            proc.communicate(timeout=90)
        finally:
            _stop(proc)
    return proc, read_rows(tmp_path / "raw-data" / f"{name}.csv")


def test_max_failures_sets_how_many_failures_in_a_row_end_the_run(tmp_path: Path) -> None:
    proc, rows = _run_until_server_dies(tmp_path, "two", "2")
    assert proc.returncode == 1
    statuses = [r["status"] for r in rows]
    assert statuses[-2:] == ["0", "0"] and statuses[-3] == "200", statuses[-5:]
    assert all(r["error"] for r in rows[-2:])


def test_max_failures_zero_records_every_failed_request(tmp_path: Path) -> None:
    proc, rows = _run_until_server_dies(tmp_path, "all", "0", requests="60")
    assert proc.returncode == 1
    assert len(rows) == 60  # never stopped early: every request is in the file
    statuses = [r["status"] for r in rows]
    first_failure = statuses.index("0")
    assert set(statuses[:first_failure]) == {"200"} and set(statuses[first_failure:]) == {"0"}


def test_a_concurrent_run_records_the_cap_503s_as_answers(tmp_path: Path) -> None:
    # 1 slot and 2 places in line for 6 clients: the other 3 are turned away at once
    with running_service(max_concurrent=1, max_queued=2) as base:
        result = subprocess.run(
            [str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow", "--iterations", "20000",
             "--concurrency", "6", "--requests", "60", "--name", "capped", "--quiet",
             "--no-plot"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr
    rows = read_rows(tmp_path / "raw-data" / "capped.csv")
    assert len(rows) == 60  # 503s are answers: they never stop the run
    statuses = Counter(r["status"] for r in rows)
    assert set(statuses) <= {"200", "503"} and statuses["200"] > 0 and statuses["503"] > 0
    assert all("503" in r["error"] for r in rows if r["status"] == "503")
    assert result.returncode == 1  # some requests failed, and they are recorded
