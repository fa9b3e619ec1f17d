"""The kernel's CPU quota (CFS bandwidth control) in cgroups v1 and v2: find it, read it, set it.

Docker's ``--cpus`` and a Kubernetes CPU limit are nothing but a quota in a cgroup: the group
may run ``quota`` microseconds of CPU in every ``period`` (plus an optional ``burst`` saved from
earlier periods), then the kernel stops it until the next period. Where the numbers live:

======================  ==================================  ===============================
                        cgroup v1 (``cpu`` controller)      cgroup v2 (unified)
======================  ==================================  ===============================
quota, period           ``cpu.cfs_quota_us`` (-1 = none),   ``cpu.max`` = ``"QUOTA PERIOD"``
                        ``cpu.cfs_period_us``               or ``"max PERIOD"``
burst                   ``cpu.cfs_burst_us``                ``cpu.max.burst``
throttling counters     ``cpu.stat``: ``nr_periods``,       ``cpu.stat``: ``nr_periods``,
                        ``nr_throttled``, ``throttled_time``  ``nr_throttled``,
                        (**nanoseconds**)                   ``throttled_usec`` (**µs**)
======================  ==================================  ===============================

Which group a process is in comes from ``/proc/self/cgroup``; where that group's files are
comes from ``/proc/self/mountinfo``. Inside a container the mount's *root* is the container's
own group (``/docker/<id>`` mounted at ``/sys/fs/cgroup/cpu``), so a group path is mapped
through the mount root: directory = mount point + (group path relative to the mount root).

The parsing functions (``parse_*``, ``find_cpu_controller``, ``map_group_path``) are pure and
work on sample text; the rest reads and writes the files.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.limit import Limit
from service.quota import CpuStat

__all__ = [
    "GROUP_PREFIX", "CgroupError", "CpuController", "CpuLimit", "CpuStatProbe", "Membership",
    "Mount", "available_cpus", "create_group", "empty_group", "find_cpu_controller",
    "limit_in_force", "locate_cpu_controller", "map_group_path", "move_pid", "parse_cfs_value",
    "parse_cpu_max", "parse_cpu_stat", "parse_mountinfo", "parse_proc_cgroup", "read_cpu_limit",
    "read_cpu_stat", "remove_group", "unique_group_name",
]

GROUP_PREFIX = "throttle-lab"


class CgroupError(RuntimeError):
    """The kernel quota cannot be read or set here; the message says why, in one line."""


# --------------------------------------------------------------------------------------------
# Pure parsing
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Membership:
    """One line of ``/proc/<pid>/cgroup``: ``hierarchy-id:controllers:path``."""

    hierarchy_id: int
    controllers: tuple[str, ...]  # () for the v2 line "0::/path"
    path: str


@dataclass(frozen=True)
class Mount:
    """The fields of one ``/proc/<pid>/mountinfo`` line that locate a cgroup hierarchy."""

    root: str          # the hierarchy's directory mounted here (``/docker/<id>`` in a container)
    mount_point: str
    fstype: str        # "cgroup" (v1) or "cgroup2"
    super_options: tuple[str, ...]  # v1: the controllers, e.g. ("rw", "cpu", "cpuacct")


@dataclass(frozen=True)
class CpuController:
    """Where this process's cpu controller is: version, mount, and the process's group."""

    version: int       # 1 or 2
    mount: Mount
    group: str         # the group path from /proc/self/cgroup, e.g. "/docker/<id>"

    @property
    def directory(self) -> Path:
        """The directory of the group's files (``CgroupError`` if the mount does not show it)."""
        mapped = map_group_path(self.mount, self.group)
        if mapped is None:
            raise CgroupError(f"cgroup {self.group} is outside the mount of "
                              f"{self.mount.root} at {self.mount.mount_point}")
        return Path(mapped)


@dataclass(frozen=True)
class CpuLimit:
    """The quota in force for a group: ``quota_us`` is None when the group is unlimited."""

    version: int
    path: str                 # the directory whose files say this (for /limits)
    group: str                # the group's path in the hierarchy
    quota_us: int | None
    period_us: int | None
    burst_us: int | None      # None when the kernel has no burst (before Linux 5.14)

    @property
    def cpus(self) -> float | None:
        if self.quota_us is None or not self.period_us:
            return None
        return round(self.quota_us / self.period_us, 6)

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "path": self.path, "group": self.group,
                "quota_us": self.quota_us, "period_us": self.period_us,
                "burst_us": self.burst_us, "cpus": self.cpus}


