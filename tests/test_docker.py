"""The Docker image for real: build it, run it with ``--cpus 0.3`` and without, time both with
``http-timing``, and see the kernel's quota stall only in the limited one.

Needs a Docker engine (started here as root if none runs, and stopped again by its pid).
The local base image is built once and cached; containers are removed by id, images stay.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cpuquota.account import CpuStat
from cpuquota.cgroupfs import (
    find_cpu_controller,
    parse_cpu_stat,
    read_text,
)
from tests.dockerd import (
    TEST_CLIENT_IMAGE,
    BuildResult,
    Container,
    docker,
    docker_engine,
    project_image,
    run_container,
)
from tests.support import BIN, ROOT, free_port, require, wait_healthy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

REQUEST_CPU_MS = 8.0  # each request burns about this much CPU: ~4 fit in one 30 ms quota,
REQUESTS = 150        # so roughly every fourth request waits for the next period


@pytest.fixture(scope="module")
def engine() -> Iterator[None]:
    with docker_engine():
        yield


@pytest.fixture(scope="module")
def image(engine: None) -> BuildResult:
    result = project_image()
    print(f"\nimage {result.image} from {result.base} (wheelhouse: {result.wheelhouse}); "
          + ", ".join(f"{step} {s:.1f} s" for step, s in result.seconds.items()))
    return result


@pytest.fixture(scope="module")
def client_image(engine: None) -> BuildResult:
    result = project_image(TEST_CLIENT_IMAGE, target="client")
    print(f"\nimage {result.image} (target client): "
          + ", ".join(f"{step} {s:.1f} s" for step, s in result.seconds.items()))
    return result


@pytest.fixture(scope="module")
def limited(image: BuildResult) -> Iterator[Container]:
    with run_container(image.image, ["--cpus", "0.3"]) as container:
        yield container


@pytest.fixture(scope="module")
def limitless(image: BuildResult) -> Iterator[Container]:
    with run_container(image.image) as container:
        yield container


def calibrate_iterations(container: Container, cpu_ms: float = REQUEST_CPU_MS) -> int:
    """Iterations that burn about ``cpu_ms`` of CPU on this machine (asked of an unlimited
    container, so that the request size, not the CPU model, decides how often a quota runs out)."""
    probe = 20000
    cpu_ns = min(httpx.get(container.base_url + "/cpuBurnFlow", params={"iterations": probe},
                           timeout=30).json()["cpu_ns"] for _ in range(5))
    return max(1000, min(1_000_000, round(probe * cpu_ms * 1e6 / max(cpu_ns, 1))))


def container_cpu_stat(container: Container) -> CpuStat:
    """The container's cpu.stat, read from the host: its group from ``/proc/<pid>/cgroup``,
    found in the host's mounts."""
    pid = docker("inspect", "-f", "{{.State.Pid}}", container.id).stdout.strip()
    controller = find_cpu_controller(read_text(f"/proc/{pid}/cgroup"),
                                     read_text("/proc/self/mountinfo"))
    assert controller is not None, f"no cpu controller for the container's pid {pid}"
    group = controller.directory
    stat = parse_cpu_stat(read_text(group / "cpu.stat"), controller.version)
    assert stat is not None, f"{group}/cpu.stat has no bandwidth counters"
    return stat


