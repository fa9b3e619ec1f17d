"""The kernel backend: ``burn-service --cpus X``, a real CFS quota in a cgroup (Linux, root)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from client.run.targets.options import TargetOptions
from client.run.targets.service import ProcessService, burn_service_path
from cpuquota.limit import Limit

__all__ = ["KernelBackend", "kernel_quota_problem"]


def kernel_quota_problem() -> str | None:
    """Why ``burn-service --cpus`` cannot work here, or None when it should."""
    if not sys.platform.startswith("linux"):
        return f"kernel CPU quotas need Linux cgroups (this is {sys.platform})"
    if os.geteuid() != 0:
        return "creating a cgroup needs root"
    from cpuquota.cgroupfs import CgroupError, locate_cpu_controller

    try:
        directory = locate_cpu_controller().directory
    except CgroupError as exc:
        return str(exc)
    if not os.access(directory, os.W_OK):
        return f"the cgroup {directory} is not writable"
    return None


def limit_flags(limit: Limit | None, cpus_flag: str, cpus: str, period_flag: str) -> list[str]:
    """The service's flags for a limit; the period only when not the default 100 ms."""
    if limit is None:
        return []
    flags = [cpus_flag, cpus]
    if limit.period_ms != 100:
        flags += [period_flag, f"{limit.period_ms:g}"]
    return flags


class KernelBackend:
    name = "kernel"
    description = "kernel CPU quota (burn-service --cpus, a cgroup)"

    def __init__(self, options: TargetOptions) -> None:
        self.options = options

    def problem(self) -> str | None:
        problem = kernel_quota_problem()
        return (f"--backend kernel cannot work here: {problem}; use --backend inprocess "
                "(no root needed) or docker") if problem else None

    def check(self, limits: Sequence[Limit | None]) -> None:
        for limit in limits:
            if limit is not None and (problem := limit.kernel_problem()):
                raise ValueError(problem)

    def argv(self, limit: Limit | None, port: int, burn_service: str) -> list[str]:
        flags = limit_flags(limit, "--cpus", f"{limit.cpus:g}" if limit else "", "--period-ms")
        if limit is not None and limit.burst_ms:
            flags += ["--burst-ms", f"{limit.burst_ms:g}"]
        return [burn_service, "--port", str(port), *flags, "--log-level", "warning",
                *self.options.service_args]

    def target(self, limit: Limit | None, port: int, *, index: int = 1) -> ProcessService:
        return ProcessService(self.argv(limit, port, burn_service_path()), port,
                              health_timeout=self.options.health_timeout(limit))
