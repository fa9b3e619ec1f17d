"""What the benchmarks share: the services they start, reading them, ``wrk``, the entry point.

- **Services**, started through the client's targets registry (``client.run.targets``:
  ``BACKENDS``, ``ProcessService``) and stopped by their own pid, also on an error, Ctrl-C or
  SIGTERM (``run_main``): :func:`burn_service` (``burn-service`` under a limit, on a free port),
  :func:`http_server` (any command that answers ``/healthz``), :func:`burner_in_group` and
  :func:`node_in_group` (a server that knows nothing of throttle-lab, in a new cgroup with a
  real quota, removed by its path at the end).
- **Reading them**: :func:`get`, :func:`scrape` (``/metrics``), :func:`calibrate` (iterations
  for a CPU time), :func:`record` (a recorded run: the client's measure sequence).
- **wrk**: :func:`require_wrk`, :func:`run_wrk`.
- **The entry point**: ``run_main(main)`` (signals unwind, Ctrl-C exits 130), and
  :func:`keep_record`: the run's dated record (``benchmarks/records.py``) when
  ``python -m benchmarks`` (``make bench``) runs it.

Run a benchmark from the repository's root as ``.venv/bin/python -m benchmarks.NAME``.
"""

from __future__ import annotations

import http.client
import json
import io
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn, TextIO

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.records import ENV, machine, write_record
from client.data.files import Run
from client.run.measure import measure
from client.run.record import RunSpec
from client.run.targets import BACKENDS, Service, ServiceError, TargetOptions
from client.run.targets.service import ProcessService, free_port, stop_process
from cpuquota.cgroupfs import locate_cpu_controller
from cpuquota.limit import Limit
from service.cgroup import create_group, empty_group, move_pid, remove_group, set_quota

__all__ = ["bytecode_cached", "favoured_group", "BIN", "BURNER", "HTTP_TIMING", "NODE_BURNER", "ROOT", "WRK_MISSING", "BurningGroup",
           "recorder_on_every_node",
           "WrkResult", "burn_service", "burner_in", "burner_in_group", "calibrate",
           "describe_load", "exit_on_sigterm", "free_port", "get", "http_server", "keep_record",
           "loadavg",
           "node_in_group", "record", "require_wrk", "run_main", "run_wrk", "scrape", "serve_in",
           "serve_in_group", "started", "timed", "tree_memory_kib", "union"]

ROOT = Path(__file__).resolve().parent.parent   # the checkout: raw-data/, pictures/
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent               # the venv's bin: burn-service, http-timing
HTTP_TIMING = BIN / "http-timing"
BURNER = HERE / "burner_server.py"              # a stdlib server that burns CPU
NODE_BURNER = HERE / "node_burner.js"           # the same in Node.js
WRK_MISSING = ("wrk is not installed: skipped. Install it with `sudo apt-get -o "
               "DPkg::Lock::Timeout=600 install -y wrk` (or `sudo bash "
               "scripts/install-system-deps.sh wrk`).")


# -- the entry point ------------------------------------------------------------------------

def loadavg() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (5 min {five:.2f})"


def describe_load(when: str) -> str:
    return f"load average {when}: {loadavg()}, {os.cpu_count()} CPUs"


def exit_on_sigterm() -> None:
    """SIGTERM (and a SIGINT a background shell ignored) unwind like Ctrl-C, so every server
    this process started is stopped by the ``finally`` that started it."""
    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, leave)


