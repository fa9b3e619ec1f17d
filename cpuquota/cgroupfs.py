"""The kernel's CPU quota (CFS bandwidth control) in cgroups v1 and v2: find it and read it.

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

The parsing functions (``parse_*``, ``find_cpu_controller``, ``map_group_path``,
``cpu_mounts``) are pure and work on sample text; the rest only reads the files. There is one
reader of ``cpu.stat`` (:class:`CpuStatReader`), used by the service around each burn and by
the client's sampler. Making, filling and removing groups is ``service.cgroup``'s job.
Standard library only: the client and the service both stand on this.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpuquota.account import CpuStat

__all__ = [
    "CgroupError", "CpuController", "CpuLimit", "CpuStatReader", "Membership", "Mount",
    "Pressure", "available_cpus", "cgroup_mount_holding", "cpu_mounts", "find_cpu_controller",
    "is_cpu_mount", "mount_holding",
    "limit_in_force", "locate_cpu_controller", "map_group_path", "parse_cfs_value",
    "parse_cpu_max", "parse_cpu_stat", "parse_mountinfo", "parse_pressure", "parse_proc_cgroup",
    "parse_usage_usec", "quota_levels", "read_cpu_limit", "read_cpu_stat", "read_text",
    "read_words",
]


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


def _mounts(text: str) -> list[Mount]:
    """Every mount of a ``mountinfo`` text, whatever its file system, in the file's order."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        out.append(Mount(root=_unescape(fields[3]), mount_point=_unescape(fields[4]),
                         fstype=tail[0], super_options=tuple(tail[2].split(","))))
    return out


def parse_mountinfo(text: str) -> list[Mount]:
    """``/proc/self/mountinfo`` -> the cgroup mounts (other file systems are skipped)."""
    return [mount for mount in _mounts(text) if mount.fstype in ("cgroup", "cgroup2")]


def mount_holding(real_path: str, mountinfo: str) -> Mount | None:
    """The mount whose file system holds ``real_path`` (absolute, symlinks resolved): the
    longest mount point above it, the last one mounted where two share it."""
    held: Mount | None = None
    for mount in _mounts(mountinfo):
        point = mount.mount_point.rstrip("/") + "/"
        if (real_path + "/").startswith(point) and (
                held is None or len(mount.mount_point) >= len(held.mount_point)):
            held = mount
    return held


def map_group_path(mount: Mount, group: str) -> str | None:
    """Where a group's files are: mount point + group path relative to the mount's root.

    ``None`` when the group is not below the mount's root (e.g. ``/../x`` from a cgroup
    namespace, or another container's mount)."""
    root = mount.root.rstrip("/")
    if group != root and not group.startswith(root + "/"):
        return None
    rest = group[len(root):].strip("/")
    return mount.mount_point.rstrip("/") + ("/" + rest if rest else "") or "/"


def is_cpu_mount(mount: Mount) -> bool:
    """Whether the cpu controller can be in this hierarchy: a v1 mount with ``cpu`` among its
    controllers, or the v2 unified one (whose groups have ``cpu.max`` where it is enabled)."""
    return mount.fstype == "cgroup2" or (mount.fstype == "cgroup"
                                         and "cpu" in mount.super_options)


def cpu_mounts(mounts: list[Mount]) -> list[Mount]:
    """The hierarchies the cpu controller can be in: v1 ``cpu`` mounts first, then cgroup2
    (a host that mounts both, as this one, has the controller on v1)."""
    cpu = [m for m in mounts if is_cpu_mount(m)]
    return [m for m in cpu if m.fstype == "cgroup"] + [m for m in cpu if m.fstype == "cgroup2"]


def find_cpu_controller(proc_cgroup: str, mountinfo: str) -> CpuController | None:
    """The cpu controller of the process whose ``/proc/<pid>/cgroup`` and ``mountinfo`` these
    are: the v1 ``cpu`` hierarchy if one is mounted, else the v2 unified hierarchy (whether v2
    has the cpu controller enabled is a question for the files: see ``locate_cpu_controller``)."""
    memberships = parse_proc_cgroup(proc_cgroup)
    for mount in cpu_mounts(parse_mountinfo(mountinfo)):
        version = 1 if mount.fstype == "cgroup" else 2
        for m in memberships:
            joined = "cpu" in m.controllers if version == 1 else (m.hierarchy_id == 0
                                                                 and not m.controllers)
            if joined and map_group_path(mount, m.path) is not None:
                return CpuController(version, mount, m.path)
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


@dataclass(frozen=True)
class Pressure:
    """A v2 group's ``cpu.pressure`` totals (PSI), in ns: the time some (``some``) or all
    (``full``; None before Linux 5.13, where cpu has no full line) of its tasks waited for a
    CPU they were ready to use, whatever the cause: its quota, or a busy machine."""

    some_ns: int
    full_ns: int | None


def parse_pressure(text: str) -> Pressure:
    """``cpu.pressure`` (``some avg10=0.00 avg60=0.00 avg300=0.00 total=1234`` and a ``full``
    line; totals in µs) -> totals in ns (ValueError without a ``some`` total)."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        for field in rest.split():
            if field.startswith("total="):
                totals[kind] = int(field[len("total="):]) * 1000
    if "some" not in totals:
        raise ValueError(f"cpu.pressure has no 'some ... total=' line: {text.strip()[:60]!r}")
    return Pressure(totals["some"], totals.get("full"))


# --------------------------------------------------------------------------------------------
# Reading the files
# --------------------------------------------------------------------------------------------

def parse_usage_usec(text: bytes) -> int:
    """The group's CPU usage (µs) from a v2 ``cpu.stat`` (ValueError when it has none)."""
    start = text.find(b"usage_usec ")
    if start < 0:
        raise ValueError("cpu.stat has no usage_usec")
    end = text.find(b"\n", start)
    return int(text[start + len(b"usage_usec "):end if end >= 0 else None])