def parse_proc_cgroup(text: str) -> list[Membership]:
    """``/proc/self/cgroup`` -> memberships (``4:cpu,cpuacct:/docker/x``, ``0::/user.slice``)."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        out.append(Membership(int(parts[0]), controllers, parts[2]))
    return out


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\040`` etc."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """``/proc/self/mountinfo`` -> the cgroup mounts (other file systems are skipped)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append(Mount(root=_unescape(fields[3]), mount_point=_unescape(fields[4]),
                         fstype=tail[0], super_options=tuple(tail[2].split(","))))
    return out


def map_group_path(mount: Mount, group: str) -> str | None:
    """Where a group's files are: mount point + group path relative to the mount's root.

    ``None`` when the group is not below the mount's root (e.g. ``/../x`` from a cgroup
    namespace, or another container's mount)."""
    root = mount.root.rstrip("/")
    if group != root and not group.startswith(root + "/"):
        return None
    rest = group[len(root):].strip("/")
    return mount.mount_point.rstrip("/") + ("/" + rest if rest else "") or "/"


def find_cpu_controller(proc_cgroup: str, mountinfo: str) -> CpuController | None:
    """The cpu controller of the process whose ``/proc/<pid>/cgroup`` and ``mountinfo`` these
    are: the v1 ``cpu`` hierarchy if one is mounted, else the v2 unified hierarchy (whether v2
    has the cpu controller enabled is a question for the files: see ``locate_cpu_controller``)."""
    memberships = parse_proc_cgroup(proc_cgroup)
    mounts = parse_mountinfo(mountinfo)
    for m in memberships:
        if "cpu" in m.controllers:
            for mount in mounts:
                if (mount.fstype == "cgroup" and "cpu" in mount.super_options
                        and map_group_path(mount, m.path) is not None):
                    return CpuController(1, mount, m.path)
    for m in memberships:
        if m.hierarchy_id == 0 and not m.controllers:
            for mount in mounts:
                if mount.fstype == "cgroup2" and map_group_path(mount, m.path) is not None:
                    return CpuController(2, mount, m.path)
    return None


def parse_cfs_value(text: str) -> int | None:
    """A v1 ``cpu.cfs_*_us`` file -> its integer; ``-1`` (no quota) -> None."""
    value = int(text.strip())
    return None if value < 0 else value


def parse_cpu_max(text: str) -> tuple[int | None, int]:
    """v2 ``cpu.max`` (``"30000 100000"`` or ``"max 100000"``) -> (quota_us or None, period_us)."""
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"cpu.max should be 'QUOTA PERIOD', got {text.strip()!r}")
    quota = None if parts[0] == "max" else int(parts[0])
    return quota, int(parts[1])


def parse_cpu_stat(text: str, version: int) -> CpuStat | None:
    """``cpu.stat`` -> counters, throttled time in ns (v1 ``throttled_time`` is ns, v2
    ``throttled_usec`` µs). None when the file has no bandwidth counters (v2 without the cpu
    controller shows only ``usage_usec``...). Read around every burn, so the usual file (one
    ``name value`` pair per line) takes a short way; anything else is read line by line."""
    words = text.split()
    try:
        if len(words) % 2:
            raise ValueError("not name/value pairs")
        values = {name: int(value) for name, value in zip(words[::2], words[1::2])}
    except ValueError:
        values = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                values[parts[0]] = int(parts[1])
    if "nr_periods" not in values or "nr_throttled" not in values:
        return None
    if version == 1:
        throttled_ns, burst_ns = values.get("throttled_time", 0), values.get("burst_time", 0)
    else:
        throttled_ns = values.get("throttled_usec", 0) * 1000
        burst_ns = values.get("burst_usec", 0) * 1000
    return CpuStat(values["nr_periods"], values["nr_throttled"], throttled_ns,
                   values.get("nr_bursts", 0), burst_ns)


# --------------------------------------------------------------------------------------------
# Reading the files
# --------------------------------------------------------------------------------------------