class _Tee(io.TextIOBase):
    """Standard output as it is, and a copy kept for the run's record."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


_RUN: dict[str, Any] = {}   # this process's run, when ``python -m benchmarks`` records it


def run_main(main: Callable[[], int]) -> NoReturn:
    """A benchmark's entry point: signals unwind (``exit_on_sigterm``), Ctrl-C exits 130; under
    ``python -m benchmarks`` what it prints is also kept for :func:`keep_record`."""
    exit_on_sigterm()
    if os.environ.get(ENV):
        _RUN.update(started=datetime.now(timezone.utc), before=machine(), tee=_Tee(sys.stdout),
                    command=["python", "-m", _module_name(), *sys.argv[1:]])
        sys.stdout = _RUN["tee"]
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)


def _module_name() -> str:
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return spec.name if spec is not None else Path(sys.argv[0]).stem


def keep_record(name: str, figures: Mapping[str, Any]) -> Path | None:
    """The run's dated record (what it printed so far, ``figures``, the machine) written to
    ``$BENCH_RECORDS`` as ``NAME-<UTC start>.json``; None when run on its own (not recorded)."""
    if not _RUN or not os.environ.get(ENV):
        return None
    sys.stdout.flush()
    return write_record(Path(os.environ[ENV]), name, figures,
                        output=_RUN["tee"].kept.getvalue(), command=_RUN["command"],
                        started=_RUN["started"], before=_RUN["before"])


# -- services -------------------------------------------------------------------------------

@contextmanager
def started(service: Service, what: str = "burn-service") -> Iterator[Service]:
    """``service`` started (healthy), stopped at the end by its own id; a service that does not
    start ends the benchmark with one line naming ``what``."""
    try:
        service.start()
    except ServiceError as exc:
        service.stop()
        raise SystemExit(f"{what}: {exc}") from None
    except BaseException:
        service.stop()
        raise
    try:
        yield service
    finally:
        service.stop()


@contextmanager
def burn_service(limit: Limit | None = None, *flags: str, backend: str = "kernel",
                 access_log: bool = False, health_timeout: float | None = None
                 ) -> Iterator[Service]:
    """``burn-service`` on a free port under ``limit`` (None: no limit) set by ``backend``
    (``kernel``: ``--cpus``, a cgroup; ``inprocess``: ``--cpu-limit``; ``docker``), with more
    ``flags``; ``access_log``: at burn-service's default log level (``info``: the access log
    on, a cost some benchmarks measure) instead of the backends' ``warning``."""
    options = TargetOptions(service_args=(*flags, *(("--log-level", "info") if access_log
                                                     else ())))
    made = BACKENDS[backend](options)
    try:
        made.check([limit])
    except ValueError as exc:
        raise SystemExit(f"burn-service: {exc}") from None
    target = made.target(limit, free_port())
    if health_timeout is not None:
        target.health_timeout = health_timeout
    with started(target, " ".join(["burn-service", *target.argv[3:]])) as service:
        yield service


@contextmanager
def http_server(command: Sequence[str], port: int, timeout: float = 60.0,
                what: str = "the server") -> Iterator[Service]:
    """Run ``command`` (a server listening on ``port``, answering ``/healthz``); yield it
    started; stopped by its pid."""
    with started(ProcessService(command, port, health_timeout=timeout), what) as service:
        yield service


@dataclass(frozen=True)
class BurningGroup:
    """A server that knows nothing of throttle-lab, in a cgroup of its own."""

    base_url: str
    pid: int
    group: Path


@contextmanager
def serve_in_group(command: Sequence[str], cpus: float) -> Iterator[BurningGroup]:
    """``command`` (a server that prints ``port N`` once it listens) in a new cgroup, given a
    ``cpus`` quota once it listens (its start-up is not what is measured, and at a small quota
    on a slow CPU, such as the v2 guest's emulated one, it takes a minute); stopped by its pid
    and the group removed by its path at the end, also on failure."""
    controller = locate_cpu_controller()
    group = create_group(None, controller)
    try:
        with serve_in(group, command) as server:
            set_quota(group, controller.version, Limit(cpus))
            yield server
    finally:
        empty_group(group)
        remove_group(group)


