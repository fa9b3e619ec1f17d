"""A Docker container's limit in place (``--cgroup docker:NAME``): ``docker update --cpus``.

The engine writes the container's quota file (through runc); the limit is in force once that
file, in the group ``--cgroup docker:NAME`` resolves to, reads it back. ``docker update --cpus``
sets Docker's ``NanoCpus`` with its fixed 100 ms period, so only limits of that period are
offered (``check``). A container cannot be given "no limit" back through ``--cpus`` (the engine
treats 0 as "not given"), so the profile runs at the container's current limit and a container
without one is refused (there would be no way to put it back as it was).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.run.cgroup_lookup import CommandRunner
from client.run.service_group import ServiceGroup
from client.run.limiters.base import Limiter, LimiterError, read_quota, wait_for_quota
from cpuquota.limit import Limit

__all__ = ["DockerLimiter"]


class DockerLimiter(Limiter):
    kind = "docker"
    can_remove = False

    def __init__(self, target: ServiceGroup, run: CommandRunner) -> None:
        self.target, self.run = target, run
        self.name = target.spec.split(":", 1)[1]
        self.directory: Path = target.directory
        self.version = target.version
        self.description = f"docker update --cpus {self.name}"
        self.names: dict[str, Any] = {"name": self.name}

    def read(self) -> Limit | None:
        return read_quota(self.directory, self.version)

    def check(self, limit: Limit | None) -> None:
        if limit is None:
            raise LimiterError(f"docker update cannot take container {self.name}'s CPU limit "
                               "away once set (--cpus 0 means 'not given')")
        if limit.period_ms != 100:
            raise LimiterError(f"docker update --cpus sets a 100 ms period (asked: "
                               f"{limit.period_ms:g} ms)")
        if limit.burst_ms:
            raise LimiterError("docker has no setting for a burst (cpu.cfs_burst_us)")
        if problem := limit.kernel_problem():
            raise LimiterError(problem)

    def apply(self, limit: Limit | None) -> None:
        self.check(limit)
        assert limit is not None
        result = self.run(["docker", "update", "--cpus", f"{limit.cpus:.9g}", self.name])
        if result.returncode != 0:
            line = result.first_error_line()
            if "permission denied" in line.lower():
                raise LimiterError(f"docker update {self.name}: permission denied (root or the "
                                   "docker group may be needed)")
            raise LimiterError(f"docker update --cpus {limit.cpus:g} {self.name} failed: {line}")
        # docker rounds --cpus to whole nanocpus: the quota file says what is in force
        wait_for_quota(self.directory, self.version, Limit(limit.cpus, 100.0, 0.0, "cgroup"),
                       timeout=10.0)

    def restore_hint(self, limit: Limit | None) -> str:
        if limit is None:
            return f"docker update --cpus 0 {self.name} does not remove a limit"
        return f"docker update --cpus {limit.cpus:g} {self.name}"
