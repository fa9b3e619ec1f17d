"""client.run.process_usage: ``/proc/PID/stat`` parsed, and the figures of a real process whose
threads and children come and go between two readings, against the kernel's own count of it
(no root needed: the group's ``cgroup.procs`` is a plain file naming the real process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client.run.process_usage import ProcessUsage, parse_proc_stat, process_cpu_clock

TICK_S = 1 / os.sysconf("SC_CLK_TCK")

# waits for a line, then burns 4 x 40 ms in threads that end and 2 x 40 ms in children it
# waits for, says "done" and waits for its end
WORKER = """
import os, sys, threading, time
def burn(ms):
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass
sys.stdin.readline()
threads = [threading.Thread(target=burn, args=(40,)) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        burn(40)
        os._exit(0)
    os.waitpid(pid, 0)
print("done", flush=True)
sys.stdin.readline()
"""


def test_parse_proc_stat_reads_after_the_last_parenthesis() -> None:
    line = (b"42 (a (b) c) S 7 42 42 0 -1 4194560 0 0 0 0 11 4 6 1 20 0 3 0 100 0 0\n")
    stat = parse_proc_stat(line)
    assert (stat.state, stat.ppid, stat.own_ticks, stat.children_ticks) == ("S", 7, 15, 7)
    with pytest.raises(ValueError):
        parse_proc_stat(b"not a stat line")


def kernel_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) * TICK_S


def test_threads_and_children_that_ended_between_readings_are_counted(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        (tmp_path / "cgroup.procs").write_text(f"{proc.pid}\n")
        usage = ProcessUsage(tmp_path)
        before, kernel_before = usage.read(), kernel_cpu_s(proc.pid)
        assert usage.clocks and before >= 0
        assert abs(before - time.clock_gettime_ns(process_cpu_clock(proc.pid))) < 50_000_000
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        after, kernel_after = usage.read(), kernel_cpu_s(proc.pid)
        account = usage.account
        usage.close()
        proc.stdin.write("end\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
    used_s, kernel_s = (after - before) / 1e9, kernel_after - kernel_before
    assert kernel_s >= 0.2, kernel_s    # 6 x 40 ms, none of it seen while it ran
    assert abs(used_s - kernel_s) <= 0.1 * kernel_s + 3 * TICK_S, (used_s, kernel_s)
    assert account.children_ns > 0 and account.lost == 0 and not account.blind


def test_a_child_reaped_before_its_first_reading_is_not_lost(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A process-per-request server's child that is listed in ``cgroup.procs`` and reaped before
    it could be read (a busy machine): its CPU is in its parent's ``cutime``, nothing of it is
    lost (seen in CI with a busy loop beside: 1 process counted as lost, the usage unknown)."""
    proc = tmp_path / "proc"
    group = tmp_path / "group"
    for pid in (100, 200):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "status").write_text("SigIgn:\t0000000000000000\n")

    def stat(pid: int, ppid: int, own: int, children: int) -> None:
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(own), "0", str(children), "0"] + ["0"] * 5
        (proc / str(pid) / "stat").write_text(f"{pid} (python3) " + " ".join(fields) + "\n")

    group.mkdir()
    (group / "cgroup.procs").write_text("100\n")
    stat(100, 1, 10, 0)
    usage = ProcessUsage(group, proc)
    assert usage.read() == 10 * usage.tick_ns
    # the child is listed, then reaped before its first reading: its /proc entry is gone
    (group / "cgroup.procs").write_text("100\n200\n")
    stat(200, 100, 3, 0)
    real_pread = os.pread
    child_fds: set[int] = set()
    real_open = os.open

    def opening(path: os.PathLike[str] | str, flags: int, *args: int) -> int:
        fd = real_open(path, flags, *args)
        if str(path).endswith("/200/stat"):
            child_fds.add(fd)
        return fd

    def reading(fd: int, n: int, offset: int) -> bytes:
        if fd in child_fds:
            raise ProcessLookupError(3, "No such process")
        return real_pread(fd, n, offset)

    monkeypatch.setattr("client.run.process_usage.os.open", opening)
    monkeypatch.setattr("client.run.process_usage.os.pread", reading)
    stat(100, 1, 10, 3)   # the parent reaped it: its 3 ticks in the parent's cutime
    assert usage.read() == 13 * usage.tick_ns
    assert child_fds and usage.account.lost == 0
    usage.close()
