"""The CPU a v1 group's processes used, when the group has no usage counter of its own (a
group made in the ``cpu`` hierarchy only, with no ``cpuacct`` group for the same processes):
from what the kernel keeps per process, so threads and processes that come and go between
two samples are not lost.

For each process of the group and its descendants (``cgroup.procs``, opened anew at every
reading: v1 caches the list per open file):

- its **own** CPU, all its threads, *those that have ended included*: the process CPU clock
  (``clock_gettime`` on ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``: the kernel's
  ``thread_group_sched_runtime``, ns); a zombie's clock cannot be read, its ``/proc/PID/stat``
  ``utime + stime`` can (clock ticks);
- the CPU of its **children it has waited for** (``cutime + cstime`` of ``/proc/PID/stat``,
  clock ticks: the kernel adds a child's whole total, its own waited-for children included,
  when the parent reaps it). This is how a process-per-request server's requests are counted
  when they start and end between two samples.

A process reaped between its listing in ``cgroup.procs`` and its first reading is treated as
one that ended before it was listed (nothing of it was read, so nothing is kept or lost). A
process seen before that has been reaped since: when its parent is one of the group's
processes, still there, and does not ignore ``SIGCHLD``, the parent's ``cutime + cstime`` now
hold its total, so it is dropped from the sum. Otherwise (its parent is outside the group, or
ignores ``SIGCHLD`` so the kernel reaps it and adds it to no one) its last reading stays in
the sum and, unless it was already a zombie (its final figure), it is **lost**: what it used
after that reading cannot be known. A process that leaves the group alive keeps its last
reading in the sum. Processes that start and end between two samples and are reaped by a
parent outside the group (or one that ignores ``SIGCHLD``) leave no trace at all: only a
group counter (``cpuacct``, v2 ``cpu.stat``) knows them; :attr:`ProcessUsage.blind` says when
a process of the group ignores ``SIGCHLD``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RESCAN_EVERY", "ProcessUsage", "ProcStat", "UsageAccount", "group_directories",
           "group_members", "parse_proc_stat", "process_cpu_clock"]

RESCAN_EVERY = 100          # look for new child groups every N readings
SIGCHLD_BIT = 1 << (17 - 1)   # SIGCHLD (17) in /proc/PID/status SigIgn


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` used here (CPU in clock ticks)."""

    state: str
    ppid: int
    own_ticks: int        # utime + stime: the thread group, ended threads included
    children_ticks: int   # cutime + cstime: the children it has waited for


def parse_proc_stat(text: bytes) -> ProcStat:
    """``/proc/PID/stat`` -> :class:`ProcStat` (the command may hold spaces and parentheses:
    the fields after its last ``)`` are read). ``ValueError`` when it is not that file."""
    fields = text.rsplit(b")", 1)[-1].split()
    if len(fields) < 15:
        raise ValueError("not a /proc/PID/stat line")
    return ProcStat(fields[0].decode("ascii"), int(fields[1]), int(fields[11]) + int(fields[12]),
                    int(fields[13]) + int(fields[14]))


def process_cpu_clock(pid: int) -> int:
    """The ``clock_gettime`` clock id of process ``pid``'s CPU time (all its threads, those
    that ended included; ns): ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``."""
    return ((~pid) << 3) | 2


def group_directories(directory: Path) -> set[Path]:
    """The group and its descendants: each directory with a ``cgroup.procs``."""
    return {Path(here) for here, _dirs, files in os.walk(directory) if "cgroup.procs" in files}


def group_members(groups: set[Path]) -> set[int]:
    """The processes of ``groups`` now (``cgroup.procs`` opened anew: v1 caches the list per
    open file); a group removed meanwhile is dropped from ``groups``."""
    pids: set[int] = set()
    for path in list(groups):
        try:
            with open(path / "cgroup.procs", "rb") as listing:
                pids.update(int(p) for p in listing.read().split())
        except (OSError, ValueError):   # the child group was removed
            groups.discard(path)
    return pids


@dataclass
class _Process:
    fd: int
    own_ns: int = 0
    children_ns: int = 0
    ppid: int = 0
    zombie: bool = False
    seen: bool = False

    @property
    def total_ns(self) -> int:
        return self.own_ns + self.children_ns


