"""What every limiter shares: the quota files read, written and read back.

A limit is *in force* when the group's quota file shows it: ``cpu.cfs_quota_us`` and
``cpu.cfs_period_us`` (cgroup v1) or ``cpu.max`` (v2), and the burst file where the kernel has
one. :func:`wait_for_quota` polls until it does (``docker update`` writes the file through the
engine and runc; a direct write is in force at once).
"""

from __future__ import annotations

import errno
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from cpuquota.cgroupfs import available_cpus, read_cpu_limit
from cpuquota.limit import Limit, LimitError

__all__ = ["Limiter", "LimiterError", "burst_file", "machine_cpus", "quota_file",
           "quota_file_problem", "quota_words", "read_quota", "same_limit", "wait_for_quota",
           "write_quota"]

SOURCE = "cgroup"


class LimiterError(RuntimeError):
    """A limit that cannot be set, read or put back; the message says why, in one line."""


class Limiter(ABC):
    """How one kind of running service gets its CPU limit changed in place.

    ``read``, ``check``, ``apply`` and ``restore_hint`` are each kind's own; ``ceiling``,
    ``node_cpus``, ``unchanged`` and ``patch_deployment`` are capabilities a kind may have,
    declared here with what a kind without them says."""

    kind: str           # "cgroup", "docker", "k8s"
    description: str    # what is written, e.g. "the quota file /sys/fs/cgroup/cpu/x"
    can_remove: bool    # whether the target may run without any limit (apply(None))
    # what names the target, for the words that make a limit permanent
    # (``client.render.permanent.permanent_lines``): {"directory", "version", "group"} or
    # {"name"}
    names: dict[str, Any]

    @abstractmethod
    def read(self) -> Limit | None:
        """The limit in force now, as the quota file shows it (None: no quota)."""

    @abstractmethod
    def check(self, limit: Limit | None) -> None:
        """``LimiterError`` (one line) for a limit this kind of target cannot be given."""

    @abstractmethod
    def apply(self, limit: Limit | None) -> None:
        """Set ``limit`` (None: none); return once the quota file reads it back."""

    @abstractmethod
    def restore_hint(self, limit: Limit | None) -> str:
        """The command that puts ``limit`` back by hand (printed before anything is changed)."""

    def ceiling(self) -> Limit | None:
        """The tightest limit above the one written, which caps it (None: none)."""
        return None

    def node_cpus(self) -> tuple[int, str] | None:
        """The CPUs of the machine the service runs on and their words, where that is not
        this one (None: this machine's, :func:`machine_cpus`)."""
        return None

    def unchanged(self) -> str | None:
        """After the restore: what stayed as it was (a pod's restarts, container id)."""
        return None

    def drift(self, limit: Limit | None) -> str | None:
        """Whether ``limit``, set by :meth:`apply`, is still what the target holds: None when
        it is, else what changed from it and who changes it, in words for one line
        (``LimiterError`` when it cannot be read). Here: the quota files."""
        now = self.read()
        if same_limit(now, limit):
            return None
        return (f"{self.description}: {quota_words(limit)} -> {quota_words(now)}: another "
                "process or controller writes this group's quota")

    def patch_deployment(self, limit: Limit) -> str:
        """``--apply``: make ``limit`` permanent where the target has a Deployment; what was
        done, in one line (``LimiterError`` where it has none)."""
        raise LimiterError(f"--apply patches a Kubernetes Deployment; {self.kind} targets: see "
                           "'To keep it' in the answer")


def machine_cpus() -> tuple[int, str]:
    """The CPUs this machine lets a service use, and their words."""
    cpus = available_cpus()
    return cpus, f"the machine's {cpus} CPUs"


def quota_file(directory: Path, version: int) -> Path:
    return directory / ("cpu.cfs_quota_us" if version == 1 else "cpu.max")


def burst_file(directory: Path, version: int) -> Path:
    return directory / ("cpu.cfs_burst_us" if version == 1 else "cpu.max.burst")