def _read(path: Path) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def locate_cpu_controller(proc: str | Path = "/proc/self") -> CpuController:
    """This process's cpu controller, or ``CgroupError`` saying why there is none."""
    if not sys.platform.startswith("linux"):
        raise CgroupError(f"cgroups are a Linux feature (this is {sys.platform})")
    proc = Path(proc)
    try:
        controller = find_cpu_controller(_read(proc / "cgroup"), _read(proc / "mountinfo"))
    except OSError as exc:
        raise CgroupError(f"cannot read {proc}/cgroup or mountinfo: {exc.strerror}") from None
    if controller is None:
        raise CgroupError("no cgroup cpu controller is mounted for this process "
                          "(/proc/self/cgroup, /proc/self/mountinfo)")
    return controller


def _read_words(path: Path) -> set[str]:
    try:
        return set(_read(path).split())
    except OSError:
        return set()


def read_cpu_limit(directory: str | Path, version: int, group: str = "") -> CpuLimit:
    """The quota, period and burst written in one group's files (OSError if unreadable)."""
    d = Path(directory)
    burst: int | None
    if version == 1:
        quota = parse_cfs_value(_read(d / "cpu.cfs_quota_us"))
        period = parse_cfs_value(_read(d / "cpu.cfs_period_us"))
        burst_file = d / "cpu.cfs_burst_us"
    else:
        quota, period = parse_cpu_max(_read(d / "cpu.max"))
        burst_file = d / "cpu.max.burst"
    try:
        burst = int(_read(burst_file).strip())
    except (OSError, ValueError):
        burst = None
    return CpuLimit(version, str(d), group, quota, period, burst)


def read_cpu_stat(directory: str | Path, version: int) -> CpuStat | None:
    """The group's ``cpu.stat`` (None without bandwidth counters; OSError if unreadable)."""
    return parse_cpu_stat(_read(Path(directory) / "cpu.stat"), version)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a cpuset), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def limit_in_force(controller: CpuController | None = None) -> CpuLimit | None:
    """The tightest quota on this process: its own group's or an ancestor's (Kubernetes puts
    one on the pod and one on the container), as far up as the mount shows. When no group has
    a quota: the own group with ``quota_us`` None. None when nothing is readable."""
    try:
        controller = controller or locate_cpu_controller()
        directory = controller.directory
    except (CgroupError, OSError):
        return None
    top = Path(controller.mount.mount_point)
    group = controller.group
    own: CpuLimit | None = None
    tightest: CpuLimit | None = None
    while True:
        try:
            limit = read_cpu_limit(directory, controller.version, group)
        except (OSError, ValueError):
            limit = None   # v2's root has no cpu.max
        if limit is not None:
            own = own or limit
            if limit.cpus is not None and (tightest is None or limit.cpus < (tightest.cpus or 0)):
                tightest = limit
        if directory == top or directory.parent == directory:
            break
        directory, group = directory.parent, (group.rsplit("/", 1)[0] or "/")
    return tightest or own


class CpuStatProbe:
    """Reads one group's ``cpu.stat``: the counters around a request.

    The file is opened once and re-read with ``pread`` at offset 0 (the kernel regenerates it
    on each read from the start), so a sample is one system call, not three; thread-safe (no
    shared file position). The descriptor is closed when the probe is collected."""

    def __init__(self, directory: str | Path, version: int) -> None:
        self.path = Path(directory) / "cpu.stat"
        self.version = version
        self._fd: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def locate(cls) -> CpuStatProbe | None:
        """The probe for the group whose quota is in force; None if no cpu.stat has counters."""
        limit = limit_in_force()
        if limit is None:
            return None
        probe = cls(limit.path, limit.version)
        return probe if probe.sample() is not None else None

    def sample(self) -> CpuStat | None:
        try:
            fd = self._fd if self._fd is not None else self._open()
            return parse_cpu_stat(os.pread(fd, 4096, 0).decode("ascii"), self.version)
        except (OSError, ValueError):
            return None

    def _open(self) -> int:
        with self._lock:
            if self._fd is None:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                weakref.finalize(self, os.close, fd)
                self._fd = fd
            return self._fd


# --------------------------------------------------------------------------------------------
# Making, filling and removing a group
# --------------------------------------------------------------------------------------------