@dataclass
class UsageAccount:
    """What a reading could not count, for the run's metadata (``cgroup.usage``)."""

    lost: int = 0                  # processes that ended with CPU after their last reading unknown
    children_ns: int = 0           # CPU that came through cutime/cstime (tick resolution)
    blind: set[int] = field(default_factory=set)   # group processes that ignore SIGCHLD


class ProcessUsage:
    """The CPU used by the processes of a v1 group and its descendants (see the module's doc);
    :meth:`read` returns the running total (ns, never down)."""

    def __init__(self, directory: Path, proc: Path = Path("/proc")) -> None:
        self.directory, self.proc = directory, proc
        self.tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        # the CPU clocks are this machine's processes': not for a fixture's proc tree
        self.clocks = proc == Path("/proc")
        self.account = UsageAccount()
        self._groups: set[Path] = set()
        self._processes: dict[int, _Process] = {}
        self._gone_ns = 0
        self._total_ns = 0
        self._reads = 0
        self._scan()

    def _scan(self) -> None:
        self._groups |= group_directories(self.directory)

    def _members(self) -> set[int]:
        return group_members(self._groups)

    def read(self) -> int:
        self._reads += 1
        if self._reads % RESCAN_EVERY == 0:
            self._scan()
        members = self._members()
        for pid in members - self._processes.keys():
            try:
                self._processes[pid] = _Process(os.open(self.proc / str(pid) / "stat",
                                                        os.O_RDONLY))
            except OSError:
                continue   # ended already (its parent's cutime will say, if it waits)
            self._ignores_sigchld(pid)   # its children may end unseen and uncounted
        reaped: list[tuple[int, _Process]] = []
        for pid, process in list(self._processes.items()):
            if not self._update(pid, process):
                reaped.append((pid, process))
            elif pid not in members and not process.zombie:   # moved to another group
                self._forget(pid, lost=False)
        for pid, process in reaped:
            if not process.seen:   # reaped between its listing and its first reading: as one
                self._forget(pid, lost=False, keep=False)   # that ended before its listing
                continue
            parent = self._processes.get(process.ppid)
            counted = (parent is not None and process.ppid in members
                       and not self._ignores_sigchld(process.ppid))
            self._forget(pid, lost=not counted and not process.zombie, keep=not counted)
        total = self._gone_ns + sum(p.total_ns for p in self._processes.values())
        self._total_ns = max(self._total_ns, total)   # a child between its exit and its reaping
        return self._total_ns

    def _update(self, pid: int, process: _Process) -> bool:
        """Read the process's figures now; False when it has been reaped."""
        try:
            stat = parse_proc_stat(os.pread(process.fd, 1024, 0))
        except (OSError, ValueError):
            return False
        process.ppid, process.zombie = stat.ppid, stat.state in ("Z", "X")
        own = stat.own_ticks * self.tick_ns
        if self.clocks and not process.zombie:
            try:
                own = time.clock_gettime_ns(process_cpu_clock(pid))
            except OSError:
                pass
        children = stat.children_ticks * self.tick_ns
        if process.seen and children > process.children_ns:
            self.account.children_ns += children - process.children_ns
        process.own_ns = max(process.own_ns, own)
        process.children_ns = max(process.children_ns, children)
        process.seen = True
        return True

    def _ignores_sigchld(self, pid: int) -> bool:
        try:
            text = (self.proc / str(pid) / "status").read_text(encoding="ascii")
        except OSError:
            return False
        for line in text.splitlines():
            if line.startswith("SigIgn:"):
                if int(line.split()[1], 16) & SIGCHLD_BIT:
                    self.account.blind.add(pid)
                    return True
        return False

    def _forget(self, pid: int, *, lost: bool, keep: bool = True) -> None:
        process = self._processes.pop(pid)
        if keep:
            self._gone_ns += process.total_ns
        if lost:
            self.account.lost += 1
        os.close(process.fd)

    def close(self) -> None:
        for process in self._processes.values():
            try:
                os.close(process.fd)
            except OSError:
                pass
        self._processes.clear()
