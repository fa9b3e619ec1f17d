"""``http-timing record TARGET``: a real group's timeline alone, ended by --duration, SIGTERM,
a real SIGKILL (what was flushed stays), --max-size; bad input in one line. The group is the
stdlib burner's with a 0.1 CPU quota."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from client.data.timeline import read_timeline
from client.data.timeline_meta import read_timeline_metadata
from tests.support import BIN, http_timing, require_kernel_quota, stop_by_pid, usage_error

pytestmark = pytest.mark.root
QUOTA_CPUS = 0.1


def start_record(group: Path, cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "http-timing"), "record", str(group), "--name", "t",
                             *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_rows(path: Path, rows: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") > rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {rows} rows")


def test_duration_writes_the_timeline_and_its_clock(tmp_path: Path) -> None:
    require_kernel_quota()
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(QUOTA_CPUS) as service:
        before = time.time_ns()
        result = http_timing("record", str(service.group), "--duration", "1.5", "--name", "t",
                             cwd=tmp_path)
        after = time.time_ns()
    assert result.returncode == 0, result.stderr
    timeline = read_timeline(tmp_path / "raw-data" / "t.cgroup.csv")
    meta = read_timeline_metadata(tmp_path / "raw-data" / "t.json")
    assert meta is not None and meta.clock is not None and meta.interval_s == 0.01
    assert meta.samples == len(timeline) and meta.stop_reason == "duration"
    times = [s.t_ns for s in timeline]
    assert times == sorted(times) and times[0] >= 0
    assert times[-1] >= 1_500_000_000             # the last sample once the duration is over
    # a sample a tick of its 10 ms grid (each tick within 0.4 of a step of its place), a first
    # one at the start and a last one at the end: never faster than the interval
    assert len(timeline) <= times[-1] / 10_000_000 + 3, (len(timeline), times[-1])
    # the clock's zero and the last sample, on the wall clock, lie within the command's run
    # (+- the zero's own uncertainty, half the gap between the readings it was taken between)
    zero, spread = meta.clock.zero_epoch_ns, meta.clock.zero_uncertainty_ns
    assert spread >= 0 and before <= zero + spread and zero + times[-1] - spread <= after
    assert meta.cgroup is not None and meta.cgroup["quota_us"] == round(QUOTA_CPUS * 100_000)
    assert meta.period_ns == 100_000_000
    # where the usage came from, what could not be counted (nothing here: a plain group)
    usage = meta.cgroup["usage"]
    assert usage["source"] in ("proc", "cpuacct", "cpu.stat") and usage["unknown"] is None
    assert f"{len(timeline)} samples" in result.stdout


def test_sigterm_ends_it_cleanly_and_sigkill_keeps_what_was_flushed(tmp_path: Path) -> None:
    require_kernel_quota()
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(QUOTA_CPUS) as service:
        term_dir, kill_dir = tmp_path / "term", tmp_path / "kill"
        term_dir.mkdir(), kill_dir.mkdir()
        term = start_record(service.group, term_dir)
        kill = start_record(service.group, kill_dir)
        try:
            # 100 rows are ~5 kB, less than the file's buffer: they are on disk because the
            # recorder flushes as it goes
            wait_rows(term_dir / "raw-data" / "t.cgroup.csv", 100)
            wait_rows(kill_dir / "raw-data" / "t.cgroup.csv", 100)
            on_disk = (kill_dir / "raw-data" / "t.cgroup.csv").read_text()
            on_disk = on_disk[:on_disk.rindex("\n") + 1]        # its whole rows
            term.send_signal(signal.SIGTERM)
            kill.send_signal(signal.SIGKILL)
            killed_at = time.time_ns()
            term.communicate(timeout=20)
            kill.communicate(timeout=20)
        finally:
            for proc in (term, kill):
                stop_by_pid(proc)
    assert term.returncode == 0
    meta = read_timeline_metadata(term_dir / "raw-data" / "t.json")
    assert meta is not None and meta.interrupted and meta.ended_at
    assert meta.samples == len(read_timeline(term_dir / "raw-data" / "t.cgroup.csv"))
    assert kill.returncode == -signal.SIGKILL
    killed = read_timeline(kill_dir / "raw-data" / "t.cgroup.csv")   # whole rows only
    # every row flushed before the kill is still there, as it was
    assert (kill_dir / "raw-data" / "t.cgroup.csv").read_text().startswith(on_disk)
    assert len(killed) >= on_disk.count("\n") - 1                    # less the header
    kmeta = read_timeline_metadata(kill_dir / "raw-data" / "t.json")
    assert kmeta is not None and kmeta.clock is not None and kmeta.ended_at is None
    last_epoch = kmeta.clock.zero_epoch_ns + killed[-1].t_ns
    assert last_epoch - kmeta.clock.zero_uncertainty_ns <= killed_at   # nothing after the kill


def test_max_size_bounds_the_file(tmp_path: Path) -> None:
    require_kernel_quota()
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(QUOTA_CPUS) as service:
        result = http_timing("record", str(service.group), "--max-size", "2000",
                             "--duration", "20", "--name", "t", cwd=tmp_path, timeout=60)
    path = tmp_path / "raw-data" / "t.cgroup.csv"
    assert result.returncode == 1 and "2000 bytes" in result.stderr
    assert 1900 < path.stat().st_size <= 2000
    assert len(read_timeline(path)) > 20
    meta = json.loads((tmp_path / "raw-data" / "t.json").read_text())
    assert "2000 bytes" in meta["stop_reason"]


@pytest.mark.parametrize(("argv", "expected"), [
    (["record"], "TARGET"),
    (["record", "/nonexistent/group"], "/nonexistent/group"),
    (["record", "pid:0"], "pid"),
    (["record", "/sys/fs/cgroup", "--duration", "0"], "--duration"),
    (["record", "/sys/fs/cgroup", "--max-size", "10"], "--max-size"),
    (["record", "/sys/fs/cgroup", "--name", "../x"], "name"),
])
def test_bad_input_is_one_line(argv: list[str], expected: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert expected in usage_error(argv, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "raw-data").exists()
