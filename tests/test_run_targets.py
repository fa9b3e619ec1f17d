"""client.run.targets: the backends' commands and checks (pure), and a service that fails to
start (a real process). Real sweeps over every backend are in tests/test_commands_sweep.py."""

from __future__ import annotations

import os
import sys

import pytest

from client.run.targets import AUTO, BACKENDS, TargetOptions, resolve_backend
from client.run.targets.docker import DockerBackend
from client.run.targets.inprocess import InProcessBackend
from client.run.targets.kernel import KernelBackend, kernel_quota_problem
from client.run.targets.replicas import ReplicaSet, starting_pool
from client.run.targets.service import ContainerService, ProcessService, ServiceError, free_port
from cpuquota.limit import Limit
from tests.support import gone

OPTIONS = TargetOptions(image="img:1")


def test_each_backend_starts_the_service_under_its_limit() -> None:
    kernel, inprocess, docker = (KernelBackend(OPTIONS), InProcessBackend(OPTIONS),
                                 DockerBackend(OPTIONS))
    assert kernel.argv(Limit(0.3), 8000, "bs") == [
        "bs", "--port", "8000", "--cpus", "0.3", "--log-level", "warning"]
    assert kernel.argv(Limit(0.3, 50, 10), 8000, "bs") == [
        "bs", "--port", "8000", "--cpus", "0.3", "--period-ms", "50", "--burst-ms", "10",
        "--log-level", "warning"]
    assert inprocess.argv(Limit(0.3), 8000, "bs") == [
        "bs", "--port", "8000", "--cpu-limit", "30", "--log-level", "warning"]
    assert inprocess.argv(Limit(0.3, 20), 8000, "bs")[3:7] == [
        "--cpu-limit", "30", "--throttle-cycle", "20"]
    assert inprocess.argv(None, 8000, "bs") == ["bs", "--port", "8000", "--log-level", "warning"]
    assert docker.argv(Limit(0.1), 8000, "c") == [
        "docker", "run", "--detach", "--name", "c", "--cpus", "0.1",
        "--publish", "127.0.0.1:8000:7800", "img:1", "--log-level", "warning"]
    assert docker.argv(Limit(0.5, 50), 8000)[3:7] == [
        "--cpu-period", "50000", "--cpu-quota", "25000"]
    container = docker.target(Limit(0.1), 8000, index=2)
    assert isinstance(container, ContainerService)
    assert container.container_name == f"throttle-lab-sweep-{os.getpid()}-2"
    health_timeout = TargetOptions().health_timeout
    assert health_timeout(None) == 30 and health_timeout(Limit(0.1)) == pytest.approx(45)
    assert TargetOptions(start_timeout=600).health_timeout(Limit(0.1)) == 600   # --start-timeout
    assert KernelBackend(TargetOptions(start_timeout=7)).target(Limit(0.5), 1).health_timeout == 7


def test_more_service_flags_come_after_each_backends_own() -> None:
    options = TargetOptions(image="img:1", service_args=("--max-counter", "9", "--log-level",
                                                         "info"))
    more = ["--log-level", "warning", "--max-counter", "9", "--log-level", "info"]
    assert KernelBackend(options).argv(Limit(0.3), 8000, "bs")[-6:] == more
    assert InProcessBackend(options).argv(None, 8000, "bs") == ["bs", "--port", "8000", *more]
    assert DockerBackend(options).argv(Limit(0.1), 8000)[-7:] == ["img:1", *more]
    assert KernelBackend(OPTIONS).argv(None, 8000, "bs")[-2:] == ["--log-level", "warning"]


