"""client.run.record: one run from start to saved files, against a real server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from client.data.files import read_run
from client.data.record import RawDataError, RequestRecord
from client.run.plan import LoadPlan
from client.run import record
from client.run.record import RunSpec, record_run, settle_s
from cpuquota.limit import Limit
from tests.support import running_service


def spec(base: str, tmp_path: Path, **changes: object) -> RunSpec:
    values: dict[str, object] = dict(
        url=base + "/cpuBurnFlow?iterations=200", plan=LoadPlan.from_options(requests=5),
        name="r", data_dir=tmp_path, iterations=200, command=["test"], warmup=2)
    values.update(changes)
    return RunSpec(**values)  # type: ignore[arg-type]


def test_every_request_is_a_row_and_the_metadata_is_complete(tmp_path: Path) -> None:
    seen: list[int] = []
    with running_service() as base:
        recorded = record_run(spec(base, tmp_path), [lambda r: seen.append(r.seq)])
    assert not recorded.interrupted and recorded.outcome.reached
    assert seen == [0, 1, 2, 3, 4]  # observers see each request, after its row is written
    run = read_run(tmp_path / "r.csv")
    assert [r.seq for r in run.records] == seen and run.records == recorded.run.records
    meta = json.loads((tmp_path / "r.json").read_text())
    assert meta["completed"] == 5 and meta["interrupted"] is False and meta["warmup"] == 2
    assert meta["summary"]["count"] == 5 and meta["limits"]["workers"] == 1
    assert meta["mode"] == "sequential" and meta["command"] == ["test"]
    assert "sweep" not in meta and "load_average" not in meta
    assert recorded.run.metadata.summary is not None


def test_after_a_warm_up_the_run_waits_one_quota_period(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's CPU must not spend the quota the first timed requests run on."""
    marks: dict[str, float] = {}
    real_warm_up, real_time_plan = record.warm_up, record.time_plan

    def warm_up(*args: Any, **kwargs: Any) -> int:
        answered = real_warm_up(*args, **kwargs)
        marks["warmed"] = time.monotonic()
        return answered

    def time_plan(*args: Any, **kwargs: Any) -> None:
        marks["timed"] = time.monotonic()
        real_time_plan(*args, **kwargs)

    monkeypatch.setattr(record, "warm_up", warm_up)
    monkeypatch.setattr(record, "time_plan", time_plan)
    with running_service() as base:
        record_run(spec(base, tmp_path, settle_s=settle_s(Limit(0.5, 300))), [])
    assert marks["timed"] - marks["warmed"] >= 0.3   # one period of the limit's 300 ms


def test_an_interrupted_run_keeps_what_completed(tmp_path: Path) -> None:
    def stop_at_third(record: RequestRecord) -> None:
        if record.seq == 2:
            raise KeyboardInterrupt  # as a Ctrl-C would, in the middle of the run

    with running_service() as base:
        recorded = record_run(spec(base, tmp_path, plan=LoadPlan.from_options(requests=50)),
                              [stop_at_third])
    assert recorded.interrupted
    run = read_run(tmp_path / "r.csv")
    assert run.metadata.interrupted and run.metadata.completed == len(run.records) == 3


def test_files_that_cannot_be_written_are_one_line_and_nothing_is_sent(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file where the folder should be")
    sent: list[RequestRecord] = []
    with running_service() as base, pytest.raises(
            RawDataError, match=r"cannot write .*/deeper/r\.csv: .*taken is a file, not a "
                                "directory"):
        record_run(spec(base, tmp_path / "taken" / "deeper"), [sent.append])
    assert sent == []
