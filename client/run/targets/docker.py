"""The docker backend: ``docker run --cpus X`` of the project's image (a real CFS quota set by
the Docker engine, as in production)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from client.data.naming import limit_tag
from client.run.targets.options import TargetOptions
from client.run.targets.service import ContainerService
from cpuquota.limit import Limit

__all__ = ["CONTAINER_PORT", "DockerBackend", "docker_problem"]

CONTAINER_PORT = 7800                  # the image's BURN_SERVICE_PORT


def docker_problem(image: str) -> str | None:
    """Why ``docker run IMAGE`` cannot work here, or None when it should."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the Docker engine does not answer (docker info timed out)"
    if info.returncode != 0:
        return "no Docker engine is running (docker info failed)"
    found = subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                           text=True, timeout=20)
    if found.returncode != 0:
        return (f"no image {image}: build it with `docker build -t {image} -f docker/Dockerfile .`"
                " (see docker/) or pass --image")
    return None


class DockerBackend:
    name = "docker"
    description = "docker run --cpus"

    def __init__(self, options: TargetOptions) -> None:
        self.options = options
        self.image = options.image
        self.service_args = options.service_args

    def problem(self) -> str | None:
        problem = docker_problem(self.image)
        return f"--backend docker cannot work here: {problem}" if problem else None

    def check(self, limits: Sequence[Limit | None]) -> None:
        available = os.cpu_count() or 1
        too_many = [limit for limit in limits if limit is not None and limit.cpus > available]
        if too_many:
            raise ValueError(f"docker refuses --cpus above this machine's {available} CPUs "
                             f"(got {', '.join(map(limit_tag, too_many))})")
        for limit in limits:
            if limit is not None and (problem := limit.kernel_problem()):
                raise ValueError(problem)
        if any(limit is not None and limit.burst_ms for limit in limits):
            raise ValueError("docker run has no burst flag: use --backend kernel for --burst-ms")

    def argv(self, limit: Limit | None, port: int, container_name: str | None = None) -> list[str]:
        name = ["--name", container_name] if container_name else []
        if limit is None:
            flags: list[str] = []
        elif limit.period_ms == 100:
            flags = ["--cpus", f"{limit.cpus:g}"]
        else:  # docker --cpus always means a 100 ms period; the kernel's numbers say more
            flags = ["--cpu-period", str(limit.period_us), "--cpu-quota", str(limit.quota_us)]
        return ["docker", "run", "--detach", *name, *flags,
                "--publish", f"127.0.0.1:{port}:{CONTAINER_PORT}", self.image,
                "--log-level", "warning", *self.service_args]

    def target(self, limit: Limit | None, port: int, *, index: int = 1) -> ContainerService:
        name = f"throttle-lab-sweep-{os.getpid()}-{index}"
        return ContainerService(self.argv(limit, port, name), port,
                                health_timeout=self.options.health_timeout(limit))
