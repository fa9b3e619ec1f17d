"""``client.run.at_limit``: burn-service started by a backend, as the one seam ``advise`` and
``sweep`` use (a running service changed in place: tests/test_commands_advise_live.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.analysis.advise import shape
from client.run.at_limit import AtLimit, StartedService
from client.run.measure import Traffic
from client.run.plan import LoadPlan
from client.run.targets import resolve_backend
from cpuquota.limit import Limit


def started(backend: str) -> AtLimit:
    found, _ = resolve_backend(backend)
    return StartedService(found, Traffic(LoadPlan.from_options(requests=3), iterations=100),
                          ("http-timing", "sweep"))


def test_the_in_process_throttle_tops_out_at_one_cpu() -> None:
    at = started("inprocess")
    millicores, words = at.ceiling(shape(100, 0))
    assert millicores == 1000                  # on any machine: the throttle's most, or all
    assert at.name == "inprocess" and at.can_remove and at.instances == 1
    assert at.inplace is None                  # nothing to put back: each service is stopped
    assert at.sends == "iterations=100"
    with pytest.raises(ValueError, match="at most 1 CPU"):
        at.check([Limit(1.5)])


@pytest.mark.root
def test_a_started_service_runs_at_its_limit_and_is_stopped(tmp_path: Path) -> None:
    at = started("kernel")
    if problem := at.problem():
        pytest.skip(problem)
    told: list[str] = []
    with at.holding():
        measured = at.measure(Limit(0.5), name="half", plan=LoadPlan.from_options(requests=3),
                              data_dir=tmp_path, on_target=told.append)
    assert "--cpus" in told[0]                # what ran: burn-service's command line
    assert len(measured.run.records) == 3 and not measured.interrupted
    assert (tmp_path / "half.csv").exists() and (tmp_path / "half.json").exists()
