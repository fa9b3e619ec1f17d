"""N small or 1 big: a replica sweep's rows, measured beside the quota model (pure).

The model (``client.analysis.model``) simulates the replicas exactly as the client spreads the
requests: request ``seq`` goes to replica ``seq % N``, each replica with its own quota account
(total / N), its own cores, and its own requests' pauses (``Scenario(replicas=N)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from client.analysis.model import Prediction, predict
from client.analysis.report import Report, ScenarioError, scenario_for
from client.data.files import Run
from client.data.record import RequestRecord

__all__ = ["ReplicaRow", "answered_by", "replica_row"]


@dataclass(frozen=True)
class ReplicaRow:
    """One run of a replica sweep: measured, and the model's prediction beside it."""

    replicas: int
    cpus_each: float | None
    throughput_rps: float | None
    p50_ms: float
    p90_ms: float
    p99_ms: float
    throttled_fraction: float | None
    answered_by: int                      # distinct replicas that answered
    start_s: float | None
    rss_mib: float | None                 # mean over replicas
    predicted: Prediction | None          # None: an open loop, or nothing to model from


def replica_row(run: Run, report: Report) -> ReplicaRow:
    """The row of ``run`` (recorded by ``sweep --replicas``), with the model's prediction."""
    info = run.metadata.replicas
    count = info.count if info is not None else 1
    limit = report.limit
    predicted = None
    if limit is not None and report.detection.count:
        try:
            workload = scenario_for(run, report.detection, limit)
            predicted = predict(replace(workload, replicas=count))
        except ScenarioError:
            predicted = None
    s = report.summary
    rss = info.rss_mib if info is not None else []
    return ReplicaRow(
        replicas=count, cpus_each=limit.cpus if limit else None,
        throughput_rps=report.detection.throughput_rps, p50_ms=s.p50_ms, p90_ms=s.p90_ms,
        p99_ms=s.p99_ms, throttled_fraction=report.detection.throttled_fraction,
        answered_by=answered_by(run.records),
        start_s=info.start_s if info is not None else None,
        rss_mib=float(np.mean(rss)) if rss else None, predicted=predicted)


def answered_by(records: Sequence[RequestRecord]) -> int:
    """How many replicas answered successfully (a run of one service: 1 if any request did)."""
    replicas = {r.replica for r in records if r.ok}
    return len(replicas - {None}) or len(replicas)
