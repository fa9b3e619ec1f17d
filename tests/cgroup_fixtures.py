"""Fixture cgroup trees and proc file systems (tmp dirs), and the real thing: the stdlib
burner service (benchmarks/burner_server.py) in a new cgroup with a real quota
(``burner_in_group``, the benchmarks' own: ``benchmarks.support``).

A fixture tree is what the kernel shows, written as plain files: a hierarchy's groups with
their quota files and ``cpu.stat``, and a fake ``proc`` whose ``self/mountinfo`` mounts those
hierarchies, ``<pid>/cgroup`` names a process's groups and ``<pid>/stat`` its CPU time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.support import BURNER, BurningGroup, burner_in, burner_in_group
from cpuquota.cgroupfs import locate_cpu_controller
from service.cgroup import empty_group, remove_group

__all__ = ["BURNER", "V1_STAT", "V2_STAT", "BurningGroup", "ProcFigures", "burner_in",
           "burner_in_group", "change_in_place", "fake_proc", "mount_line", "nested_groups",
           "v1_group", "v2_group", "write_proc_stat"]

V1_STAT = "nr_periods 31\nnr_throttled 30\nthrottled_time 2071000000\nnr_bursts 0\nburst_time 0\n"
V2_STAT = ("usage_usec 900000\nuser_usec 880000\nsystem_usec 20000\nnr_periods 31\n"
           "nr_throttled 30\nthrottled_usec 2071000\nnr_bursts 0\nburst_usec 0\n")


def v1_group(directory: Path, quota_us: int = 30000, period_us: int = 100000,
             burst_us: int | None = 0, stat: str = V1_STAT, procs: Sequence[int] = (),
             cpuacct_usage: int | None = None) -> Path:
    """A v1 cpu group (``cpuacct_usage``: co-mounted cpuacct's ``cpuacct.usage`` too)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    if burst_us is not None:
        (directory / "cpu.cfs_burst_us").write_text(f"{burst_us}\n")
    (directory / "cpu.stat").write_text(stat)
    (directory / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    (directory / "tasks").write_text("".join(f"{p}\n" for p in procs))
    if cpuacct_usage is not None:
        (directory / "cpuacct.usage").write_text(f"{cpuacct_usage}\n")
    return directory


def v2_group(directory: Path, cpu_max: str | None = "30000 100000", stat: str = V2_STAT,
             burst_us: int = 0) -> Path:
    """A v2 group; ``cpu_max=None``: the cpu controller is not enabled for it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup.controllers").write_text("cpu memory pids\n" if cpu_max else "memory\n")
    if cpu_max is not None:
        (directory / "cpu.max").write_text(cpu_max + "\n")
        (directory / "cpu.max.burst").write_text(f"{burst_us}\n")
        (directory / "cpu.stat").write_text(stat)
    else:
        (directory / "cpu.stat").write_text("usage_usec 5\nuser_usec 4\nsystem_usec 1\n")
    (directory / "cgroup.procs").write_text("")
    return directory


def change_in_place(path: Path, text: str) -> None:
    """Change a fake kernel file as the kernel does, at once and never empty: one write of a
    value as long as the old one, in place (a reader holding the file open, as the sampler
    does, sees the new value; ``write_text`` truncates first, and a read between sees "")."""
    data = text.encode()
    assert len(data) == path.stat().st_size, (path, text)
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, 0) == len(data)
    finally:
        os.close(fd)


def mount_line(number: int, root: str, mount_point: Path, fstype: str, options: str) -> str:
    """One ``/proc/self/mountinfo`` line for a cgroup hierarchy."""
    return (f"{number} 23 0:{number} {root} {mount_point} rw,relatime - {fstype} {fstype} "
            f"{options}")


def fake_proc(proc: Path, mounts: Sequence[str] | None = None,
              cgroups: dict[int, str] | None = None,
              schedstat: dict[int, int] | None = None,
              stats: dict[int, ProcFigures] | None = None) -> Path:
    """``proc/self/mountinfo`` from ``mounts`` lines (None: leave it as it is),
    ``proc/<pid>/cgroup`` from ``cgroups``, ``proc/<tid>/schedstat`` (ns on CPU first),
    ``proc/<pid>/stat`` and ``status`` from ``stats``."""
    (proc / "self").mkdir(parents=True, exist_ok=True)
    if mounts is not None:
        (proc / "self" / "mountinfo").write_text(
            "22 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw\n" + "".join(m + "\n" for m in mounts))
    for pid, text in (cgroups or {}).items():
        (proc / str(pid)).mkdir(exist_ok=True)
        (proc / str(pid) / "cgroup").write_text(text)
    for tid, ns in (schedstat or {}).items():
        (proc / str(tid)).mkdir(exist_ok=True)
        (proc / str(tid) / "schedstat").write_text(f"{ns} 1234 5\n")
    for pid, figures in (stats or {}).items():
        write_proc_stat(proc, pid, figures)
    return proc


@dataclass(frozen=True)
class ProcFigures:
    """What ``proc/<pid>/stat`` and ``status`` say of a fixture process (CPU in ticks)."""

    own_ticks: int
    children_ticks: int = 0
    ppid: int = 1
    state: str = "S"
    ignores_sigchld: bool = False


def write_proc_stat(proc: Path, pid: int, figures: ProcFigures) -> None:
    """``proc/<pid>/stat`` (utime = own, stime 0, cutime = children, cstime 0; a command with
    a space and a parenthesis, as the kernel may show) and ``status``'s ``SigIgn``."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    fields = [figures.state, figures.ppid, pid, pid, 0, -1, 4194560, 0, 0, 0, 0,
              figures.own_ticks, 0, figures.children_ticks, 0, 20, 0, 1, 0, 100]
    (proc / str(pid) / "stat").write_text(f"{pid} (a (b) c) " + " ".join(map(str, fields)) +
                                          "\n")
    (proc / str(pid) / "status").write_text(
        f"Name:\tx\nSigIgn:\t{1 << 16 if figures.ignores_sigchld else 0:016x}\n")


@contextmanager
def nested_groups(path: str, quota_at: str, cpus: float) -> Iterator[tuple[Path, Path]]:
    """Real groups ``path`` (relative to the cpu controller's mount) with a ``cpus`` quota on
    the level ``quota_at`` (a prefix of ``path``) and none below: a pod's quota over its
    container. On cgroup v2 ``+cpu`` is written into the subtree_control of every group above
    ``quota_at`` (so it has ``cpu.max``) and not into its own (so the container below has no
    cpu controller, as on a node). Yields (quota group, leaf group); the groups made here are
    removed by their paths at the end, the deepest first (the caller stops its processes)."""
    controller = locate_cpu_controller()
    top = Path(controller.mount.mount_point)
    made: list[Path] = []
    try:
        here = top
        for part in path.strip("/").split("/"):
            if controller.version == 2 and here != top / path.strip("/"):
                _enable_cpu(here, top / quota_at.strip("/"))
            here = here / part
            if not here.exists():
                here.mkdir()
                made.append(here)
        quota_dir = top / quota_at.strip("/")
        period = 100_000
        if controller.version == 1:
            (quota_dir / "cpu.cfs_period_us").write_text(f"{period}\n")
            (quota_dir / "cpu.cfs_quota_us").write_text(f"{round(cpus * period)}\n")
        else:
            (quota_dir / "cpu.max").write_text(f"{round(cpus * period)} {period}\n")
        yield quota_dir, here
    finally:
        for directory in reversed(made):
            empty_group(directory)
            remove_group(directory)


def _enable_cpu(directory: Path, quota_dir: Path) -> None:
    """v2: hand the cpu controller down from ``directory`` when the quota group is below it."""
    if directory != quota_dir and quota_dir.is_relative_to(directory):
        control = directory / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu\n")
