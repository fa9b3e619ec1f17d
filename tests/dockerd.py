"""Docker for the tests: a running engine, the project's image, containers removed by id.

``docker_engine()`` uses the engine that is already running, or starts ``dockerd`` itself and
stops that one (and only that one) by its pid at the end, then puts back what it changed on the
host (``kubenode.dockerhost``: ``ip_forward``, iptables, ``docker0``, runtime directories). ``project_image()`` builds the local
base (cached, ``docker/build-local-base.sh``) where no registry can be reached, the wheelhouse
(cached, ``docker/build-wheels.sh``) when the host's Python fits the base, then the image: the
service (the Dockerfile's default target) or, with ``target="client"``, the http-timing client.
Everything that cannot be had calls ``require()``: a skip with a reason on a laptop, a failure
under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from client.run.targets.service import stop_process
from kubenode import dockerhost
from tests.support import ROOT, require, wait_healthy

__all__ = ["TEST_CLIENT_IMAGE", "TEST_IMAGE", "BuildResult", "Container", "docker",
           "docker_engine", "engine_answers", "project_image", "run_container"]

DOCKERD = "/usr/sbin/dockerd"
LOCAL_BASE = "throttle-lab-base:bookworm"  # docker/build-local-base.sh's default name
LOCAL_BASE_PYTHON = (3, 11)                # Debian bookworm's python3
TEST_IMAGE = "throttle-lab:test"                # docker/Dockerfile's target `service`
TEST_CLIENT_IMAGE = "throttle-lab-client:test"  # its target `client`


def docker(*args: str, timeout: float = 120, check: bool = True,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the docker client; on failure raise with its output (no half-silent errors)."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} exited {proc.returncode}:\n"
                           f"{_tail(proc.stdout)}\n{_tail(proc.stderr)}")
    return proc


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def engine_answers() -> bool:
    try:
        return docker("info", "--format", "{{.ServerVersion}}", timeout=20, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@contextmanager
def docker_engine(start_timeout: float = 60.0) -> Iterator[None]:
    """A Docker engine that answers; started here (and stopped by pid) only if none runs."""
    require(shutil.which("docker") is not None, "no docker client on PATH")
    if engine_answers():
        yield
        return
    require(os.geteuid() == 0, "no Docker engine running and starting dockerd needs root")
    require(Path(DOCKERD).exists(),
            f"no Docker engine running and no {DOCKERD} (scripts/install-system-deps.sh installs docker.io)")
    log = tempfile.NamedTemporaryFile(prefix="dockerd-", suffix=".log", delete=False)
    before = dockerhost.snapshot()   # what dockerd changes on the host, put back at the end
    proc = subprocess.Popen([DOCKERD], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while not engine_answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                text = Path(log.name).read_text(errors="replace")
                require(False, f"dockerd did not start (exit {proc.poll()}): {_tail(text, 8)}")
            time.sleep(0.5)
        yield
    finally:
        stop_process(proc, timeout=60)  # only the engine this fixture started
        log.close()
        os.unlink(log.name)
        dockerhost.put_back(before, log=lambda line: print(line, flush=True))


@dataclass(frozen=True)
class BuildResult:
    image: str
    base: str
    wheelhouse: bool
    seconds: dict[str, float]  # step -> wall seconds (base, wheels, image)


def _local_base() -> str | None:
    """The locally built base (built now if possible, cached), or None to use the default."""
    explicit = os.environ.get("THROTTLE_LAB_DOCKER_BASE")
    if explicit:
        return explicit
    have_it = docker("image", "inspect", LOCAL_BASE, check=False).returncode == 0
    if not have_it and (os.geteuid() != 0 or shutil.which("debootstrap") is None):
        return None  # use the Dockerfile's default (an official image from a registry)
    proc = subprocess.run(["bash", str(ROOT / "docker" / "build-local-base.sh")],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"build-local-base.sh failed:\n{_tail(proc.stderr)}")
    return proc.stdout.strip().splitlines()[-1]


def project_image(tag: str = TEST_IMAGE, target: str = "service") -> BuildResult:
    """Build one of the project's images from docker/Dockerfile (layers cached by the engine)."""
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    base = _local_base()
    seconds["base"] = time.monotonic() - t0
    wheelhouse = base is not None and sys.version_info[:2] == LOCAL_BASE_PYTHON
    if wheelhouse:
        t0 = time.monotonic()
        proc = subprocess.run(["bash", str(ROOT / "docker" / "build-wheels.sh"), sys.executable],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"build-wheels.sh failed:\n{_tail(proc.stderr)}")
        seconds["wheels"] = time.monotonic() - t0
    args = ["build", "--force-rm", "--target", target, "-t", tag,
            "-f", str(ROOT / "docker" / "Dockerfile")]
    if base is not None:
        args += ["--build-arg", f"BASE={base}"]
    t0 = time.monotonic()
    proc = docker(*args, str(ROOT), timeout=900, check=False)
    seconds["image"] = time.monotonic() - t0
    if proc.returncode != 0:
        output = _tail(proc.stdout) + "\n" + _tail(proc.stderr)
        if base is None and ("pull access denied" in output or "failed to resolve" in output
                             or "dial tcp" in output or "TLS" in output):
            require(False, "the default base image cannot be pulled and no local base can be "
                           "built here (needs root and debootstrap)")
        raise RuntimeError(f"docker build failed:\n{output}")
    return BuildResult(tag, base or "(Dockerfile default)", wheelhouse, seconds)


@dataclass(frozen=True)
class Container:
    id: str
    base_url: str

    def exec(self, *command: str) -> str:
        return docker("exec", self.id, *command, timeout=60).stdout


@contextmanager
def run_container(image: str, docker_args: Sequence[str] = (),
                  command: Sequence[str] = ()) -> Iterator[Container]:
    """``docker run -d`` hardened the way the docs say (read-only root, /tmp a tmpfs, no
    capabilities), port 7800 published on a free loopback port; removed by id at the end."""
    cid = docker("run", "-d", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
                 "--security-opt", "no-new-privileges", "-p", "127.0.0.1::7800",
                 *docker_args, image, *command).stdout.strip()
    try:
        address = docker("port", cid, "7800/tcp").stdout.strip().splitlines()[0]
        base_url = "http://" + address.replace("0.0.0.0", "127.0.0.1")
        try:
            wait_healthy(base_url, timeout=60)
        except RuntimeError:
            logs = docker("logs", cid, check=False)
            raise RuntimeError(f"container not healthy:\n{_tail(logs.stdout)}\n{_tail(logs.stderr)}")
        yield Container(cid, base_url)
    finally:
        docker("rm", "-f", "-v", cid, check=False)
