"""The CPU of a group's threads, by name: who spent the quota (``client.data.threads``).

A reading lists the processes of the group and its descendants (``cgroup.procs``) and each
one's threads (``/proc/PID/task``), and reads each thread's CPU (``schedstat``'s first field,
ns on a CPU; ``stat``'s ``utime + stime`` in clock ticks where the kernel keeps no schedstat)
and its name (``comm``), from files kept open and re-read with ``os.pread``. What a thread
used since the last reading goes to its folded name (:func:`client.data.threads.fold_name`);
a thread or process that started since then counts whole. Threads that ended between two
readings are not lost: the process's own CPU clock holds them, so what it used beyond its
live threads goes to ``<comm> (ended threads)``. A process that starts and ends between two
readings is not seen here (the group's usage still counts it). Each reading also counts the
live threads that bear their process's own name (``ThreadReading.as_process``): threads
nobody named at the OS level.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from client.data.threads import ENDED, ThreadReading, fold_name
from client.run.process_usage import (RESCAN_EVERY, group_directories, group_members,
                                      parse_proc_stat, process_cpu_clock)

__all__ = ["MAX_THREADS", "ThreadUsage"]

# Threads followed at once (two open files each): a group as big as a whole machine (the root
# group, a node's kubepods) would otherwise take every file descriptor the process may have.
# Past it, a new thread's CPU is counted with its process's ended threads.
MAX_THREADS = 400


@dataclass
class _Thread:
    cpu_fd: int
    comm_fd: int
    ticks: bool          # cpu_fd is ``stat`` (clock ticks), not ``schedstat`` (ns)
    ns: int = 0


@dataclass
class _Process:
    comm: str
    total_ns: int | None = None
    threads: dict[int, _Thread] = field(default_factory=dict)


def _close(thread: _Thread) -> None:
    for fd in (thread.cpu_fd, thread.comm_fd):
        try:
            os.close(fd)
        except OSError:
            pass


class ThreadUsage:
    """The threads of the groups at ``directories`` (and their descendants);
    :meth:`read` gives the CPU per folded name since the first reading. ``problem``: why some
    threads could not be seen (None: all were)."""

    def __init__(self, directories: Sequence[Path], proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self.tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        self.clocks = proc == Path("/proc")   # this machine's processes, not a fixture's
        self.problem: str | None = None
        self._roots = list(directories)
        self._groups: set[Path] = set()
        self._processes: dict[int, _Process] = {}
        self._cpu: dict[str, int] = {}
        self._total = 0
        self._reads = 0
        self._followed = 0   # threads with open files
        self._as_process: dict[str, int] = {}   # this reading's
        self._scan()

    def _scan(self) -> None:
        for root in self._roots:
            self._groups |= group_directories(root)

    def read(self, t_ns: int = 0) -> ThreadReading:
        """The threads now: CPU per folded name since the first reading (cumulative)."""
        first = self._reads == 0
        self._reads += 1
        if self._reads % RESCAN_EVERY == 0:
            self._scan()
        members = group_members(self._groups)
        for pid in self._processes.keys() - members:
            for thread in self._processes.pop(pid).threads.values():
                self._drop(thread)
        self._as_process = {}
        if 0 in members:   # the kernel lists a process of another PID namespace as 0
            self._note("some of the group's processes are in another PID namespace: their "
                       "threads cannot be seen from here")
        for pid in sorted(members - {0}):
            self._read_process(pid, first)
        return ThreadReading(t_ns, self._total, dict(self._cpu), self._as_process)

    def _drop(self, thread: _Thread) -> None:
        _close(thread)
        self._followed -= 1

    def _note(self, problem: str) -> None:
        if self.problem is None:
            self.problem = problem

    def _add(self, name: str, ns: int) -> None:
        if ns:
            self._cpu[name] = self._cpu.get(name, 0) + ns
            self._total += ns

    def _read_process(self, pid: int, first: bool) -> None:
        base = self.proc / str(pid)
        process = self._processes.get(pid)
        new = process is None
        try:
            tids = {int(t) for t in os.listdir(base / "task")}
            if process is None:
                comm = (base / "comm").read_bytes().decode("utf-8", "replace").strip()
                process = self._processes[pid] = _Process(comm)
        except FileNotFoundError:
            return   # ended since it was listed
        except PermissionError:
            self._note(f"no permission to read {base / 'task'} (run as root or as the "
                       "service's user)")
            return
        except (OSError, ValueError):
            return
        gone = process.threads.keys() - tids
        for tid in gone:
            self._drop(process.threads.pop(tid))
        live = 0
        named: dict[int, str] = {}   # tid -> folded name, this reading
        skipped = False   # threads not followed (MAX_THREADS): counted as ended ones are
        for tid in tids:
            thread = process.threads.get(tid)
            born = thread is None
            if thread is None:
                if self._followed >= MAX_THREADS:
                    skipped = True
                    self._note(f"the group has more than {MAX_THREADS} threads: the others' CPU "
                               "is counted by process name")
                    continue
                thread = self._open(base / "task" / str(tid))
                if thread is None:
                    continue
                process.threads[tid] = thread
                self._followed += 1
            try:
                ns = self._cpu_ns(thread)
                name = fold_name(os.pread(thread.comm_fd, 64, 0).decode("utf-8", "replace")
                                 .rstrip("\n"))
            except (OSError, ValueError):   # ended since it was listed: its CPU is the process's
                self._drop(process.threads.pop(tid))
                gone.add(tid)
                continue
            named[tid] = name
            used = ns if born and not first else ns - thread.ns
            thread.ns = ns
            live += max(used, 0)
            if not first:
                self._add(name, max(used, 0))
        own = named.get(pid, fold_name(process.comm))   # the main thread's name is the process's
        if (same := sum(1 for name in named.values() if name == own)):
            self._as_process[own] = self._as_process.get(own, 0) + same
        total = self._process_ns(pid)
        before = 0 if new else process.total_ns
        if total is not None and before is not None and (gone or new or skipped) and not first:
            # what the process used beyond its live threads: threads that ended meanwhile
            self._add(fold_name(process.comm) + ENDED, max(0, total - before - live))
        if total is not None:
            process.total_ns = total

    def _open(self, task: Path) -> _Thread | None:
        """The thread's files opened (None: it ended, or cannot be read: ``problem`` says)."""
        try:
            comm_fd = os.open(task / "comm", os.O_RDONLY)
        except PermissionError:
            self._note(f"no permission to read {task / 'comm'} (run as root or as the "
                       "service's user)")
            return None
        except OSError:
            return None
        for name, ticks in (("schedstat", False), ("stat", True)):
            try:
                return _Thread(os.open(task / name, os.O_RDONLY), comm_fd, ticks)
            except FileNotFoundError:
                if not task.exists():
                    break
            except OSError:
                break
        os.close(comm_fd)
        return None

    def _cpu_ns(self, thread: _Thread) -> int:
        text = os.pread(thread.cpu_fd, 1024, 0)
        if thread.ticks:
            return parse_proc_stat(text).own_ticks * self.tick_ns
        return int(text.split(maxsplit=1)[0])

    def _process_ns(self, pid: int) -> int | None:
        """The process's CPU, its ended threads included (None: it cannot be read now)."""
        if self.clocks:
            try:
                return time.clock_gettime_ns(process_cpu_clock(pid))
            except OSError:
                return None
        try:
            return parse_proc_stat((self.proc / str(pid) / "stat").read_bytes()).own_ticks \
                * self.tick_ns
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        for process in self._processes.values():
            for thread in process.threads.values():
                _close(thread)
        self._processes.clear()
        self._followed = 0