@contextmanager
def serve_in(group: Path, command: Sequence[str]) -> Iterator[BurningGroup]:
    """``command`` (a server that prints ``port N`` once it listens) moved into an existing
    ``group``; stopped by its pid at the end (the group is the caller's)."""
    proc: subprocess.Popen[str] | None = None
    errors = tempfile.TemporaryFile(prefix="server-in-group-")
    try:
        proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=errors, text=True,
                                stdin=subprocess.DEVNULL)
        move_pid(group, proc.pid)   # all its threads move with it
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        if len(words) != 2 or words[0] != "port":
            errors.seek(0)
            said = errors.read().decode("utf-8", "replace").strip().splitlines()[-1:]
            raise ServiceError(f"{Path(command[1]).name} did not start: {words} {said}")
        yield BurningGroup(f"http://127.0.0.1:{words[1]}", proc.pid, group)
    finally:
        if proc is not None:
            stop_process(proc, timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
        errors.close()


@contextmanager
def burner_in_group(cpus: float = 0.2, shape: str = "connection") -> Iterator[BurningGroup]:
    """``benchmarks/burner_server.py`` (standard library only) in a new group of ``cpus``,
    of ``shape`` (how it uses threads and processes: ``burner_server.SHAPES``)."""
    with serve_in_group([sys.executable, str(BURNER), "--port", "0", "--shape", shape],
                        cpus) as server:
        yield server


@contextmanager
def burner_in(group: Path) -> Iterator[BurningGroup]:
    """``benchmarks/burner_server.py`` in an existing group (stopped by its pid at the end)."""
    with serve_in(group, [sys.executable, str(BURNER), "--port", "0"]) as server:
        yield server


@contextmanager
def node_in_group(cpus: float) -> Iterator[BurningGroup]:
    """``benchmarks/node_burner.js`` in a new group of ``cpus``."""
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is not installed")
    with serve_in_group([node, str(NODE_BURNER), "0"], cpus) as server:
        yield server


@contextmanager
def recorder_on_every_node(n: Any, work: Path, log: Callable[[str], None]) -> Iterator[None]:
    """The project's images in every node of the project's cluster, and the node agent's
    DaemonSet running (deployed here if absent, then removed)."""
    from kubenode import node as kubenode
    from kubenode import project_images, recorder
    from kubenode.context import containerd_addresses
    from kubenode.images import has_image

    if any(not has_image(address, project_images.SERVICE_IMAGE)
           for address in containerd_addresses(n.lay)):
        kubenode.load_project_images(n.lay, log, ROOT)
    ns = recorder.RECORDER_NAMESPACE
    running = n.kubectl("-n", ns, "get", "daemonset", "recorder", check=False).returncode == 0
    overlay = work / "recorder-overlay"
    if not running:
        recorder.deploy_recorder(n, ROOT, overlay, log)
    try:
        yield
    finally:
        if not running:
            n.kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--wait=true",
                      "--timeout=120s", check=False, timeout=150)


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping ``(start, end)`` spans merged: the time at least one of them covers."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


# -- reading a service ----------------------------------------------------------------------

def get(base: str, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """One GET on a new connection (the standard library's: cheap, no pool)."""
    host, port = base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def scrape(base: str) -> dict[str, float]:
    """``/metrics`` as {name: value} for unlabelled samples and {name{k=v,...}: value}."""
    _, body = get(base, "/metrics")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def calibrate(base: str, cpu_ms: float, *, probe: int = 5000, requests: int = 20,
              warmup: int = 0, threads: int | None = None) -> int:
    """Iterations (on each thread) whose burn takes ``cpu_ms`` of CPU in all here: the median
    ``cpu_ns`` of ``requests`` sequential ``/cpuBurnFlow?iterations=PROBE[&threads=T]``, after
    ``warmup`` requests not counted."""
    params = {"iterations": probe, **({"threads": threads} if threads else {})}
    with httpx.Client(base_url=base, timeout=60) as client:
        def cpu_ns() -> int:
            body = client.get("/cpuBurnFlow", params=params).raise_for_status().json()
            return int(body["cpu_ns"])

        for _ in range(warmup):
            cpu_ns()
        cpu = [cpu_ns() for _ in range(requests)]
    return max(1, round(probe * cpu_ms * 1e6 / statistics.median(cpu)))


def record(spec: RunSpec) -> Run:
    """A run recorded as ``http-timing`` records one (CSV + JSON in ``spec.data_dir``), through
    the commands' own measure sequence (:func:`client.run.measure.measure`)."""
    return measure(spec).recorded.run


# -- wrk ------------------------------------------------------------------------------------

def require_wrk() -> str | None:
    """The path of ``wrk``, or None (the caller prints ``WRK_MISSING`` and skips)."""
    return shutil.which("wrk")


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    p50_us: float
    p90_us: float
    p99_us: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def _us(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def run_wrk(url: str, seconds: float, connections: int = 1, threads: int = 1) -> WrkResult:
    """``wrk -tT -cC -dNs --latency URL``: requests and latency percentiles."""
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s",
                          "--timeout", "30s", "--latency", url],
                         capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s)", out)
    pct = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)\s*$", out, re.M))
    if done is None or len(pct) != 3:
        raise SystemExit(f"could not read wrk's output:\n{out}")
    return WrkResult(int(done.group(1)), _us(done.group(2) + done.group(3)) / 1e6,
                     _us(pct["50"]), _us(pct["90"]), _us(pct["99"]))


