"""A cgroup's limit in place (``--cgroup PATH`` or ``pid:PID``): the quota file of the level
that holds the quota.

Which group is written: the quota in force as ``--cgroup`` resolution finds it
(``ServiceGroup.levels[0]``: the group's own quota or an ancestor's, the tightest), or, when no
level has a quota, the group itself (a new limit, ``--allow-new-limit``). Other levels above
stay as they are: a limit above the tightest of them cannot be in force, and cgroup v1 refuses
a child's quota above its parent's (``ceiling``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from client.run.service_group import ServiceGroup
from client.run.limiters.base import (Limiter, LimiterError, burst_file, quota_file, read_quota,
                                      wait_for_quota, write_quota)
from cpuquota.limit import Limit

__all__ = ["CgroupLimiter"]


class CgroupLimiter(Limiter):
    kind = "cgroup"
    can_remove = True

    def __init__(self, target: ServiceGroup) -> None:
        self.target = target
        level = target.levels[0] if target.levels else None
        self.directory: Path = level.directory if level is not None else target.directory
        self.group = level.group if level is not None else target.group
        self.version = target.version
        name = quota_file(self.directory, self.version).name
        if self.group in ("", "/"):
            raise LimiterError(f"{target.spec} is in the root cgroup ({self.directory}), which "
                               "cannot have a quota: run the service in a group of its own "
                               "(a systemd unit, a container)")
        if not quota_file(self.directory, self.version).exists():
            raise LimiterError(f"{self.directory} has no {name}: "
                               "no quota can be set on this group (cgroup v2: the parent's "
                               "cgroup.subtree_control does not enable 'cpu')")
        if not os.access(quota_file(self.directory, self.version), os.W_OK):
            raise LimiterError(f"cannot change {quota_file(self.directory, self.version)}: "
                               "permission denied (changing a cgroup's CPU limit needs root, or "
                               "a cgroup delegated to this user)")
        # the other levels above: the largest limit that can be in force
        self.above = [level for level in target.levels[1:]
                      if self.directory.is_relative_to(level.directory)]
        self.description = f"the quota file {quota_file(self.directory, self.version)}"
        self.names: dict[str, Any] = {"directory": str(self.directory), "version": self.version,
                                      "group": self.group}

    def ceiling(self) -> Limit | None:
        """The tightest quota above the written group (None: none)."""
        limits = [level.limit for level in self.above]
        return min(limits, key=lambda limit: limit.cpus) if limits else None

    def read(self) -> Limit | None:
        return read_quota(self.directory, self.version)

    def check(self, limit: Limit | None) -> None:
        if limit is None:
            return
        if problem := limit.kernel_problem():
            raise LimiterError(problem)
        if limit.burst_us and not burst_file(self.directory, self.version).exists():
            name = burst_file(self.directory, self.version).name
            raise LimiterError(f"this kernel has no {name} (a burst needs Linux 5.14+)")
        top = self.ceiling()
        if top is not None and limit.cpus > top.cpus + 1e-9:
            raise LimiterError(f"{limit.cpus:g} CPU is above the quota of {top.cpus:g} CPU the "
                               f"group {self.above[0].group} above holds: it could never be in "
                               "force")

    def apply(self, limit: Limit | None) -> None:
        write_quota(self.directory, self.version, limit)
        wait_for_quota(self.directory, self.version, limit, timeout=2.0)

    def restore_hint(self, limit: Limit | None) -> str:
        d = self.directory
        if self.version == 1:
            if limit is None:
                return f"echo -1 > {d}/cpu.cfs_quota_us"
            return (f"echo {limit.period_us} > {d}/cpu.cfs_period_us; echo {limit.quota_us} > "
                    f"{d}/cpu.cfs_quota_us")
        if limit is None:
            return f"echo max > {d}/cpu.max"
        return f"echo '{limit.quota_us} {limit.period_us}' > {d}/cpu.max"
