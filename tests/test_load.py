"""Load modes against a real server: closed loop (--concurrency), open loop (--rate)."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from client.cli import main
from client.load import (LoadPlan, LoadPlanError, intended_send_ns, open_loop_workers,
                         time_closed_loop, time_open_loop, time_plan)
from client.rawdata import RequestRecord, read_run
from client.stats import summarize
from tests.support import BIN, free_port, running_service, service_process, wait_for_rows

ORIGINAL_LINE = re.compile(r"^(\d+) Status code (\d+) time (\d+)$")
MS = 1_000_000


def http_timing(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


class Collector:
    """An on_record that fails the test if it is ever called by two threads at once."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.overlapped = False
        self._busy = threading.Lock()

    def __call__(self, record: RequestRecord) -> None:
        if not self._busy.acquire(blocking=False):
            self.overlapped = True
            return
        try:
            time.sleep(0.001)  # widen the window a concurrent call would hit
            self.records.append(record)
        finally:
            self._busy.release()


# --- the plan: pure -------------------------------------------------------------------------

def test_plan_modes() -> None:
    assert LoadPlan.from_options() == LoadPlan("sequential", 100)
    assert LoadPlan.from_options(requests=7) == LoadPlan("sequential", 7)
    assert LoadPlan.from_options(concurrency=4, requests=20) == LoadPlan("closed-loop", 20, 4)
    assert LoadPlan.from_options(concurrency=4, duration=2.5) == LoadPlan("closed-loop", None, 4,
                                                                         None, 2.5)
    assert LoadPlan.from_options(rate=20, duration=3) == LoadPlan("open-loop", 60, 1, 20.0, 3.0)
    assert LoadPlan.from_options(rate=4, requests=10) == LoadPlan("open-loop", 10, 1, 4.0, 2.5)
    assert LoadPlan.from_options(rate=0.5, duration=4.1).requests == 2
    assert LoadPlan.from_options(rate=20, duration=3).describe() == (
        "open loop: 20 requests/s for 3 s (60 requests)")
    assert LoadPlan.from_options(concurrency=2, duration=1).describe() == (
        "closed loop: 2 at a time, for 1 s")
    meta = LoadPlan.from_options(rate=20, duration=3).to_metadata()
    assert meta == {"mode": "open-loop", "requests": 60, "concurrency": 1, "rate_rps": 20.0,
                    "duration_s": 3.0}


@pytest.mark.parametrize(("options", "message"), [
    ({"rate": 10, "concurrency": 2}, "--rate and --concurrency cannot be combined"),
    ({"duration": 3}, "--duration needs --rate R (open loop) or --concurrency C"),
    ({"rate": 10, "duration": 1, "requests": 5}, "give --requests N or --duration D, not both"),
    ({"rate": 1, "duration": 0.5}, "sends no request"),
    ({"rate": float("inf"), "duration": 1}, "--rate must be a number > 0"),
    ({"concurrency": 0}, "--concurrency must be an integer >= 1"),
])
def test_plan_rejects_what_does_not_make_sense(options: dict[str, float], message: str) -> None:
    with pytest.raises(LoadPlanError, match=re.escape(message)) as info:
        LoadPlan.from_options(**options)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_schedule_and_pool_size() -> None:
    assert [intended_send_ns(i, 20) for i in range(4)] == [0, 50 * MS, 100 * MS, 150 * MS]
    assert intended_send_ns(3, 3) == 1_000_000_000
    assert open_loop_workers(1) == 4
    assert open_loop_workers(100) == 25
    assert open_loop_workers(10_000) == 64


def test_open_loop_total_time_runs_from_the_intended_send() -> None:
    late = RequestRecord(1, start_ns=90 * MS, latency_ns=100 * MS, status=200, scheduled_ns=50 * MS)
    first = RequestRecord(0, start_ns=1 * MS, latency_ns=10 * MS, status=200, scheduled_ns=0)
    assert summarize([first, late]).total_ms == pytest.approx(150.0)  # ends at 50 + 100


# --- closed loop ------------------------------------------------------------------------------

def test_closed_loop_runs_requests_at_the_same_time() -> None:
    collect = Collector()
    with running_service() as base:
        outcome = time_closed_loop(base + "/cpuBurnFlow?iterations=3000", 3, collect,
                                   requests=12)
    assert not collect.overlapped
    assert outcome.records == collect.records and outcome.stop_reason is None
    assert sorted(r.seq for r in collect.records) == list(range(12))
    assert all(r.status == 200 and r.scheduled_ns is None for r in collect.records)
    assert all(r.server_cpu_ns for r in collect.records)
    spans = sorted((r.start_ns, r.start_ns + r.latency_ns) for r in collect.records)
    overlaps = sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)
    assert overlaps >= 1, spans  # three workers: some requests were in flight together


def test_closed_loop_for_a_duration_starts_nothing_after_it() -> None:
    collect = Collector()
    with running_service() as base:
        time_closed_loop(base + "/cpuBurnFlow?iterations=500", 2, collect, requests=None,
                         duration_s=0.4)
    assert collect.records
    assert max(r.start_ns for r in collect.records) < 0.4e9
    assert sorted(r.seq for r in collect.records) == list(range(len(collect.records)))


def test_failures_stop_a_concurrent_run_once() -> None:
    collect = Collector()
    url = f"http://127.0.0.1:{free_port()}/cpuBurnFlow"
    outcome = time_closed_loop(url, 3, collect, requests=1000, max_consecutive_failures=5)
    assert len(collect.records) == 5  # nothing more reaches on_record after the stop
    assert all(r.status == 0 and "Connect" in r.error for r in collect.records)
    assert outcome.stop_reason == "stopped after 5 consecutive connection failures"