def tree_memory_kib(pid: int) -> tuple[int, int]:
    """``pid`` and all its descendants now (``/proc``; the children each task names): the
    sum of their RSS and of their PSS (KiB; each shared page's share, so pages the
    processes share, e.g. numpy's and Python's own, are counted once); 0 for what has
    gone."""
    rss = pss = 0
    todo = [pid]
    while todo:
        at = todo.pop()
        try:
            for line in Path(f"/proc/{at}/smaps_rollup").read_text().splitlines():
                if line.startswith(("Rss:", "Pss:")):
                    kib = int(line.split()[1])
                    rss, pss = (rss + kib, pss) if line.startswith("Rss:") else (rss, pss + kib)
            for task in Path(f"/proc/{at}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return rss, pss


FAVOURED_SHARES, FAVOURED_WEIGHT = 262144, 10000   # cpu.shares' and cpu.weight's most


@contextmanager
def favoured_group() -> Iterator[Path]:
    """A new cgroup of the machine's greatest CPU weight, for a command to run as on CPUs of
    its own beside what else the machine runs (no quota: it may use every CPU); emptied and
    removed by its path at the end."""
    controller = locate_cpu_controller()
    group = create_group(None, controller)
    try:
        name, value = (("cpu.shares", FAVOURED_SHARES) if controller.version == 1
                       else ("cpu.weight", FAVOURED_WEIGHT))
        (group / name).write_text(str(value))
        yield group
    finally:
        empty_group(group)
        remove_group(group)


def bytecode_cached(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` made to cache the command's bytecode in ``folder`` (a scratch folder's, as an
    installed package has it compiled), whatever this shell says; ``env`` itself, changed."""
    env["PYTHONPYCACHEPREFIX"] = str(folder)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(args: Sequence[str], env: Mapping[str, str],
          group: Path | None = None) -> dict[str, Any]:
    """``http-timing ARGS`` once (moved into ``group`` as it starts, where given): wall (s),
    its peak RSS (MiB, ``wait4``'s: its own, or its largest worker's), the most its whole
    tree held at once (sampled every 20 ms: the sum of the processes' PSS, and of their RSS,
    MiB), CPU (s, the workers' too), exit, its JSON."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([str(HTTP_TIMING), *args], env=dict(env), stdout=out,
                                stderr=err)
        if group is not None:
            move_pid(group, proc.pid)   # its workers, started later, with it
        peak = [0, 0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                rss, pss = tree_memory_kib(proc.pid)
                peak[:] = max(peak[0], rss), max(peak[1], pss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    got: dict[str, Any] = {"wall_s": wall, "rss_mib": usage.ru_maxrss / 1024,
                           "tree_rss_mib": peak[0] / 1024, "tree_pss_mib": peak[1] / 1024,
                           "cpu_s": usage.ru_utime + usage.ru_stime, "exit": proc.returncode}
    try:
        got["answer"] = json.loads(stdout)
    except ValueError:
        got["error"] = (stderr.strip().splitlines() or ["no output"])[-1][:300]
    return got
