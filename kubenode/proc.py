"""Processes of the node: started detached with a pid file, found again and stopped by pid.

A pid file holds the pid and the process's start time (field 22 of /proc/PID/stat), so a pid
that the kernel has since given to another process is never signalled.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

__all__ = ["run", "start_time", "alive", "start_daemon", "read_pidfile", "stop_pid",
           "stop_pidfile", "ns_inode", "pids_in_namespace"]


def run(cmd: Sequence[str], *, check: bool = True, timeout: float = 120,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        _reap(pid)
        return None
    return int(fields[19])


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def alive(pid: int, started: int | None = None) -> bool:
    now = start_time(pid)
    return now is not None and (started is None or now == started)


# Started by a short-lived helper (a new session, then Popen, print the pid, exit): the daemon
# is nobody's child here, so no Popen object outlives it and nothing is left to reap.
_SPAWN = """
import os, subprocess, sys
log = open(sys.argv[1], "ab")
os.setsid()
proc = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
print(proc.pid, flush=True)
os._exit(0)
"""


def start_daemon(cmd: Sequence[str], *, pidfile: Path, logfile: Path,
                 env: dict[str, str] | None = None) -> int:
    """Start ``cmd`` detached in a session of its own, output to ``logfile``; write ``pidfile``
    (pid and start time)."""
    logfile.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", _SPAWN, str(logfile), *cmd], capture_output=True,
                         text=True, timeout=30, env={**os.environ, **(env or {})})
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise RuntimeError(f"could not start {cmd[0]}: {out.stderr.strip()[-400:]}")
    pid = int(out.stdout.strip())
    started = start_time(pid)
    pidfile.write_text(f"{pid} {started}\n")
    return pid


def read_pidfile(pidfile: Path) -> tuple[int, int | None] | None:
    """(pid, start time) of a live process named by ``pidfile``, else None."""
    try:
        parts = pidfile.read_text().split()
        pid, started = int(parts[0]), (int(parts[1]) if len(parts) > 1 and parts[1] != "None"
                                       else None)
    except (OSError, ValueError, IndexError):
        return None
    return (pid, started) if alive(pid, started) else None


def stop_pid(pid: int, started: int | None = None, *, timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; returns once the process is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if not alive(pid, started):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not alive(pid, started):
                return
            time.sleep(0.05)
    if alive(pid, started):
        raise RuntimeError(f"pid {pid} did not end after SIGKILL")


def stop_pidfile(pidfile: Path, *, timeout: float = 20.0) -> None:
    found = read_pidfile(pidfile)
    if found is not None:
        stop_pid(*found, timeout=timeout)
    pidfile.unlink(missing_ok=True)


def ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def pids_in_namespace(kind: str, inode: int) -> list[int]:
    """Every pid whose ``kind`` namespace (``mnt``, ``net``) is ``inode``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and ns_inode(int(entry), kind) == inode:
            out.append(int(entry))
    return out
