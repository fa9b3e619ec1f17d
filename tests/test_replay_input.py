"""How ``predict`` and ``advise --passive`` place a run's requests on a recorded timeline: by
the run's clock zero (its JSON's ``clock.zero_epoch_ns``, as ``import`` does); an older run
without a clock by its ``started_at``, and the answer says so. On the node agent's rows and
the run they recorded (tests/data/node_replay/README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from client.data.files import read_run
from client.run.replay_input import read_recording, read_requests

DATA = Path(__file__).parent / "data" / "node_replay" / "sequential"


def test_a_run_with_a_clock_is_placed_by_its_clock_zero() -> None:
    recording = read_recording(DATA / "agent.cgroup.csv")
    placed = read_requests(DATA / "run.csv", recording)
    run = read_run(DATA / "run.csv")
    shift = run.metadata.clock["zero_epoch_ns"] - recording.zero_epoch_ns
    by_seq = {r.seq: r for r in run.records}
    assert placed.records and all(p.start_ns == by_seq[p.seq].start_ns + shift
                                  for p in placed.records)
    assert placed.how.startswith("by the run's clock")


def test_an_older_run_without_a_clock_is_placed_by_its_started_at_and_says_so(
        tmp_path: Path) -> None:
    shutil.copy(DATA / "run.csv", tmp_path / "old.csv")
    meta = json.loads((DATA / "run.json").read_text())
    del meta["clock"]
    (tmp_path / "old.json").write_text(json.dumps(meta))
    recording = read_recording(DATA / "agent.cgroup.csv")
    by_clock = read_requests(DATA / "run.csv", recording)
    by_start = read_requests(tmp_path / "old.csv", recording)
    assert "started_at" in by_start.how and "warm-up" in by_start.how
    # started_at is read before the warm-up: the requests land earlier than by the clock
    early = {r.seq: r.start_ns for r in by_start.records}
    assert all(early[r.seq] < r.start_ns for r in by_clock.records if r.seq in early)


def _with_meta(tmp_path: Path, **changes: object) -> Path:
    """The sequential run, its JSON changed as given, in ``tmp_path``."""
    shutil.copy(DATA / "run.csv", tmp_path / "run.csv")
    meta = {**json.loads((DATA / "run.json").read_text()), **changes}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    return tmp_path / "run.csv"


def test_an_http_timing_run_says_how_its_requests_were_sent(tmp_path: Path) -> None:
    """A run's plan decides closed or open loop; a file that only guessed it decides nothing
    (the replay then reads the gaps)."""
    recording = read_recording(DATA / "agent.cgroup.csv")
    assert read_requests(DATA / "run.csv", recording).closed is True   # sequential
    for changes, closed in (({"mode": "closed-loop", "concurrency": 4}, True),
                            ({"mode": "open-loop", "concurrency": 1, "rate_rps": 8.0}, False),
                            ({"tool": "vegeta (http-timing import)"}, None)):
        placed = read_requests(_with_meta(tmp_path, **changes), recording)
        assert placed.closed is closed, changes


def test_predict_says_where_the_loop_came_from(tmp_path: Path) -> None:
    from tests.support import http_timing

    shutil.copy(DATA / "agent.cgroup.csv", tmp_path / "agent.cgroup.csv")
    shutil.copy(DATA / "agent.json", tmp_path / "agent.json")
    _with_meta(tmp_path)
    said = json.loads(http_timing("predict", "--timeline", "agent.cgroup.csv",
                                  "--requests-from", "run.csv", "--cpus", "0.5", "--json",
                                  cwd=tmp_path).stdout)["requests"]["loop"]
    assert said.startswith("closed loop of one (one after another)") and "the run's plan" in said, said
    _with_meta(tmp_path, tool="vegeta (http-timing import)")
    said = json.loads(http_timing("predict", "--timeline", "agent.cgroup.csv",
                                  "--requests-from", "run.csv", "--cpus", "0.5", "--json",
                                  cwd=tmp_path).stdout)["requests"]["loop"]
    assert "read from the gaps" in said, said
