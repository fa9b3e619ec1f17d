"""client.analysis.replicas and the model's replicas: N small or 1 big, exactly simulated."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from client.analysis.model import Scenario, predict
from client.analysis.replicas import answered_by, replica_row
from client.analysis.report import build_report
from client.data.files import Run
from client.data.metadata import ReplicaInfo, RunMetadata
from client.data.record import RequestRecord

MS = 1_000_000


def test_one_client_sees_n_small_replicas_as_one_big() -> None:
    """Sent one after another, four replicas of 0.1 CPU throttle like one of 0.4: the client
    waits through each stall, so no replica gets more than its share of each period."""
    big = predict(Scenario(service_ms=5, cpus=0.4, requests=200, overhead_ms=0.5))
    small = predict(Scenario(service_ms=5, cpus=0.1, requests=200, overhead_ms=0.5, replicas=4))
    assert [r.latency_ns for r in small.records] == [r.latency_ns for r in big.records]
    assert [r.replica for r in small.records[:5]] == [0, 1, 2, 3, 0]
    assert big.records[0].replica is None


def test_concurrent_clients_spread_over_replicas_change_the_shape() -> None:
    big = predict(Scenario(service_ms=5, cpus=0.4, concurrency=4, requests=400))
    small = predict(Scenario(service_ms=5, cpus=0.1, concurrency=4, requests=400, replicas=4))
    # one big: four requests share it and all wait a little; four small: each request runs
    # alone at its replica, until that replica's 10 ms are spent and it waits a period
    assert big.percentile(50) == pytest.approx(20, abs=1)
    assert small.percentile(50) == pytest.approx(5, abs=0.5)
    assert small.percentile(99) > 90
    assert small.throughput_rps == pytest.approx(big.throughput_rps, rel=0.05)  # both quota-bound
    assert small.stats.nr_periods >= 4 * 9  # every replica's own counters, summed


def test_replica_rows_measure_and_model() -> None:
    records = [RequestRecord(i, i * 6 * MS, 5 * MS, 200, server_cpu_ns=4 * MS, replica=i % 4,
                             server_throttle_ns=0) for i in range(40)]
    limits = {"cgroup": None, "workers": 1,
              "inprocess": {"cpu_limit_percent": 10, "cycle_ms": 100, "mode": "cfs"}}
    meta = RunMetadata(name="r", limits=limits,
                       replicas=ReplicaInfo(4, 0.1, 3.5, [60.0, 62.0, 64.0, 66.0]))
    run = Run(Path("r.csv"), records, meta)
    row = replica_row(run, build_report(run))
    assert (row.replicas, row.cpus_each, row.answered_by, row.start_s) == (4, 0.1, 4, 3.5)
    assert row.rss_mib == pytest.approx(63.0) and row.p50_ms == pytest.approx(5.0)
    assert row.predicted is not None and row.predicted.workload.replicas == 4
    assert row.throttled_fraction == 0


def test_answered_by() -> None:
    one = [RequestRecord(i, i, 1, 200) for i in range(3)]
    assert answered_by(one) == 1 and answered_by([]) == 0
    spread = [replace(r, replica=r.seq % 2) for r in one] + [RequestRecord(9, 9, 1, 0,
                                                                           replica=2)]
    assert answered_by(spread) == 2  # the failed one does not count
