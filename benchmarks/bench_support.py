"""What the service benchmarks share: a ``burn-service`` subprocess, its ``/metrics`` and
``wrk``. Standard library and ``prometheus_client`` only (no ``client`` package), so a benchmark
reads the service the same way whatever the client does.

Every process started here is stopped by its own pid (SIGTERM, then SIGKILL), also on error or
Ctrl-C.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["BIN", "WrkResult", "describe_load", "exit_on_sigterm", "free_port", "get",
           "http_server", "loadavg", "require_wrk", "run_main", "run_wrk", "scrape", "service",
           "stop"]

BIN = Path(sys.executable).parent  # the venv's bin: burn-service, uvicorn, ...


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def run_main(main: Callable[[], int]) -> NoReturn:
    """A benchmark's entry point: signals unwind (``exit_on_sigterm``), Ctrl-C exits 130."""
    exit_on_sigterm()
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM ``proc`` by its pid, wait, then SIGKILL; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get(base: str, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    host, port = base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode} before it answered")
        try:
            if get(base, "/healthz", timeout=1.0)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{base} did not answer /healthz within {timeout:g} s")


@contextmanager
def http_server(command: Sequence[str], port: int, timeout: float = 60.0) -> Iterator[str]:
    """Run ``command`` (a server listening on ``port``, answering ``/healthz``); yield its base
    URL; stop it by pid. Its output is discarded (uvicorn's access log stays on: a cost the
    benchmarks measure, not one they skip)."""
    proc = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, proc, timeout)
        yield base
    finally:
        stop(proc)


@contextmanager
def service(*args: str, timeout: float = 60.0) -> Iterator[str]:
    """``burn-service ARGS`` on a free port (its default log level: access log on)."""
    port = free_port()
    with http_server([str(BIN / "burn-service"), "--port", str(port), *args], port,
                     timeout) as base:
        yield base


def scrape(base: str) -> dict[str, float]:
    """``/metrics`` as {name: value} for unlabelled samples and {name{k=v,...}: value}."""
    _, body = get(base, "/metrics")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def require_wrk() -> str | None:
    """The path of ``wrk``, or None (the caller prints how to install it and skips)."""
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
