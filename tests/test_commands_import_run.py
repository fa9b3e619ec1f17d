"""``http-timing import RUN.csv``: a run of http-timing's own, made without ``--cgroup`` (as
from a laptop), marked afterwards from ``record``'s timeline of the service's group. The
marks' source is the timeline; its figures over the run are the group's own ``cpu.stat``
change across the run; the original run stays as it was. Bad runs: one line, exit 2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from client.data.files import read_run
from tests.import_support import recorded_service
from tests.support import http_timing, usage_error

pytestmark = pytest.mark.root


def cpu_stat(group: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in
                                   (group / "cpu.stat").read_text().splitlines())}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_run_without_cgroup_is_marked_from_the_recorded_timeline(tmp_path: Path) -> None:
    with recorded_service(tmp_path) as recording:
        before = cpu_stat(recording.group)
        run = http_timing("--url", recording.url, "--requests", "10", "--name", "laptop",
                          "--no-plot", "--quiet", cwd=tmp_path)
        after = cpu_stat(recording.group)
        assert run.returncode == 0, run.stderr
    original = tmp_path / "raw-data" / "laptop.csv"
    sums = {p: digest(p) for p in (original, original.with_suffix(".json"))}
    result = http_timing("import", str(original), "--timeline", "raw-data/t.cgroup.csv",
                         "--name", "marked", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "placed by the run's clock" in result.stdout
    assert "(from the timeline's cpu.stat)" in result.stdout
    assert {p: digest(p) for p in sums} == sums   # the original is kept as it was

    marked = read_run(tmp_path / "raw-data" / "marked.csv")
    laptop = read_run(original)
    assert marked.metadata.extra["imported"]["format"] == "http-timing"
    assert marked.metadata.extra["imported"]["timeline"] == "raw-data/t.cgroup.csv"
    assert marked.metadata.extra["imported"]["outside_timeline"] == 0
    assert [r.latency_ns for r in marked.records] == [r.latency_ns for r in laptop.records]
    assert all(r.cgroup_nr_throttled is not None for r in marked.records)
    assert all(r.cgroup_nr_throttled is None for r in laptop.records)   # it had no --cgroup
    # the timeline across the run is the group's cpu.stat, read by the recorder between the
    # test's reads before and after the run: some of what those counted, the quota bit in it
    # (after the last answer the service may still work, and be throttled: the client
    # closing its connection as it exits)
    assert marked.timeline is not None
    first = min(r.start_ns for r in marked.records)
    last = max(r.end_ns for r in marked.records)
    start = max((s for s in marked.timeline if s.t_ns <= first), key=lambda s: s.t_ns)
    end = min((s for s in marked.timeline if s.t_ns >= last), key=lambda s: s.t_ns)
    assert 0 < end.nr_throttled - start.nr_throttled <= (after["nr_throttled"]
                                                         - before["nr_throttled"])
    assert 0 < end.throttled_ns - start.throttled_ns <= (after["throttled_time"]
                                                         - before["throttled_time"])
    assert any(r.cgroup_nr_throttled for r in marked.records)   # the requests it held
    report = http_timing("report", "raw-data/marked.csv", "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["count"] == 10


def write_run(tmp_path: Path, rows: list[str], started_at: str) -> Path:
    """A run's CSV (``rows`` after the header) and its JSON with a clock at ``started_at``."""
    path = tmp_path / "run.csv"
    path.write_text("seq,start_ns,latency_ns,status,error\n" + "".join(r + "\n" for r in rows))
    (tmp_path / "run.json").write_text(json.dumps({"name": "run", "started_at": started_at}))
    return path


def test_a_run_with_no_requests_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_commands_import import make_timeline

    make_timeline(tmp_path)
    write_run(tmp_path, [], "2024-11-24T03:46:40+00:00")
    line = usage_error(["import", "run.csv", "--timeline", "t.cgroup.csv"], tmp_path,
                       monkeypatch, capsys)
    assert line == "http-timing: run.csv holds no requests (its header alone)"
    assert not (tmp_path / "raw-data").exists()


def test_a_run_of_another_time_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_commands_import import make_timeline

    make_timeline(tmp_path)   # 2 s from 2024-11-24 03:46:40 UTC
    write_run(tmp_path, ["0,0,30000000,200,", "1,40000000,30000000,200,"],
              "2024-11-24T05:00:00+00:00")
    line = usage_error(["import", "run.csv", "--timeline", "t.cgroup.csv"], tmp_path,
                       monkeypatch, capsys)
    assert line.startswith("http-timing: run.csv: none of its 2 requests lies inside the timeline")
    assert "nothing to mark" in line
    assert not (tmp_path / "raw-data").exists()


def test_a_run_is_placed_by_its_start_and_keeps_its_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from client.commands import main
    from tests.test_commands_import import MS, ZERO, make_timeline

    make_timeline(tmp_path)   # one throttle that ended at 1.0 s on the timeline
    path = tmp_path / "run.csv"
    path.write_text("seq,start_ns,latency_ns,status,error,replica\n"
                    f"0,0,{30 * MS},200,,0\n1,{340 * MS},{30 * MS},200,,1\n")
    (tmp_path / "run.json").write_text(json.dumps({
        "name": "run", "url": "http://x/y", "clock": {"zero_epoch_ns": ZERO + 600 * MS,
                                                      "zero_uncertainty_ns": 100}}))
    monkeypatch.chdir(tmp_path)
    assert main(["import", "run.csv", "--timeline", "t.cgroup.csv", "--name", "m"]) == 0
    assert "placed by the run's clock" in capsys.readouterr().out
    run = read_run(tmp_path / "raw-data" / "m.csv")
    assert [(r.start_ns // MS, r.replica, r.cgroup_nr_throttled) for r in run.records] == [
        (600, 0, 0), (940, 1, 1)]
    assert run.metadata.url == "http://x/y"
