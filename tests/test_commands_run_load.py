"""``http-timing run`` in the load modes (--concurrency, --rate) against a real server."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from client.commands import main
from client.data.files import read_run
from tests.support import BIN, free_port, http_timing, interrupted_after_rows, running_service, service_process

ORIGINAL_LINE = re.compile(r"^(\d+) Status code (\d+) time (\d+)$")
MS = 1_000_000




def test_run_with_concurrency_keeps_the_original_lines(tmp_path: Path) -> None:
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "1000",
                             "--concurrency", "2", "--requests", "6", "--name", "c2",
                             "--no-plot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(ORIGINAL_LINE.match(line) for line in lines[:6]), lines
    avg = re.match(r"^6 requests in \d+ms avg ([\d.]+)ms$", lines[6])
    mean = re.search(r"  mean ([\d.]+)  ", lines[7])
    assert avg and mean, lines
    # the original's avg is the requests' mean latency, not wall time / requests
    assert abs(float(avg.group(1)) - float(mean.group(1))) <= 0.06   # .1f beside .2f
    assert any(line.startswith("throughput ") and "requests/s" in line for line in lines)
    run = read_run(tmp_path / "raw-data" / "c2.csv")
    assert sorted(r.seq for r in run.records) == list(range(6))
    assert run.metadata.mode == "closed-loop" and run.metadata.concurrency == 2
    assert run.metadata.completed == 6


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
        csv_path = tmp_path / "raw-data" / "int.csv"
        code, out, err = interrupted_after_rows(
            [str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow", "--iterations", "2000",
             "--concurrency", "3", "--requests", "100000", "--name", "int", "--quiet",
             "--no-plot"], tmp_path, csv_path, 10)
    assert code == 130, err
    assert "interrupted after" in err and "Traceback" not in err
    run = read_run(csv_path)  # every row whole
    assert len(run.records) >= 10
    assert run.metadata.interrupted is True and run.metadata.completed == len(run.records)
    assert len({r.seq for r in run.records}) == len(run.records)