def read_quota(directory: Path, version: int) -> Limit | None:
    """The limit the group's files hold (None: no quota); ``LimiterError`` when unreadable."""
    try:
        found = read_cpu_limit(directory, version)
    except OSError as exc:
        raise LimiterError(quota_file_problem(exc, quota_file(directory, version), "read")) \
            from None
    if found.quota_us is None or not found.period_us:
        return None
    try:
        return Limit(found.quota_us / found.period_us, found.period_us / 1000,
                     min(found.burst_us or 0, found.quota_us) / 1000, SOURCE)
    except LimitError as exc:
        raise LimiterError(f"{directory}: unexpected quota: {exc}") from None


def quota_words(limit: Limit | None) -> str:
    """A quota as the kernel's files hold it: ``50000/100000 µs`` (``no quota``)."""
    if limit is None:
        return "no quota"
    burst = f" (burst {limit.burst_us})" if limit.burst_us else ""
    return f"{limit.quota_us}/{limit.period_us} µs{burst}"


def same_limit(a: Limit | None, b: Limit | None) -> bool:
    """Whether two limits are the same quota, period and burst on the kernel's µs grid."""
    if a is None or b is None:
        return a is None and b is None
    return (a.quota_us, a.period_us, a.burst_us) == (b.quota_us, b.period_us, b.burst_us)


def write_quota(directory: Path, version: int, limit: Limit | None) -> None:
    """Write ``limit`` (None: no quota) into the group's files. The burst goes to 0 first (it
    may not exceed the quota), and on v1 a new period is written with the quota lifted for that
    instant (the kernel checks quota against period as each file is written)."""
    burst = burst_file(directory, version)
    has_burst = burst.exists()
    if limit is not None and limit.burst_us and not has_burst:
        raise LimiterError(f"this kernel has no {burst.name} in {directory} (a burst needs "
                           "Linux 5.14+)")
    try:
        if has_burst:
            _write(burst, "0")
        if version == 1:
            quota = directory / "cpu.cfs_quota_us"
            period = directory / "cpu.cfs_period_us"
            if limit is None:
                _write(quota, "-1")
            else:
                if int(period.read_text(encoding="ascii")) != limit.period_us:
                    _write(quota, "-1")
                    _write(period, str(limit.period_us))
                _write(quota, str(limit.quota_us))
        else:
            current = (directory / "cpu.max").read_text(encoding="ascii").split()
            period_us = limit.period_us if limit else int(current[1])
            _write(directory / "cpu.max",
                   f"{limit.quota_us if limit else 'max'} {period_us}")
        if limit is not None and limit.burst_us:
            _write(burst, str(limit.burst_us))
    except OSError as exc:
        raise LimiterError(quota_file_problem(exc, quota_file(directory, version), "write",
                                              limit)) from None


def wait_for_quota(directory: Path, version: int, limit: Limit | None,
                   timeout: float = 10.0) -> Limit | None:
    """Poll the group's files until they hold ``limit``; what they hold then. ``LimiterError``
    when they do not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = read_quota(directory, version)
        if same_limit(found, limit):
            return found
        if time.monotonic() >= deadline:
            want = "no quota" if limit is None else f"{limit.quota_us}/{limit.period_us} µs"
            have = "no quota" if found is None else f"{found.quota_us}/{found.period_us} µs"
            raise LimiterError(f"the limit is not in force: {quota_file(directory, version)} "
                               f"reads {have}, not {want}, after {timeout:g} s")
        time.sleep(0.05)


def quota_file_problem(exc: OSError, path: Path, verb: str, limit: Limit | None = None) -> str:
    """One line for an ``OSError`` on a quota file."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"cannot {verb} {path}: permission denied (changing a cgroup's CPU limit "
                "needs root, or a cgroup delegated to this user)")
    if exc.errno == errno.EROFS:
        return f"cannot {verb} {path}: the cgroup file system is read-only (inside a container?)"
    if exc.errno == errno.ENOENT:
        return f"cannot {verb} {path}: no such file (the group is gone?)"
    if exc.errno == errno.EINVAL and limit is not None:
        return (f"the kernel refused {limit.quota_us}/{limit.period_us} µs in {path}: on cgroup "
                "v1 a group's quota may not exceed its parent's nor be below a child group's")
    return f"cannot {verb} {path}: {exc.strerror or exc}"


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