# --- open loop ----------------------------------------------------------------------------------

def test_open_loop_sends_each_request_when_it_is_due() -> None:
    collect = Collector()
    with running_service() as base:
        time_open_loop(base + "/cpuBurnFlow?iterations=500", 40, 12, collect)
    records = sorted(collect.records, key=lambda r: r.seq)
    assert [r.seq for r in records] == list(range(12))
    assert [r.scheduled_ns for r in records] == [intended_send_ns(i, 40) for i in range(12)]
    for r in records:
        assert r.scheduled_ns is not None and r.status == 200
        assert r.start_ns >= r.scheduled_ns - MS  # never sent early
        assert r.latency_ns > r.start_ns - r.scheduled_ns  # the wait to be sent is counted
    # a quiet server keeps up: most requests go out near their time (a generous bound: on a
    # busy 2-core machine a thread's wake-up alone can take tens of ms; punctuality is
    # measured in benchmarks/load_modes.py)
    lags = sorted(r.start_ns - r.scheduled_ns for r in records)
    assert lags[len(lags) // 2] < 100 * MS, lags


def test_open_loop_counts_the_time_a_stall_held_requests_back() -> None:
    """No coordinated omission: one connection, requests due faster than it can serve them.
    Each latency runs from the intended send, so the queue behind a slow request shows."""
    collect = Collector()
    with running_service() as base:
        time_open_loop(base + "/cpuBurnFlow?iterations=30000", 200, 20, collect, workers=1)
    records = sorted(collect.records, key=lambda r: r.seq)
    assert len(records) == 20
    last = records[-1]
    assert last.scheduled_ns == intended_send_ns(19, 200)
    held_back = last.start_ns - last.scheduled_ns
    assert held_back > 100 * MS  # 19 requests of >= 20 ms each went first
    for r in records:  # latency = held back + the request's own time (>= the server's part)
        assert r.server_wall_ns is not None
        assert r.latency_ns >= (r.start_ns - r.scheduled_ns) + r.server_wall_ns
    assert last.latency_ns > 5 * last.server_wall_ns  # what a closed loop would not show


def test_time_plan_dispatches_each_mode() -> None:
    with running_service() as base:
        url = base + "/cpuBurnFlow?iterations=100"
        seq = time_plan(url, LoadPlan.from_options(requests=3), lambda r: None)
        closed = time_plan(url, LoadPlan.from_options(concurrency=2, requests=4), lambda r: None)
        opened = time_plan(url, LoadPlan.from_options(rate=50, requests=3), lambda r: None)
    assert [r.seq for r in seq.records] == [0, 1, 2]
    assert len(closed.records) == 4 and all(r.scheduled_ns is None for r in closed.records)
    assert len(opened.records) == 3 and all(r.scheduled_ns is not None for r in opened.records)


# --- the command line -------------------------------------------------------------------------

def test_run_with_concurrency_keeps_the_original_lines(tmp_path: Path) -> None:
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "1000",
                             "--concurrency", "2", "--requests", "6", "--name", "c2",
                             "--no-plot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(ORIGINAL_LINE.match(line) for line in lines[:6]), lines
    assert re.match(r"^6 requests in \d+ms avg [\d.]+ms$", lines[6])
    assert any(line.startswith("throughput ") and "requests/s" in line for line in lines)
    run = read_run(tmp_path / "raw-data" / "c2.csv")
    assert sorted(r.seq for r in run.records) == list(range(6))
    assert run.metadata["mode"] == "closed-loop" and run.metadata["concurrency"] == 2
    assert run.metadata["completed"] == 6


def test_run_with_rate_records_intended_send_times(tmp_path: Path) -> None:
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "500",
                             "--rate", "20", "--duration", "0.5", "--name", "o", "--quiet",
                             "--no-plot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "(intended 20/s)" in result.stdout
    with (tmp_path / "raw-data" / "o.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["scheduled_ns"]) for r in rows) == [i * 50 * MS for i in range(10)]
    meta = json.loads((tmp_path / "raw-data" / "o.json").read_text())
    assert meta["mode"] == "open-loop" and meta["rate_rps"] == 20 and meta["requests"] == 10


@pytest.mark.parametrize(("args", "message"), [
    (["--rate", "10", "--concurrency", "2"], "cannot be combined"),
    (["--duration", "2"], "--duration needs --rate"),
    (["--rate", "10", "--duration", "1", "--requests", "3"], "not both"),
    (["--concurrency", "0"], "--concurrency: must be an integer >= 1"),
    (["--rate", "fast"], "--rate: must be a number > 0"),
])
def test_bad_load_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["--url", f"http://127.0.0.1:{free_port()}/", *args])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("http-timing")
    assert not (tmp_path / "raw-data").exists()


def test_interrupting_a_concurrent_run_keeps_every_completed_request(tmp_path: Path) -> None:
    with service_process() as (base, _):
        proc = subprocess.Popen([str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow",
                                 "--iterations", "2000", "--concurrency", "3", "--requests",
                                 "100000", "--name", "int", "--quiet", "--no-plot"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            csv_path = tmp_path / "raw-data" / "int.csv"
            wait_for_rows(csv_path, 10)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "Traceback" not in err
    run = read_run(csv_path)  # every row whole
    assert len(run.records) >= 10
    assert run.metadata["interrupted"] is True and run.metadata["completed"] == len(run.records)
    assert len({r.seq for r in run.records}) == len(run.records)
