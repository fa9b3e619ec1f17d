"""The in-process backend: ``burn-service --cpu-limit X*100``, the service's own duty-cycle
throttle (any OS, no root; at most 1 CPU, per worker process)."""

from __future__ import annotations

from collections.abc import Sequence

from client.data.naming import limit_tag
from client.run.targets.kernel import limit_flags
from client.run.targets.options import TargetOptions
from client.run.targets.service import ProcessService, burn_service_path
from cpuquota.limit import Limit

__all__ = ["InProcessBackend"]


class InProcessBackend:
    name = "inprocess"
    description = "in-process throttle (burn-service --cpu-limit)"

    def __init__(self, options: TargetOptions) -> None:
        self.options = options

    def problem(self) -> str | None:
        return None

    def check(self, limits: Sequence[Limit | None]) -> None:
        too_many = [limit for limit in limits if limit is not None and limit.cpus > 1]
        if too_many:
            raise ValueError(f"--backend inprocess limits one process to at most 1 CPU "
                             f"(--cpu-limit 100 %); got {', '.join(map(limit_tag, too_many))}: "
                             "use --backend kernel or docker for more")
        if any(limit is not None and limit.burst_ms for limit in limits):
            raise ValueError("--backend inprocess has no burst (burn-service has no flag for "
                             "it): use --backend kernel")

    def argv(self, limit: Limit | None, port: int, burn_service: str) -> list[str]:
        percent = f"{limit.cpus * 100:g}" if limit else ""
        flags = limit_flags(limit, "--cpu-limit", percent, "--throttle-cycle")
        return [burn_service, "--port", str(port), *flags, "--log-level", "warning",
                *self.options.service_args]

    def target(self, limit: Limit | None, port: int, *, index: int = 1) -> ProcessService:
        return ProcessService(self.argv(limit, port, burn_service_path()), port,
                              health_timeout=self.options.health_timeout(limit))
