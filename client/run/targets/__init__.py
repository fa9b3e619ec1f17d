"""Targets: what a run measures, started under a CPU limit and stopped by its own id.

A **backend** (one module each) knows how to run the burn service under a
:class:`cpuquota.limit.Limit` (or none): ``problem()`` says why it cannot work on this machine,
``check(limits)`` refuses limits it cannot set, and ``target(limit, ...)`` makes a
:class:`Target` (a :class:`client.run.targets.service.Service`: ``start()`` once healthy,
``base_url``, ``stop()`` by pid or container id). ``BACKENDS`` is the registry of backend
classes, each made from the same :class:`TargetOptions`: a new backend is one module and one
line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from client.run.targets.docker import DockerBackend
from client.run.targets.inprocess import InProcessBackend
from client.run.targets.kernel import KernelBackend, kernel_quota_problem
from client.run.targets.options import TargetOptions
from client.run.targets.service import Service, ServiceError
from cpuquota.limit import Limit

__all__ = ["AUTO", "BACKENDS", "Backend", "Service", "ServiceError", "Target", "TargetOptions",
           "resolve_backend"]

AUTO = "auto"
Target = Service


class Backend(Protocol):
    name: str
    description: str  # e.g. "kernel CPU quota (burn-service --cpus, a cgroup)"

    def problem(self) -> str | None:
        """Why this backend cannot work here (one line), or None."""

    def check(self, limits: Sequence[Limit | None]) -> None:
        """``ValueError`` (one line) for a limit this backend cannot set."""

    def target(self, limit: Limit | None, port: int, *, index: int = 1) -> Target:
        """The service under ``limit`` on 127.0.0.1:``port``; not started yet."""


BACKENDS: dict[str, Callable[[TargetOptions], Backend]] = {
    "kernel": KernelBackend,
    "inprocess": InProcessBackend,
    "docker": DockerBackend,
}


def resolve_backend(name: str, options: TargetOptions | None = None
                    ) -> tuple[Backend, str | None]:
    """The backend called ``name``; ``auto``: the kernel where permitted, else in-process,
    with the reason why not."""
    options = options or TargetOptions()
    if name == AUTO:
        kernel = BACKENDS["kernel"](options)
        problem = kernel_quota_problem()
        return (BACKENDS["inprocess"](options), problem) if problem else (kernel, None)
    return BACKENDS[name](options), None