def test_each_backend_refuses_what_it_cannot_set() -> None:
    KernelBackend(OPTIONS).check([Limit(4.0), None])
    with pytest.raises(ValueError, match="minimum is 1000 µs"):
        KernelBackend(OPTIONS).check([Limit(0.005)])
    InProcessBackend(OPTIONS).check([Limit(0.005), Limit(1.0)])  # its own accounting: any share
    with pytest.raises(ValueError, match="at most 1 CPU"):
        InProcessBackend(OPTIONS).check([Limit(1.0), Limit(2.0)])
    with pytest.raises(ValueError, match="no burst"):
        InProcessBackend(OPTIONS).check([Limit(0.3, burst_ms=5)])
    with pytest.raises(ValueError, match="above this machine's"):
        DockerBackend(OPTIONS).check([Limit(float((os.cpu_count() or 1) + 1))])
    with pytest.raises(ValueError, match="no burst flag"):
        DockerBackend(OPTIONS).check([Limit(0.3, burst_ms=5)])


def test_the_registry_and_auto() -> None:
    assert set(BACKENDS) == {"kernel", "inprocess", "docker"}
    for name, make in BACKENDS.items():
        assert make(OPTIONS).name == name and make(OPTIONS).description
    backend, why_not = resolve_backend(AUTO, OPTIONS)
    problem = kernel_quota_problem()
    assert backend.name == ("inprocess" if problem else "kernel") and why_not == problem
    docker, _ = resolve_backend("docker", OPTIONS)
    assert isinstance(docker, DockerBackend) and docker.image == "img:1"
    assert InProcessBackend(OPTIONS).problem() is None


def test_a_service_that_dies_at_start_is_one_clear_error() -> None:
    script = "import sys; print('cannot start: port taken'); sys.exit(3)"
    service = ProcessService([sys.executable, "-c", script], free_port(), health_timeout=20)
    with pytest.raises(ServiceError, match="exited with 3 before it was healthy: "
                                           "cannot start: port taken"):
        service.start()
    service.stop()
    assert service.pid is not None and gone(service.pid)
    assert service.ident == f"pid {service.pid}"


def test_a_service_is_stopped_by_its_pid_and_stopping_twice_is_safe() -> None:
    service = ProcessService.local(["--cpu-limit", "50"])
    with service:
        assert service.describe()["url"] == service.base_url and service.pid is not None
        pid = service.pid
    assert gone(pid)
    assert service.stop() == ""


def test_the_starting_pool_is_what_the_cpus_can_run() -> None:
    assert starting_pool(Limit(0.01), cpus=2) == 200   # fifty at 1 % all start at once
    assert starting_pool(Limit(1.0), cpus=2) == 2
    assert starting_pool(Limit(4.0), cpus=2) == 2      # start-up is one process: one CPU
    assert starting_pool(None, cpus=8) == 8


def test_a_replica_set_starts_all_and_stops_each_by_its_pid() -> None:
    started: list[tuple[int, int]] = []
    replicas = ReplicaSet(InProcessBackend(OPTIONS), Limit(0.5), 3, parallel=2,
                          on_started=lambda done, total: started.append((done, total)))
    with replicas:
        pids = [m.pid for m in replicas.members]
        assert len(set(replicas.urls)) == 3 and replicas.base_url == replicas.urls[0]
        assert all(pid is not None and not gone(pid) for pid in pids)
        assert started[-1] == (3, 3) and replicas.start_s is not None
        memory = replicas.memory_mib()
        assert len(memory) == 3 and all(20 < mib < 1000 for mib in memory)
        assert len(replicas.describe()["replicas"]) == 3
    assert all(gone(pid) for pid in pids if pid is not None)


def test_a_replica_that_fails_stops_the_others() -> None:
    class OneBad:
        """The in-process backend, but its second replica exits at once."""

        def target(self, limit: Limit | None, port: int, *, index: int = 1) -> ProcessService:
            if index == 2:
                return ProcessService([sys.executable, "-c", "raise SystemExit(4)"], port,
                                      health_timeout=20)
            return InProcessBackend(OPTIONS).target(limit, port, index=index)

    replicas = ReplicaSet(OneBad(), Limit(0.5), 3, parallel=3)
    with pytest.raises(ServiceError, match="exited with 4"):
        replicas.start()
    assert all(m.pid is None or gone(m.pid) for m in replicas.members)
