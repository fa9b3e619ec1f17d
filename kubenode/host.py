"""What the node changes on the host, and how each is put back: its cgroup root, the mount
points it needs, and the holder process that owns its network and mount namespaces.

Everything else (the bridge, the veths, every iptables rule, every mount) lives inside the
holder's namespaces and goes with them when the holder ends.
"""
from __future__ import annotations

import os
from pathlib import Path

from kubenode.config import CGROUP_ROOT
from kubenode.proc import ns_inode, read_pidfile, run

__all__ = ["cgroup_mounts", "cgroup_v1", "cgroup_root_paths", "cgroup_root_ready", "make_cgroup_root",
           "remove_cgroup_root", "cgroup_root_procs", "holder_pid", "nsenter"]


def cgroup_mounts() -> list[tuple[str, Path]]:
    """(filesystem type, mount point) of every cgroup hierarchy, from /proc/self/mountinfo."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        fstype = right.split()[0]
        if fstype in ("cgroup", "cgroup2"):
            out.append((fstype, Path(left.split()[4])))
    return out


def cgroup_v1() -> bool:
    """Whether the host has cgroup v1 hierarchies (a v2 host has one cgroup2 mount only)."""
    return any(fstype == "cgroup" for fstype, _ in cgroup_mounts())


def cgroup_root_paths(root: str = CGROUP_ROOT) -> list[Path]:
    return [mount / root for _, mount in cgroup_mounts()]


# The cgroup root's CPU weight (v1 cpu.shares; the default is 1024): the host is shared and
# busy, and a pod starved below its quota by other people's load is never throttled (nor is
# its slowness the quota's). A weight, not a quota: the pods' limits work the same at any
# weight, and an idle node takes nothing from anyone.
NODE_CPU_SHARES = 102400


def cgroup_root_ready(root: str = CGROUP_ROOT) -> bool:
    return all((mount / root).is_dir() and _shares_ok(mount / root)
               for fstype, mount in cgroup_mounts() if fstype == "cgroup")


def _shares_ok(group: Path) -> bool:
    shares = group / "cpu.shares"
    return not shares.exists() or shares.read_text().strip() == str(NODE_CPU_SHARES)


def make_cgroup_root(root: str = CGROUP_ROOT) -> None:
    """The kubelet's cgroupRoot must exist in every v1 hierarchy before it starts; in cpuset
    it needs the parent's cpus and mems (a new cpuset group starts empty); in cpu it gets the
    node's weight (``NODE_CPU_SHARES``). Safe on a running node: it only adds what is missing."""
    for fstype, mount in cgroup_mounts():
        if fstype != "cgroup":
            continue
        group = mount / root
        group.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (group / name).exists() and not (group / name).read_text().strip():
                (group / name).write_text((mount / name).read_text())
        if not _shares_ok(group):
            (group / "cpu.shares").write_text(str(NODE_CPU_SHARES))


def _groups_below(root: Path) -> list[Path]:
    """Every group below ``root``, deepest first; groups that vanish meanwhile are skipped."""
    return [Path(dirpath) for dirpath, _, _ in os.walk(root, topdown=False)]


def cgroup_root_procs(root: str = CGROUP_ROOT) -> list[int]:
    """Every pid in any group under the cgroup root (the pods' processes)."""
    pids: set[int] = set()
    for top in cgroup_root_paths(root):
        for group in _groups_below(top):
            try:
                pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
            except OSError:
                pass
    return sorted(pids)


def remove_cgroup_root(root: str = CGROUP_ROOT) -> None:
    """rmdir the cgroup root and every group below it, deepest first, in every hierarchy."""
    failed = []
    for top in cgroup_root_paths(root):
        for group in _groups_below(top):
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                failed.append(f"{group}: {exc.strerror}")
    if failed:
        raise RuntimeError("cgroups not removed: " + ", ".join(failed[:5]))


def holder_pid(pidfile: Path) -> int | None:
    """The live holder's pid, if its namespaces are really its own (not the host's)."""
    found = read_pidfile(pidfile)
    if found is None:
        return None
    pid = found[0]
    if ns_inode(pid, "net") == ns_inode(os.getpid(), "net"):
        return None
    return pid


def nsenter(holder: int) -> list[str]:
    """The prefix that runs a command in the node's network and mount namespaces."""
    return ["nsenter", "-t", str(holder), "-n", "-m", "--"]


def ns_run(holder: int, *cmd: str, check: bool = True) -> str:
    return run([*nsenter(holder), *cmd], check=check).stdout