def time_run(container: Container, name: str, data_dir: Path,
             iterations: int) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """``http-timing`` against the container, then ``http-timing report --json``."""
    run = subprocess.run([str(BIN / "http-timing"), "--url", container.base_url + "/cpuBurnFlow",
                          "--iterations", str(iterations), "--requests", str(REQUESTS),
                          "--name", name, "--data-dir", str(data_dir),
                          "--pictures-dir", str(data_dir), "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"http-timing exited {run.returncode}: {run.stdout}{run.stderr}"
    report = subprocess.run([str(BIN / "http-timing"), "report", str(data_dir / f"{name}.csv"),
                             "--json"], capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, f"http-timing report: {report.stderr}"
    with open(data_dir / f"{name}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return json.loads(report.stdout), rows


def test_image_metadata(image: BuildResult) -> None:
    config = json.loads(docker("image", "inspect", image.image).stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    assert "7800/tcp" in config["ExposedPorts"]
    assert config["Entrypoint"] == ["burn-service"]
    assert config["Env"] and "BURN_SERVICE_HOST=0.0.0.0" in config["Env"]
    health = " ".join(config["Healthcheck"]["Test"])
    assert "/healthz" in health and "curl" not in health


def _importable(image: str, modules: tuple[str, ...]) -> list[str]:
    code = ("import importlib.util, sys; "
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))")
    out = docker("run", "--rm", "--entrypoint", "python", image, "-c", code, *modules).stdout
    return out.split()


def test_service_image_holds_the_service_only(image: BuildResult,
                                              client_image: BuildResult) -> None:
    """The service image has the `service` extra and no client dependencies; the client image
    the reverse. Both images' lists come from pyproject.toml."""
    client_side = ("numpy", "matplotlib", "httpx", "rich")
    service_side = ("fastapi", "uvicorn", "prometheus_client", "jinja2")
    assert _importable(image.image, client_side + service_side) == list(service_side)
    assert _importable(client_image.image, client_side + service_side) == list(client_side)
    config = json.loads(docker("image", "inspect", client_image.image).stdout)[0]["Config"]
    assert config["User"] == "10001:10001" and config["Entrypoint"] == ["http-timing"]
    help_text = docker("run", "--rm", "--read-only", "--tmpfs", "/tmp", client_image.image,
                       "--help").stdout
    assert "http-timing" in help_text
    sizes = {r.image: int(docker("image", "inspect", "-f", "{{.Size}}", r.image).stdout)
             for r in (image, client_image)}
    print("\n" + ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in sizes.items()))


def test_container_runs_as_non_root_on_a_read_only_root(limitless: Container) -> None:
    assert limitless.exec("id", "-u").strip() == "10001"
    denied = docker("exec", limitless.id, "sh", "-c", "touch /opt/venv/x", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr
    limitless.exec("sh", "-c", "touch /tmp/x")  # /tmp stays writable
    assert httpx.get(limitless.base_url + "/cpuBurnFlow", params={"iterations": 1000}).json()[
        "result"] == "success"


def test_healthcheck_turns_healthy(image: BuildResult) -> None:
    # A short interval so that the image's own HEALTHCHECK command runs within the test.
    with run_container(image.image, ["--health-interval", "1s"]) as container:
        deadline = time.monotonic() + 60
        status = ""
        while time.monotonic() < deadline:
            status = docker("inspect", "-f", "{{.State.Health.Status}}", container.id).stdout.strip()
            if status in ("healthy", "unhealthy"):
                break
            time.sleep(0.5)
    assert status == "healthy"


def test_limits_report_the_engine_quota(limited: Container, limitless: Container) -> None:
    cgroup = httpx.get(limited.base_url + "/limits").json()["cgroup"]
    assert cgroup["quota_us"] == 30000
    assert cgroup["period_us"] == 100000
    assert httpx.get(limitless.base_url + "/limits").json()["cgroup"]["quota_us"] is None


def test_quota_stalls_the_limited_container_only(limited: Container, limitless: Container,
                                                 tmp_path: Path) -> None:
    """The kernel stops the --cpus 0.3 container and never the free one, and the requests say
    so: one run of each, judged by the containers' own cpu.stat read from the host. How long
    the stalls were against the free run's latencies is printed, not judged: a busy machine
    blurs both (docs/benchmarks.md has the figures)."""
    iterations = calibrate_iterations(limitless)
    kernel = {"free": container_cpu_stat(limitless), "before": container_cpu_stat(limited)}
    free, free_rows = time_run(limitless, "docker-limitless", tmp_path, iterations)
    slow, slow_rows = time_run(limited, "docker-limited", tmp_path, iterations)
    kernel["after"] = container_cpu_stat(limited)
    print(f"\n{iterations} iterations; --cpus 0.3: p50 {slow['p50_ms']:.1f} ms "
          f"p90 {slow['p90_ms']:.1f} ms max {slow['max_ms']:.1f} ms | no limit: "
          f"p50 {free['p50_ms']:.1f} ms p90 {free['p90_ms']:.1f} ms max {free['max_ms']:.1f} ms")
    assert free["count"] == slow["count"] == REQUESTS
    assert free["errors"] == slow["errors"] == 0
    # The requests ran one at a time, so a period throttled during one is counted by that
    # request alone: the rows add up to no more than the kernel's count, and to most of it (a
    # period can also run out between two requests, or in the health check).
    periods = kernel["after"].nr_throttled - kernel["before"].nr_throttled
    seen = sum(int(r["kernel_nr_throttled"] or 0) for r in slow_rows)
    delayed = sum(1 for r in slow_rows if int(r["kernel_nr_throttled"] or 0) > 0)
    counts = (f"the container's cpu.stat: {periods} periods throttled; the rows: {seen} "
              f"periods in {delayed} requests delayed by throttling")
    print(counts)
    assert periods >= 1 and delayed >= 1, counts
    assert delayed <= seen <= periods, counts
    assert seen >= periods / 2, counts
    # the free container has no quota: no period of it was throttled, no request claims one
    free_after = container_cpu_stat(limitless)
    assert free_after.nr_throttled == kernel["free"].nr_throttled == 0, free_after
    assert all(int(r["kernel_nr_throttled"] or 0) == 0 for r in free_rows)


def _compose_command() -> list[str] | None:
    if docker("compose", "version", check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_pair(image: BuildResult, client_image: BuildResult) -> None:
    compose = _compose_command()
    require(compose is not None, "neither `docker compose` nor docker-compose is installed")
    assert compose is not None
    ports = {"limited": free_port(), "limitless": free_port()}
    env = {**os.environ, "THROTTLE_LAB_IMAGE": image.image,
           "THROTTLE_LAB_CLIENT_IMAGE": client_image.image,
           "LIMITED_PORT": str(ports["limited"]), "LIMITLESS_PORT": str(ports["limitless"])}
    project = f"throttle-lab-test-{os.getpid()}"
    base = [*compose, "-f", str(ROOT / "docker" / "compose.yaml"), "-p", project]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=180)

    up = run("up", "-d", "--no-build")
    try:
        assert up.returncode == 0, up.stderr
        quotas = {}
        for name, port in ports.items():
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, timeout=60)
            quotas[name] = httpx.get(url + "/limits").json()["cgroup"]["quota_us"]
        assert quotas == {"limited": 30000, "limitless": None}
        # the client image, profile `client`, times `limited` by its name on the project network
        timed = run("run", "--rm", "client", "--url", "http://limited:7800/cpuBurnFlow",
                    "--requests", "5", "--iterations", "1000", "--name", "compose-limited",
                    "--no-plot")
        assert timed.returncode == 0, timed.stdout + timed.stderr
        assert timed.stdout.count("Status code 200") == 5, timed.stdout
    finally:
        down = run("down", "--volumes", "--remove-orphans")
        assert down.returncode == 0, down.stderr


def _job_container(rendered: str) -> dict[str, Any]:
    job = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job")
    return job["spec"]["template"]["spec"]["containers"][0]


def test_k8s_job_script_times_both_services(image: BuildResult,
                                            client_image: BuildResult) -> None:
    """The k8s Job's own command, run in Docker on a network where the two containers answer
    to the Services' names (no cluster here; the same images, script and environment)."""
    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl is not installed (it renders the Job from k8s/)")
    assert kubectl is not None
    rendered = subprocess.run([kubectl, "kustomize", str(ROOT / "k8s")], check=True,
                              capture_output=True, text=True, timeout=120).stdout
    job = _job_container(rendered)
    env = {e["name"]: e["value"] for e in job["env"]} | {"REQUESTS": "40"}
    network = docker("network", "create", f"throttle-lab-test-{os.getpid()}").stdout.strip()
    try:
        with run_container(image.image, ["--network", network, "--network-alias", "limited",
                                         "--cpus", "0.3"]), \
             run_container(image.image, ["--network", network, "--network-alias", "limitless"]):
            env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
            cid = docker("run", "-d", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
                         "--security-opt", "no-new-privileges", "--network", network,
                         *env_args, "--entrypoint", job["command"][0], client_image.image,
                         *job["command"][1:], *job["args"]).stdout.strip()
            try:
                status = docker("wait", cid, timeout=240).stdout.strip()
                logs = docker("logs", cid)
            finally:
                docker("rm", "-f", cid, check=False)
    finally:
        docker("network", "rm", network, check=False)
    output = logs.stdout + logs.stderr
    assert status == "0", output
    for svc in ("limited", "limitless"):
        assert f"run: {svc}" in output, output
    assert output.count("errors 0 of 40") == 2, output
    assert "0.3 CPU" in output.split("run: limitless")[0]  # the limited run saw its quota
