"""Runs made by hand for the render and analysis tests: model latencies under a known limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.analysis.model import Scenario, predict
from client.data.files import Run
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord

__all__ = ["MS", "limits", "modelled", "run_of"]

MS = 1_000_000


def limits(cpus: float | None, *, inprocess: float | None = None) -> dict[str, Any]:
    cgroup = ({"quota_us": round(cpus * 100_000), "period_us": 100_000, "burst_us": 0,
               "cpus": cpus} if cpus else None)
    return {"limits": {"cgroup": cgroup,
                       "inprocess": {"cpu_limit_percent": inprocess, "cycle_ms": 100,
                                     "mode": "cfs"} if inprocess else None}}


def run_of(name: str, latencies_ms: list[float], metadata: dict[str, Any] | None = None,
           tmp: Path = Path("/nonexistent")) -> Run:
    t, records = 0, []
    for i, ms in enumerate(latencies_ms):
        records.append(RequestRecord(i, t, round(ms * MS), 200))
        t += round(ms * MS) + 100_000
    meta = RunMetadata.from_dict({"name": name, **metadata}) if metadata else RunMetadata.missing()
    return Run(tmp / f"{name}.csv", records, meta)


def modelled(name: str, cpus: float, metadata: dict[str, Any]) -> Run:
    p = predict(Scenario(service_ms=5, cpus=cpus, requests=60))
    return run_of(name, [r.latency_ns / MS for r in p.records], metadata)
