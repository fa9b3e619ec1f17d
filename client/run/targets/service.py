"""A service that a run starts and stops itself: a child process or a container.

A :class:`Service` runs a command that serves on ``127.0.0.1:<port>``. ``start()`` returns once
``/healthz`` answers and fails early, with the service's last words, when it exits; ``stop()``
ends exactly what was started, by its pid (SIGTERM, then SIGKILL) or its container id (stop,
then remove), and is safe to call twice. Two kinds, one interface:

- :class:`ProcessService`: ``burn-service ...`` (or any command) as a child process, its
  output kept for error messages; ``ProcessService.local(args)`` = burn-service on a free port.
- :class:`ContainerService`: ``docker run --detach ...``, stopped and removed by its id (or by
  the unique name given to it, if ``docker run`` was cut short).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

__all__ = ["ContainerService", "ProcessService", "Service", "ServiceError", "burn_service_path",
           "free_port", "stop_process"]


class ServiceError(RuntimeError):
    """The service could not be started or did not become healthy (one line, with its log)."""


def burn_service_path() -> str:
    """The ``burn-service`` next to this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "burn-service"
    if beside.exists():
        return str(beside)
    found = shutil.which("burn-service")
    if found is None:
        raise ServiceError("burn-service not found next to this Python nor on PATH "
                           "(pip install -e '.[service]' installs it)")
    return found


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM ``proc`` (by its own pid), wait up to ``timeout`` s, then SIGKILL; reaped."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# Below the kernel's ephemeral range (the local ports of outgoing connections, 32768 and up by
# default) and below Kubernetes' NodePorts (30000-32767): a port picked there is not taken by a
# client's connection between the pick and the service's bind, as one from bind(0) can be on a
# busy machine ("address already in use").
PORT_RANGE = (15000, 30000)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now: a random one of :data:`PORT_RANGE`
    (below the ephemeral range), else one the kernel picks."""
    high = min(PORT_RANGE[1], _ephemeral_low())
    pick = random.SystemRandom()
    for _ in range(64):
        port = pick.randrange(PORT_RANGE[0], high) if high > PORT_RANGE[0] else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    tail = " | ".join(lines[-3:])
    return tail[-limit:]


class Service:
    """What both kinds share: the command, the URL, waiting for ``/healthz``."""

    def __init__(self, argv: Sequence[str], port: int, *, health_timeout: float = 60.0) -> None:
        self.argv = list(argv)
        self.port = port
        self.health_timeout = health_timeout
        self.base_url = f"http://127.0.0.1:{port}"
        self.pid: int | None = None
        self.container: str | None = None

    # -- what each kind does -------------------------------------------------------------

    def launch(self) -> None:
        """Start it (quickly: a process, a detached container); ``wait_healthy`` then waits."""
        raise NotImplementedError

    def _exited(self) -> str | None:
        """Why the service is gone, or None while it runs."""
        raise NotImplementedError

    def memory_mib(self) -> float | None:
        """What it holds in memory now (resident set, MiB); None when it cannot be read."""
        raise NotImplementedError

    def log(self) -> str:
        """What the service printed (for error messages)."""
        raise NotImplementedError

    def stop(self) -> str:
        """Stop what was started; returns the service's last words (e.g. a cgroup summary)."""
        raise NotImplementedError

    @property
    def ident(self) -> str:
        """``pid 1234`` or ``container 0123456789ab``."""
        return f"container {self.container[:12]}" if self.container else f"pid {self.pid}"

    @property
    def urls(self) -> list[str]:
        """Where requests go: this one service."""
        return [self.base_url]

    # -- shared ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"command": self.argv, "pid": self.pid, "container": self.container,
                "url": self.base_url}

    def start(self) -> Service:
        self.launch()
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        """Return once ``/healthz`` answers; ``ServiceError`` when it exits or times out."""
        deadline = time.monotonic() + self.health_timeout
        next_check = 0.0
        while True:
            try:
                if httpx.get(self.base_url + "/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            now = time.monotonic()
            if now >= next_check:  # docker inspect is slow: look every second
                gone = self._exited()
                if gone:
                    raise ServiceError(f"the service {gone} before it was healthy: "
                                       f"{_one_line(self.log())}")
                next_check = now + 1.0
            if now > deadline:
                raise ServiceError(f"the service did not answer {self.base_url}/healthz within "
                                   f"{self.health_timeout:g} s: {_one_line(self.log())}")
            time.sleep(0.1)

    def __enter__(self) -> Service:
        try:
            return self.start()
        except BaseException:  # e.g. not healthy in time: __exit__ will not run, stop it here
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class ProcessService(Service):
    """A child process, stopped by its pid."""

    def __init__(self, argv: Sequence[str], port: int, *, health_timeout: float = 60.0) -> None:
        super().__init__(argv, port, health_timeout=health_timeout)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @classmethod
    def local(cls, args: Sequence[str] = (), *, health_timeout: float = 60.0) -> ProcessService:
        """``burn-service --port <free port> --log-level warning ARGS``; not started yet."""
        port = free_port()
        return cls([burn_service_path(), "--port", str(port), "--log-level", "warning", *args],
                   port, health_timeout=health_timeout)

    def launch(self) -> None:
        self._log = tempfile.TemporaryFile(prefix="burn-service-")
        self._proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
        self.pid = self._proc.pid

    def _exited(self) -> str | None:
        if self._proc is not None and self._proc.poll() is not None:
            return f"exited with {self._proc.returncode}"
        return None

    def memory_mib(self) -> float | None:
        """The resident memory of the process and its children (``burn-service --cpus`` is a
        supervisor and the service), from ``/proc``."""
        if self.pid is None:
            return None
        total_kib, pending, seen = 0, [self.pid], set()
        while pending:
            pid = pending.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total_kib += _rss_kib(pid)
            pending.extend(_children(pid))
        return total_kib / 1024 if total_kib else None

    def log(self) -> str:
        if self._log is not None and not self._log.closed:
            self._log.seek(0)
            return self._log.read().decode("utf-8", "replace")
        return ""

    def stop(self) -> str:
        words = ""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            # burn-service --cpus forwards SIGTERM to the service and removes its cgroup
            stop_process(proc, timeout=20)
            words = self.log()
        if self._log is not None:
            self._log.close()
            self._log = None
        return words


class ContainerService(Service):
    """A container started with ``docker run --detach [--name NAME] ...``, stopped and
    removed by its id."""

    def __init__(self, argv: Sequence[str], port: int, *, health_timeout: float = 60.0) -> None:
        super().__init__(argv, port, health_timeout=health_timeout)
        self.container_name = _option(self.argv, "--name")
        self._started = False

    def launch(self) -> None:
        self._started = True
        done = subprocess.run(self.argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ServiceError(f"docker run failed: {_one_line(done.stderr or done.stdout)}")
        self.container = done.stdout.strip().splitlines()[-1]

    def _exited(self) -> str | None:
        if self.container is None:
            return None
        state = subprocess.run(["docker", "inspect", "--format", "{{.State.Status}}",
                                self.container], capture_output=True, text=True, timeout=20)
        if state.returncode != 0 or state.stdout.strip() in ("exited", "dead"):
            return f"container {self.container[:12]} stopped"
        return None

    def memory_mib(self) -> float | None:
        """The container's memory as ``docker stats`` reports it."""
        if self.container is None:
            return None
        stats = subprocess.run(["docker", "stats", "--no-stream", "--format",
                                "{{.MemUsage}}", self.container], capture_output=True,
                               text=True, timeout=30)
        return _mib(stats.stdout.split("/")[0]) if stats.returncode == 0 else None

    def log(self) -> str:
        if self.container is None:
            return ""
        logs = subprocess.run(["docker", "logs", self.container], capture_output=True,
                              text=True, timeout=20)
        return logs.stdout + logs.stderr

    def stop(self) -> str:
        if self._started:
            # by its id; by the unique name we gave it if `docker run` was cut short
            container, self.container = self.container or self.container_name, None
            if container:
                subprocess.run(["docker", "stop", "--time", "5", container],
                               capture_output=True, timeout=60)
                subprocess.run(["docker", "rm", "--force", container], capture_output=True,
                               timeout=60)
            self._started = False
        return ""


def _option(argv: Sequence[str], flag: str) -> str | None:
    """The value after ``flag`` in ``argv`` (None when absent)."""
    for i, item in enumerate(argv[:-1]):
        if item == flag:
            return argv[i + 1]
    return None


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                out.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def _mib(text: str) -> float | None:
    """``63.2MiB`` (``docker stats``) -> 63.2."""
    units = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "kB": 1e3 / 2**20,
             "MB": 1e6 / 2**20, "GB": 1e9 / 2**20}
    text = text.strip()
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]) * units[unit]
            except ValueError:
                return None
    return None