def read_text(path: str | Path) -> str:
    """A cgroup or proc file's text (OSError if unreadable)."""
    with open(path, encoding="ascii") as f:
        return f.read()



def locate_cpu_controller(proc: str | Path = "/proc/self") -> CpuController:
    """This process's cpu controller, or ``CgroupError`` saying why there is none."""
    if not sys.platform.startswith("linux"):
        raise CgroupError(f"cgroups are a Linux feature (this is {sys.platform})")
    proc = Path(proc)
    try:
        controller = find_cpu_controller(read_text(proc / "cgroup"), read_text(proc / "mountinfo"))
    except OSError as exc:
        raise CgroupError(f"cannot read {proc}/cgroup or mountinfo: {exc.strerror}") from None
    if controller is None:
        raise CgroupError("no cgroup cpu controller is mounted for this process "
                          "(/proc/self/cgroup, /proc/self/mountinfo)")
    return controller


def cgroup_mount_holding(path: str | Path, proc: str | Path = "/proc/self") -> Mount | None:
    """The cgroup mount (v1 or v2) that holds ``path`` or, while it does not exist, its
    nearest existing parent: where a ``mkdir`` makes a cgroup, not a folder. None on any other
    file system, or where ``mountinfo`` cannot be read (not Linux)."""
    place = os.path.abspath(path)
    while not os.path.exists(place) and os.path.dirname(place) != place:
        place = os.path.dirname(place)
    try:
        mountinfo = read_text(Path(proc) / "mountinfo")
    except OSError:
        return None
    held = mount_holding(os.path.realpath(place), mountinfo)
    return held if held is not None and held.fstype in ("cgroup", "cgroup2") else None


def read_words(path: Path) -> set[str]:
    try:
        return set(read_text(path).split())
    except OSError:
        return set()


def read_cpu_limit(directory: str | Path, version: int, group: str = "") -> CpuLimit:
    """The quota, period and burst written in one group's files (OSError if unreadable)."""
    d = Path(directory)
    burst: int | None
    if version == 1:
        quota = parse_cfs_value(read_text(d / "cpu.cfs_quota_us"))
        period = parse_cfs_value(read_text(d / "cpu.cfs_period_us"))
        burst_file = d / "cpu.cfs_burst_us"
    else:
        quota, period = parse_cpu_max(read_text(d / "cpu.max"))
        burst_file = d / "cpu.max.burst"
    try:
        burst = int(read_text(burst_file).strip())
    except (OSError, ValueError):
        burst = None
    return CpuLimit(version, str(d), group, quota, period, burst)


def read_cpu_stat(directory: str | Path, version: int) -> CpuStat | None:
    """The group's ``cpu.stat`` (None without bandwidth counters; OSError if unreadable)."""
    return parse_cpu_stat(read_text(Path(directory) / "cpu.stat"), version)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a cpuset), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def quota_levels(directory: str | Path, top: str | Path, version: int,
                 group: str) -> list[CpuLimit]:
    """Every group from ``directory`` (whose path in the hierarchy is ``group``) up to the
    hierarchy's ``top`` that holds a quota, nearest first: any of them can throttle the
    processes below (a Kubernetes pod's quota throttles its containers, and the kernel counts
    it only in the pod's ``cpu.stat``: throttling counters are not hierarchical). Levels whose
    files are missing (v2's root, a group without the cpu controller) are passed over."""
    here, top = Path(directory), Path(top)
    found: list[CpuLimit] = []
    while True:
        try:
            limit = read_cpu_limit(here, version, group)
        except (OSError, ValueError):
            limit = None
        if limit is not None and limit.cpus is not None:
            found.append(limit)
        if here == top or here.parent == here:
            return found
        here, group = here.parent, (group.rsplit("/", 1)[0] or "/")


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


class CpuStatReader:
    """Reads one group's ``cpu.stat``: the one reader of that file, for the service's counters
    around a request and the client's sampler.

    The file is opened once and re-read with ``pread`` at offset 0 (the kernel regenerates it
    on each read from the start), so a reading is one system call; thread-safe (no shared file
    position). The descriptor is closed by :meth:`close` or when the reader is collected."""

    READ_SIZE = 4096

    def __init__(self, directory: str | Path, version: int) -> None:
        self.path = Path(directory) / "cpu.stat"
        self.version = version
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    @classmethod
    def locate(cls) -> CpuStatReader | None:
        """The reader for the group whose quota is in force on this process; None if no
        cpu.stat there has counters."""
        limit = limit_in_force()
        if limit is None:
            return None
        reader = cls(limit.path, limit.version)
        return reader if reader.sample() is not None else None

    def read_bytes(self) -> bytes:
        """The file's contents now (OSError when the group is gone or unreadable)."""
        fd = self._fd if self._fd is not None else self._open()
        return os.pread(fd, self.READ_SIZE, 0)

    def parse(self, raw: bytes) -> CpuStat | None:
        """``raw`` (from :meth:`read_bytes`) as counters, in this group's version's units."""
        return parse_cpu_stat(raw.decode("ascii"), self.version)

    def sample(self) -> CpuStat | None:
        """The counters now; None when unreadable or without bandwidth counters."""
        try:
            return self.parse(self.read_bytes())
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        with self._lock:
            if self._finalizer is not None:
                self._finalizer()
            self._fd = self._finalizer = None

    def _open(self) -> int:
        with self._lock:
            if self._fd is None:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                self._finalizer = weakref.finalize(self, os.close, fd)
                self._fd = fd
            return self._fd
