"""The kernel's CPU quota (CFS bandwidth control) in cgroups v1 and v2: make a group with a quota,
move a process in, stop what is left in it and remove it. Finding and reading groups is
``cpuquota.cgroupfs``'s (standard library only, shared with the client).

A group is made where the cpu controller is ours to use: on v1 below this process's own
group, on v2 next to it (below the root when we are in the root), with ``+cpu`` written into
the ancestors' ``cgroup.subtree_control`` as runc and systemd do. Every group we make is
removed by its path.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from cpuquota.cgroupfs import (CgroupError, CpuController, locate_cpu_controller, read_text,
                               read_words)
from cpuquota.limit import Limit

__all__ = ["GROUP_PREFIX", "create_group", "empty_group", "lift_quota", "move_pid", "remove_group",
           "set_quota", "unique_group_name"]

GROUP_PREFIX = "throttle-lab"


# --------------------------------------------------------------------------------------------
# Making, filling and removing a group
# --------------------------------------------------------------------------------------------

def unique_group_name(pid: int | None = None) -> str:
    """``throttle-lab-<pid>-<random>``: ours, and never the same twice."""
    return f"{GROUP_PREFIX}-{os.getpid() if pid is None else pid}-{secrets.token_hex(3)}"


def _parent_for_child(controller: CpuController) -> Path:
    """Where a new group can get its own quota. v1: below our own group. v2: next to our own
    group (below its parent), or below it when it is the hierarchy's root: v2 allows no
    processes in a group that hands controllers down, except the root, and we are in our own
    group. The cpu controller is enabled down to that parent as runc and systemd do
    (``_enable_cpu_down_to``)."""
    directory = controller.directory
    if controller.version == 1:
        return directory
    top = Path(controller.mount.mount_point)
    parent = directory if directory == top or directory.parent == directory else directory.parent
    _enable_cpu_down_to(parent, top)
    return parent


def _enable_cpu_down_to(parent: Path, top: Path) -> None:
    """Write ``+cpu`` into ``cgroup.subtree_control`` from the nearest group that has the cpu
    controller (``cgroup.controllers``) down to ``parent``; nothing where it is enabled."""
    lacking: list[Path] = []
    group = parent
    while "cpu" not in read_words(group / "cgroup.subtree_control"):
        lacking.append(group)
        if "cpu" in read_words(group / "cgroup.controllers"):
            break
        if group == top or group.parent == group:
            raise CgroupError(f"cgroup v2: the cpu controller is not available from {parent} "
                              f"up to {top} (cgroup.controllers): no group can get a quota")
        group = group.parent
    for group in reversed(lacking):
        control = group / "cgroup.subtree_control"
        try:
            _write(control, "+cpu")
        except OSError as exc:
            raise CgroupError(f"cannot enable the cpu controller in {control}: "
                              f"{_refusal(exc, group)}") from None


def _refusal(exc: OSError, group: Path) -> str:
    """Why the kernel refused ``+cpu`` in ``group``'s ``cgroup.subtree_control``."""
    if exc.errno == errno.EBUSY:   # cpu is threaded: refused only with populated children too
        return (f"{group} has processes of its own (cgroup v2's no internal processes rule: "
                f"only the root may hand controllers down to groups in use and hold processes)")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (a delegated tree we do not own: needs root or the owner)"
    if exc.errno == errno.EROFS:
        return "the cgroup file system is read-only (inside a container?)"
    return exc.strerror or str(exc)


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


def create_group(limit: Limit | None, controller: CpuController | None = None,
                 name: str | None = None) -> Path:
    """Make a new group with the limit's quota, period and burst (None: no quota yet, see
    :func:`set_quota`); returns its directory."""
    controller = controller or locate_cpu_controller()
    directory = _parent_for_child(controller) / (name or unique_group_name())
    try:
        directory.mkdir()
    except OSError as exc:
        raise _explain(exc, f"create a cgroup in {directory.parent}") from None
    if limit is None:
        return directory
    try:
        set_quota(directory, controller.version, limit)
    except CgroupError:
        remove_group(directory)
        raise
    return directory


def set_quota(directory: Path, version: int, limit: Limit) -> None:
    """Write the limit's period, quota and burst into a group that has no quota yet (a new
    group, or one made by :func:`create_group` with none); ``CgroupError`` says why not."""
    try:
        if version == 1:
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
        raise _explain(exc, f"set the quota in {directory}") from None


def lift_quota(directory: str | Path, version: int) -> None:
    """Take the quota off a group that is being emptied, so that what is dying in it is not
    throttled while it exits (best effort: a group already gone has none)."""
    d = Path(directory)
    try:
        if version == 1:
            _write(d / "cpu.cfs_quota_us", "-1")
        else:
            _write(d / "cpu.max", "max")
    except OSError:
        pass


def move_pid(directory: str | Path, pid: int) -> None:
    """Move a process (all its threads) into the group."""
    try:
        _write(Path(directory) / "cgroup.procs", str(pid))
    except OSError as exc:
        raise _explain(exc, f"move process {pid} into {directory}") from None


def _pids(directory: Path) -> list[int]:
    try:
        return [int(p) for p in read_text(directory / "cgroup.procs").split()]
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

