"""The project's own images in the node: built from docker/Dockerfile (on a local Debian base
where no registry is reachable, as the Docker tests do), then ``docker save`` piped into the
node's containerd. The names are those k8s/kustomization.yaml gives the pods."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from kubenode import dockerhost
from kubenode.images import ctr_binary, ctr_images
from kubenode.proc import run, start_time, stop_pid

__all__ = ["SERVICE_IMAGE", "CLIENT_IMAGE", "docker_engine", "engine_answers", "build_project_images",
           "import_images", "apt_mirror"]

SERVICE_IMAGE = "throttle-lab:latest"          # docker/Dockerfile's target `service`
CLIENT_IMAGE = "throttle-lab-client:latest"    # its target `client`
LOCAL_BASE_PYTHON = (3, 11)                    # Debian bookworm's python3
Log = Callable[[str], None]


def engine_answers() -> bool:
    try:
        return run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False,
                   timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@contextmanager
def docker_engine(log: Log = print) -> Iterator[None]:
    """The Docker engine that runs, or one started here and stopped again by its pid, with
    what it changed on the host put back (:mod:`kubenode.dockerhost`)."""
    if shutil.which("docker") is None:
        raise RuntimeError("no docker client (scripts/install-system-deps.sh installs docker.io)")
    if engine_answers():
        yield
        return
    if not Path("/usr/sbin/dockerd").exists():
        raise RuntimeError("no Docker engine (scripts/install-system-deps.sh installs docker.io)")
    log("starting dockerd for the image builds")
    before = dockerhost.snapshot()   # what dockerd changes on the host, put back at the end
    proc = subprocess.Popen(["/usr/sbin/dockerd"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not engine_answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dockerd did not start")
            time.sleep(0.5)
        yield
    finally:
        stop_pid(proc.pid, start_time(proc.pid), timeout=60)
        proc.wait()
        dockerhost.put_back(before, log)


def apt_mirror() -> str | None:
    """The Debian mirror apt uses here (the first URIs line of its deb822 sources)."""
    for source in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1:]:
                return line.split()[1]
    return None


def build_project_images(root: Path, log: Log = print) -> dict[str, float]:
    """Build the service and the client image; return the seconds of each part."""
    seconds: dict[str, float] = {}
    env = dict(os.environ)
    mirror = apt_mirror()
    if mirror and "DEBIAN_MIRROR" not in env:
        env["DEBIAN_MIRROR"] = mirror
    t0 = time.monotonic()
    base = subprocess.run(["bash", str(root / "docker" / "build-local-base.sh")],
                          capture_output=True, text=True, timeout=900, env=env)
    if base.returncode != 0:
        raise RuntimeError(f"docker/build-local-base.sh failed: {base.stderr.strip()[-800:]}")
    base_image = base.stdout.strip().splitlines()[-1]
    seconds["base"] = time.monotonic() - t0
    if sys.version_info[:2] == LOCAL_BASE_PYTHON:
        t0 = time.monotonic()
        run(["bash", str(root / "docker" / "build-wheels.sh"), sys.executable], timeout=900)
        seconds["wheels"] = time.monotonic() - t0
    for tag, target in ((SERVICE_IMAGE, "service"), (CLIENT_IMAGE, "client")):
        t0 = time.monotonic()
        log(f"docker build --target {target} -t {tag}")
        run(["docker", "build", "--force-rm", "--target", target, "-t", tag, "--build-arg",
             f"BASE={base_image}", "-f", str(root / "docker" / "Dockerfile"), str(root)],
            timeout=1200)
        seconds[target] = time.monotonic() - t0
    return seconds


def import_images(address: str, tags: list[str], log: Log = print) -> None:
    """``docker save TAG | ctr -n k8s.io images import -`` for each tag whose image id is not
    already in the node's containerd."""
    have = ctr_images(address)
    for tag in tags:
        image_id = run(["docker", "image", "inspect", "--format", "{{.Id}}", tag]).stdout.strip()
        if image_id in have:
            continue
        log(f"importing {tag} into the node")
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
        try:
            load = subprocess.run([ctr_binary(), "--address", address, "-n", "k8s.io", "images",
                                   "import", "-"], stdin=save.stdout, capture_output=True,
                                  text=True, timeout=900)
        finally:
            assert save.stdout is not None
            save.stdout.close()
            save_rc = save.wait()
        if save_rc != 0 or load.returncode != 0:
            raise RuntimeError(f"importing {tag} failed: {load.stderr.strip()[-400:]}")
