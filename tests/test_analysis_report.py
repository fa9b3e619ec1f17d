"""client.analysis.report: the typed report of a run, and the workload a run is modelled with.
The commands end to end are in tests/test_commands_report.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.analysis.detect import detect
from client.analysis.report import ScenarioError, build_prediction, build_report, scenario_for
from client.data.files import Run
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from cpuquota.limit import Limit
from tests.captures import capture

MS = 1_000_000


def run_with(metadata: dict[str, Any], latency_ms: float = 8.0, cpu_ms: float = 3.0,
             n: int = 20) -> Run:
    records = [RequestRecord(i, i * round(latency_ms * MS), round(latency_ms * MS), 200,
                             server_cpu_ns=round(cpu_ms * MS), server_throttle_ns=0)
               for i in range(n)]
    return Run(Path("r.csv"), records, RunMetadata.from_dict({"name": "r", **metadata}))


INPROCESS = {"limits": {"workers": 1, "cgroup": None,
                        "inprocess": {"cpu_limit_percent": 30, "cycle_ms": 50, "mode": "cfs"}}}


def test_workload_of_a_sequential_run_puts_the_rest_of_the_latency_outside_the_quota() -> None:
    run = run_with(INPROCESS)
    w = scenario_for(run, detect(run.records), Limit(0.3))
    assert (w.service_ms, w.overhead_ms, w.concurrency, w.cores, w.requests) == (3, 5, 1, 1, 20)


def test_workload_of_a_concurrent_run_shares_the_workers() -> None:
    # 4 in flight on one worker: an unthrottled request takes 4 × 3 ms of work + 2 ms
    meta = {**INPROCESS, "mode": "closed-loop", "concurrency": 4}
    run = run_with(meta, latency_ms=14)
    w = scenario_for(run, detect(run.records, sequential=False), Limit(0.3))
    assert (w.concurrency, w.cores, w.overhead_ms) == (4, 1, 2)
    two_workers = run_with({**meta, "limits": {**INPROCESS["limits"], "workers": 2}},
                           latency_ms=14)
    w2 = scenario_for(two_workers, detect(two_workers.records, sequential=False), Limit(0.3))
    assert (w2.cores, w2.overhead_ms) == (2, 8)


def test_open_loop_runs_are_not_modelled() -> None:
    run = run_with({**INPROCESS, "mode": "open-loop", "rate_rps": 40})
    with pytest.raises(ScenarioError, match="open-loop"):
        scenario_for(run, detect(run.records, sequential=False), Limit(0.3))


def test_a_boundary_mode_run_is_modelled_only_under_a_limit_given() -> None:
    # a budget per worker thread, paid between requests: not the quota the model simulates
    boundary = {"limits": {"workers": 1, "cgroup": None, "inprocess": {
        "cpu_limit_percent": 30, "cycle_ms": 100, "mode": "boundary", "per": "worker thread"}}}
    run = run_with(boundary)
    assert run.metadata.throttle_mode == "boundary" and run.metadata.limit is not None
    with pytest.raises(ScenarioError, match="boundary mode.*give --cpus X"):
        scenario_for(run, detect(run.records), run.metadata.limit)
    given = scenario_for(run, detect(run.records), Limit(0.3, source="--cpus"))
    assert given.cpus == 0.3
    assert run_with(INPROCESS).metadata.throttle_mode == "cfs"
    assert run_with({"limits": {"workers": 1, "cgroup": None}}).metadata.throttle_mode is None


def test_the_report_keys() -> None:
    report = build_report(run_with(INPROCESS))
    fields = report.to_dict()
    assert fields["limit_cpus"] == 0.3 and fields["throttled_fraction"] == 0
    assert fields["count"] == 20 and fields["period_ms"] == 50  # the limit's: no stalls
    assert fields["limit"] == "in-process 30 % of 50 ms (cfs)"
    assert report.detection.source == "server counters"
    assert set(fields) >= {"name", "p50_ms", "p99_ms", "throughput_rps", "stall_ms", "notes"}
    # a limit given overrides the run's
    assert build_report(run_with(INPROCESS), Limit(0.1)).to_dict()["limit_cpus"] == 0.1


def test_prediction_adds_the_charged_model_only_when_the_quota_was_spent() -> None:
    spent = Run(Path("c.csv"), capture(0.1, 4.5, gc_ms=10, gc_chance=0.5)[0])
    result = build_prediction(spent, Limit(0.1))
    assert result.charged is not None and result.charged_ms is not None
    assert [label for label, _ in result.columns()] == ["measured", "predicted", "charged"]
    assert result.series()[1][0] == f"predicted with {result.charged_ms:.1f} ms charged"
    relaxed = build_prediction(run_with(INPROCESS), Limit(0.3))
    assert relaxed.charged is None and len(relaxed.columns()) == 2
