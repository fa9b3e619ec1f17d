"""The progress bar: live statistics, when it shows, and a real terminal (a pty)."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

from client.render.progress import LiveStats, RunProgress
from client.data.record import RequestRecord
from tests.support import BIN, running_service, stop_by_pid

ORIGINAL_LINE = re.compile(r"^(\d+) Status code (\d+) time (\d+)$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MS = 1_000_000


def record(seq: int, latency_ms: float, status: int = 200,
           throttled: int | None = None) -> RequestRecord:
    return RequestRecord(seq, seq * 10 * MS, round(latency_ms * MS), status,
                         error="" if status == 200 else f"HTTP {status}",
                         kernel_nr_throttled=throttled)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_live_stats_text() -> None:
    stats = LiveStats()
    assert stats.text() == "0 delayed by throttling"
    for i, ms in enumerate([5, 5, 5, 70, 5]):
        stats.add(record(i, ms, throttled=1 if ms > 50 else 0))
    stats.add(record(5, 1, status=500))
    assert stats.count == 6 and stats.errors == 1 and stats.throttled == 1
    assert stats.text() == "p50 5.0  p99 67.4 ms, 1 delayed by throttling, 1 error"


def test_bar_only_after_a_few_seconds_and_only_when_enabled() -> None:
    clock = FakeClock()
    out = io.StringIO()
    with RunProgress(10, "run", file=out, enabled=True, after_s=2.0, clock=clock) as bar:
        bar.advance(record(0, 5))
        clock.now += 1.9
        bar.advance(record(1, 5))
        assert not bar.shown and out.getvalue() == ""
        clock.now += 0.2
        bar.advance(record(2, 5))
        assert bar.shown
        print("0 Status code 200 time 5000000")  # a per-request line while the bar is up
    assert not bar.shown  # removed at the end
    text = ANSI.sub("", out.getvalue())
    assert "0 Status code 200 time 5000000" in text.splitlines()
    assert "3/10" in text and "run" in text

    quiet = io.StringIO()
    with RunProgress(10, file=quiet, enabled=False, after_s=0, clock=clock) as off:
        off.advance(record(0, 5))
        clock.now += 10
        off.advance(record(1, 5))
        assert not off.shown and off.stats.count == 2
    assert quiet.getvalue() == ""


def test_not_a_terminal_means_no_bar() -> None:
    assert RunProgress(5, file=io.StringIO()).enabled is False


def _read_pty(proc: subprocess.Popen[bytes], fd: int, timeout: float) -> str:
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode("utf-8", "replace")


def test_in_a_terminal_the_bar_shows_and_the_lines_stay_the_same(tmp_path: Path) -> None:
    with running_service() as base:
        main_fd, child_fd = pty.openpty()
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"}
        proc = subprocess.Popen([str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow",
                                 "--iterations", "200", "--rate", "5", "--duration", "3.2",
                                 "--name", "tty", "--no-plot"], cwd=tmp_path, stdin=child_fd,
                                stdout=child_fd, stderr=subprocess.PIPE, env=env)
        os.close(child_fd)
        try:
            output = _read_pty(proc, main_fd, timeout=60)
            proc.wait(timeout=30)
        finally:
            stop_by_pid(proc)
            os.close(main_fd)
            assert proc.stderr is not None
            proc.stderr.close()
    assert proc.returncode == 0
    assert "\x1b[" in output  # rich drew (and then removed) the bar
    assert re.search(r"tty\s.*\d+/16", ANSI.sub("", output))
    plain = [ANSI.sub("", line).strip() for line in output.replace("\r", "\n").splitlines()]
    requests = [line for line in plain if ORIGINAL_LINE.match(line)]
    assert len(requests) == 16, plain  # each original line, whole, exactly once


def test_piped_output_has_no_bar(tmp_path: Path) -> None:
    with running_service() as base:
        result = subprocess.run([str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow",
                                 "--iterations", "200", "--rate", "4", "--duration", "2.5",
                                 "--name", "pipe", "--no-plot"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "TERM": "xterm-256color"})
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert sum(1 for line in result.stdout.splitlines() if ORIGINAL_LINE.match(line)) == 10
