"""Debian's Prometheus on loopback, for the client's tests (tests/prometheus_support.py) and
``benchmarks.prometheus_week``: :func:`prometheus_running` (its own data directory, a free
port, stopped by its pid and its data removed), :func:`openmetrics` and :func:`backfill`
(series written as OpenMetrics text, made blocks by ``promtool tsdb create-blocks-from
openmetrics``). Not a benchmark. A binary that is not installed raises :class:`Missing`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from client.run.targets.service import free_port, stop_process

__all__ = ["Labels", "Missing", "backfill", "binary", "openmetrics", "prometheus_running"]

Labels = tuple[tuple[str, str], ...]
INSTALL = "scripts/install-system-deps.sh"


class Missing(Exception):
    """A binary this needs is not installed (the message says which)."""


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; :class:`Missing` if not installed."""
    path = shutil.which(name)
    if path is None:
        raise Missing(f"{name} is not installed ({INSTALL})")
    return path


@contextmanager
def prometheus_running(work: Path, config: dict[str, Any], args: Sequence[str] = (),
                       procs: list[subprocess.Popen[bytes]] | None = None,
                       data: Path | None = None) -> Iterator[str]:
    """Debian's Prometheus with ``config`` on loopback (a free port, its data in
    ``work/data``, ``args`` added); yields its base URL once it is ready (its process
    appended to ``procs`` if given); stopped by its pid, its data directory removed (one
    given as ``data`` is used instead, and kept)."""
    prometheus = binary("prometheus")
    kept = data is not None
    data = data if data is not None else work / "data"
    work.mkdir(parents=True, exist_ok=True)
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with open(work / "log", "wb") as log:
        proc = subprocess.Popen([prometheus, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={data}",
                                 f"--web.listen-address=127.0.0.1:{port}", *args],
                                stdout=subprocess.DEVNULL, stderr=log)
    if procs is not None:
        procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError("prometheus exited: "
                                   + (work / "log").read_text()[-2000:])
            try:
                if httpx.get(base + "/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready in 300 s")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc, 20.0)
        if not kept:
            shutil.rmtree(data, ignore_errors=True)


def openmetrics(series: Mapping[str, Mapping[Labels, Sequence[tuple[float, float]]]]) -> str:
    """OpenMetrics text of ``series`` (metric name -> labels -> samples (unix s, value)), each
    family typed unknown (its samples named as given), for promtool's backfill."""
    lines = []
    for name, by_labels in series.items():
        lines.append(f"# TYPE {name} unknown")
        for labels, samples in by_labels.items():
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines += [f"{name}{{{text}}} {v!r} {t:.3f}" for t, v in samples]
    return "\n".join(lines) + "\n# EOF\n"


def backfill(om_file: Path, data: Path, timeout: float = 600.0) -> None:
    """Blocks in ``data`` made from the OpenMetrics text in ``om_file`` by ``promtool tsdb
    create-blocks-from openmetrics`` (Prometheus 2.42's reads the whole file once for each
    2 h block it makes: a file of one 2 h window is read once)."""
    subprocess.run([binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                    "--quiet", str(om_file), str(data)], check=True, capture_output=True,
                   timeout=timeout)
