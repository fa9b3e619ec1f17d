"""client.run.measure: start a real target, time it, stop it by its pid, whatever happens."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import TracebackType

import pytest

from client.data.files import read_run
from client.data.metadata import SweepInfo
from client.data.record import RequestRecord
from client.run.measure import BURN_PATH, Measurement, Started, Traffic, measure, target_spec
from client.run.plan import LoadPlan
from client.run.record import RunSpec
from client.run.targets import TargetOptions
from client.run.targets.inprocess import InProcessBackend
from client.run.targets.replicas import ReplicaSet
from client.run.targets.service import ProcessService, ServiceError, free_port
from cpuquota.limit import Limit
from tests.support import gone, running_service

BACKEND = InProcessBackend(TargetOptions())
SWEEP = SweepInfo("t-sweep", "inprocess", 0.5, "2026-01-01T00:00:00+00:00")


class Shown:
    """A progress that notes what it was told (the protocol ``RunProgress`` follows)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __enter__(self) -> Shown:
        self.events.append("enter")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.events.append("exit")

    def advance(self, record: RequestRecord) -> None:
        self.events.append(f"request {record.seq}")


def spec_for(tmp_path: Path, requests: int = 6, name: str = "m"):  # type: ignore[no-untyped-def]
    load = Traffic(LoadPlan.from_options(requests=requests), iterations=300, warmup=1)
    return lambda target: target_spec(target, load, name=name, data_dir=tmp_path,
                                      command=["test"], sweep=SWEEP)


def test_a_target_is_started_timed_and_stopped_in_order(tmp_path: Path) -> None:
    target = BACKEND.target(Limit(0.5), free_port())
    events: list[str] = []
    progress = Shown()

    def recorded(m: Measurement) -> None:   # the target still runs here
        assert target.pid is not None and not gone(target.pid)
        events.append(f"recorded {len(m.run.records)}")

    measured = measure(spec_for(tmp_path), target=target, progress=progress,
                       observers=[lambda r: events.append(f"observed {r.seq}")],
                       on_started=lambda t, s: events.append(f"started {t is target} {s > 0}"),
                       on_recorded=recorded, on_stopped=lambda words: events.append("stopped"))
    assert target.pid is not None and gone(target.pid)
    assert events == ["started True True", *(f"observed {i}" for i in range(6)), "recorded 6",
                      "stopped"]
    assert progress.events == ["enter", *(f"request {i}" for i in range(6)), "exit"]
    assert not measured.interrupted and measured.usage == [] and measured.usage_counter is None
    run = read_run(tmp_path / "m.csv")
    assert run.records == measured.run.records and all(r.ok for r in run.records)
    meta = run.metadata
    assert meta.url == f"{target.base_url}{BURN_PATH}?iterations=300" and meta.iterations == 300
    assert meta.service == target.describe() and meta.sweep == SWEEP and meta.warmup == 1
    assert meta.load_average is not None and meta.command == ["test"]
    assert meta.limit is not None and meta.limit.cpus == pytest.approx(0.5)  # its /limits


def test_an_interrupted_run_keeps_its_requests_and_stops_the_target(tmp_path: Path) -> None:
    target = BACKEND.target(None, free_port())
    stopped: list[str] = []

    def ctrl_c_at_third(record: RequestRecord) -> None:
        if record.seq == 2:
            raise KeyboardInterrupt  # as a Ctrl-C would, in the middle of the run

    measured = measure(spec_for(tmp_path, requests=100), target=target,
                       observers=[ctrl_c_at_third], on_recorded=lambda m: stopped.append("no"),
                       on_stopped=stopped.append)
    assert measured.interrupted and len(stopped) == 1 and stopped != ["no"]
    assert target.pid is not None and gone(target.pid)
    run = read_run(tmp_path / "m.csv")
    assert run.metadata.interrupted and run.metadata.completed == len(run.records) == 3


def test_sigterm_ends_the_run_like_ctrl_c(tmp_path: Path) -> None:
    target = BACKEND.target(None, free_port())

    def terminate_at_fourth(record: RequestRecord) -> None:
        if record.seq == 3:
            os.kill(os.getpid(), signal.SIGTERM)   # to this process, as `kill PID` would

    previous = signal.getsignal(signal.SIGTERM)
    measured = measure(spec_for(tmp_path, requests=400), target=target,
                       observers=[terminate_at_fourth])
    assert signal.getsignal(signal.SIGTERM) == previous   # put back as it was
    assert measured.interrupted and 4 <= len(measured.run.records) < 400
    assert target.pid is not None and gone(target.pid)
    assert read_run(tmp_path / "m.csv").metadata.completed == len(measured.run.records)


def test_ctrl_c_once_started_stops_the_target_and_goes_on(tmp_path: Path) -> None:
    target = BACKEND.target(None, free_port())

    def ctrl_c(started: Started, seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        measure(spec_for(tmp_path), target=target, on_started=ctrl_c)
    assert target.pid is not None and gone(target.pid)
    assert not (tmp_path / "m.csv").exists()   # nothing was timed


def test_a_target_that_does_not_start_is_its_error_and_is_stopped(tmp_path: Path) -> None:
    script = "import sys; print('cannot start: port taken'); sys.exit(3)"
    target = ProcessService([sys.executable, "-c", script], free_port(), health_timeout=20)
    said: list[str] = []
    with pytest.raises(ServiceError, match="exited with 3"):
        measure(spec_for(tmp_path), target=target, on_stopped=said.append)
    assert len(said) == 1 and "cannot start" in said[0]   # its last words
    assert target.pid is not None and gone(target.pid)
    assert not (tmp_path / "m.csv").exists()


def test_usage_is_scraped_while_the_run_goes(tmp_path: Path) -> None:
    target = BACKEND.target(None, free_port())
    measured = measure(spec_for(tmp_path, requests=30), target=target, sample_usage=True)
    assert measured.usage_counter == "throttle_lab_process_cpu_seconds_total"
    assert len(measured.usage) >= 2   # one right away, one when stopped
    assert measured.usage[-1].cpu_s >= measured.usage[0].cpu_s


def test_a_replica_set_is_spread_over_and_its_memory_noted(tmp_path: Path) -> None:
    replicas = ReplicaSet(BACKEND, Limit(0.5), 2)
    measured = measure(spec_for(tmp_path, requests=8), target=replicas)
    assert all(m.pid is not None and gone(m.pid) for m in replicas.members)
    run = read_run(tmp_path / "m.csv")
    assert sorted({r.replica for r in run.records}) == [0, 1]   # round-robin over both
    info = run.metadata.replicas
    assert info is not None and info.count == 2 and info.cpus_each == pytest.approx(0.5)
    assert len(info.rss_mib) == 2 and all(mib > 10 for mib in info.rss_mib)   # after the load
    assert measured.run.metadata.replicas == info


def test_a_url_given_is_timed_as_it_is(tmp_path: Path) -> None:
    progress = Shown()
    with running_service() as base:
        spec = RunSpec(url=base + "/cpuBurnFlow?iterations=100",
                       plan=LoadPlan.from_options(requests=3), name="u", data_dir=tmp_path,
                       iterations=100, command=["test"])
        seen: list[Measurement] = []
        measured = measure(spec, progress=progress, on_recorded=seen.append)
    assert [r.seq for r in measured.run.records] == [0, 1, 2] and progress.events[-1] == "exit"
    assert seen == [measured]
    assert read_run(tmp_path / "u.csv").metadata.url == spec.url
    with pytest.raises(TypeError, match="needs a target"):
        measure(spec_for(tmp_path))
