"""The glue of the explaining commands (client.explain): which limit and workload a run is
modelled with, the report keys, one-line parser errors. The commands end to end are in
tests/test_cli_explain.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from client.detect import detect
from client.explain import _limit_for, _workload_for, add_report_arguments, measure
from client.model import Limit
from client.options import CliError, OneLineParser
from client.rawdata import RequestRecord, Run

MS = 1_000_000


def opts(*argv: str) -> argparse.Namespace:
    parser = OneLineParser(prog="t")
    parser.add_argument("--json", action="store_true")
    add_report_arguments(parser)
    return parser.parse_args(list(argv))


def run_with(metadata: dict[str, object], latency_ms: float = 8.0, cpu_ms: float = 3.0,
             n: int = 20) -> Run:
    records = [RequestRecord(i, i * round(latency_ms * MS), round(latency_ms * MS), 200,
                             server_cpu_ns=round(cpu_ms * MS), server_throttle_ns=0)
               for i in range(n)]
    return Run(Path("r.csv"), records, {"name": "r", **metadata})


INPROCESS = {"limits": {"workers": 1, "cgroup": None,
                        "inprocess": {"cpu_limit_percent": 30, "cycle_ms": 50, "mode": "cfs"}}}


def test_limit_from_metadata_or_flags() -> None:
    run = run_with(INPROCESS)
    assert _limit_for(run, opts()) == Limit(0.3, 50, 0, "in-process")
    assert _limit_for(run, opts("--period-ms", "100")) == Limit(0.3, 100, 0, "in-process")
    assert _limit_for(run, opts("--cpus", "0.1")) == Limit(0.1, 50, 0, "--cpus")
    with pytest.raises(CliError, match="no limits in its metadata: a text capture"):
        _limit_for(run_with({}), opts())
    with pytest.raises(CliError, match="shows no CPU limit"):
        _limit_for(run_with({"limits": {"cgroup": None, "inprocess": None}}), opts())


def test_workload_of_a_sequential_run_puts_the_rest_of_the_latency_outside_the_quota() -> None:
    run = run_with(INPROCESS)
    w = _workload_for(run, detect(run.records), Limit(0.3))
    assert (w.service_ms, w.overhead_ms, w.concurrency, w.cores, w.requests) == (3, 5, 1, 1, 20)


def test_workload_of_a_concurrent_run_shares_the_workers() -> None:
    # 4 in flight on one worker: an unthrottled request takes 4 × 3 ms of work + 2 ms
    meta = {**INPROCESS, "mode": "closed-loop", "concurrency": 4}
    run = run_with(meta, latency_ms=14)
    w = _workload_for(run, detect(run.records, sequential=False), Limit(0.3))
    assert (w.concurrency, w.cores, w.overhead_ms) == (4, 1, 2)
    two_workers = run_with({**meta, "limits": {**INPROCESS["limits"], "workers": 2}},
                           latency_ms=14)
    w2 = _workload_for(two_workers, detect(two_workers.records, sequential=False), Limit(0.3))
    assert (w2.cores, w2.overhead_ms) == (2, 8)


def test_open_loop_runs_are_not_modelled() -> None:
    run = run_with({**INPROCESS, "mode": "open-loop", "rate_rps": 40})
    with pytest.raises(CliError, match="open-loop"):
        _workload_for(run, detect(run.records, sequential=False), Limit(0.3))


def test_measure_gives_the_report_keys() -> None:
    _, detection, fields = measure(run_with(INPROCESS))
    assert fields["limit_cpus"] == 0.3 and fields["throttled_fraction"] == 0
    assert fields["count"] == 20 and fields["period_ms"] == 50  # the limit's: no stalls
    assert detection.source == "server counters"


def test_parser_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        opts("--cpus", "zero")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "t: argument --cpus: must be a number > 0 (got 'zero') (see t --help)\n"