def unique_group_name(pid: int | None = None) -> str:
    """``throttle-lab-<pid>-<random>``: ours, and never the same twice."""
    return f"{GROUP_PREFIX}-{os.getpid() if pid is None else pid}-{secrets.token_hex(3)}"


def _parent_for_child(controller: CpuController) -> Path:
    """Where a new group can get its own quota. v1: below our own group. v2: the nearest
    ancestor (or our own group) that hands the cpu controller down (``cgroup.subtree_control``);
    v2 allows no processes in a group that does, so it is never a group we are in, except the
    root. We never enable a controller in a group we did not create."""
    directory = controller.directory
    if controller.version == 1:
        return directory
    top = Path(controller.mount.mount_point)
    candidate = directory
    while True:
        if "cpu" in _read_words(candidate / "cgroup.subtree_control"):
            return candidate
        if candidate == top or candidate.parent == candidate:
            break
        candidate = candidate.parent
    raise CgroupError(f"cgroup v2: no group from {directory} up to {top} enables the cpu "
                      f"controller for its children (cgroup.subtree_control)")


def _explain(exc: OSError, what: str) -> CgroupError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied (needs root, or a cgroup delegated to this user)"
    elif exc.errno == errno.EROFS:
        why = "the cgroup file system is read-only (inside a container?)"
    elif exc.errno == errno.ENOENT:
        why = "no such file (is CFS bandwidth control in this kernel?)"
    else:
        why = exc.strerror or str(exc)
    return CgroupError(f"cannot {what}: {why}")


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def create_group(limit: Limit, controller: CpuController | None = None,
                 name: str | None = None) -> Path:
    """Make a new group with the limit's quota, period and burst; returns its directory."""
    controller = controller or locate_cpu_controller()
    directory = _parent_for_child(controller) / (name or unique_group_name())
    try:
        directory.mkdir()
    except OSError as exc:
        raise _explain(exc, f"create a cgroup in {directory.parent}") from None
    try:
        if controller.version == 1:
            _write(directory / "cpu.cfs_period_us", str(limit.period_us))
            _write(directory / "cpu.cfs_quota_us", str(limit.quota_us))
            burst_file = directory / "cpu.cfs_burst_us"
        else:
            _write(directory / "cpu.max", f"{limit.quota_us} {limit.period_us}")
            burst_file = directory / "cpu.max.burst"
        if limit.burst_us:
            if not burst_file.exists():
                raise CgroupError(f"this kernel has no {burst_file.name} (burst needs Linux 5.14+)")
            _write(burst_file, str(limit.burst_us))
    except OSError as exc:
        remove_group(directory)
        raise _explain(exc, f"set the quota in {directory}") from None
    except CgroupError:
        remove_group(directory)
        raise
    return directory


def move_pid(directory: str | Path, pid: int) -> None:
    """Move a process (all its threads) into the group."""
    try:
        _write(Path(directory) / "cgroup.procs", str(pid))
    except OSError as exc:
        raise _explain(exc, f"move process {pid} into {directory}") from None


def _pids(directory: Path) -> list[int]:
    try:
        return [int(p) for p in _read(directory / "cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def empty_group(directory: str | Path, grace: float = 3.0,
                sleep: Callable[[float], None] = time.sleep) -> list[int]:
    """Stop what is still in the group (a command's leftover children, like the rest of a
    container when its main process ends): SIGTERM, then SIGKILL after ``grace`` seconds.
    Returns the pids that were signalled."""
    d = Path(directory)
    signalled: list[int] = []
    _signal_all(_pids(d), signal.SIGTERM, signalled)
    deadline = time.monotonic() + grace
    while _pids(d) and time.monotonic() < deadline:
        sleep(0.02)
    _signal_all(_pids(d), signal.SIGKILL, signalled)
    return signalled


def _signal_all(pids: Iterable[int], sig: int, signalled: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        if pid not in signalled:
            signalled.append(pid)


def remove_group(directory: str | Path, timeout: float = 5.0) -> bool:
    """``rmdir`` the group, retrying while dying processes leave it; True when it is gone."""
    d = Path(directory)
    deadline = time.monotonic() + timeout
    while True:
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        time.sleep(0.01)

