"""``http-timing sweep --timeline T --requests-from R``: a replayed limit behind the seam the
live limits go through (``client.advise.replayed_limit``). Each limit's prediction is saved
as a run that ``report`` reads: its requests are the replay's (the same as ``predict
--timeline``'s, request for request), its JSON says it was predicted and by what, and it
carries no kernel counter. On the node's recorded windows (tests/data/node_replay/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.analysis.replay import replay_limits
from client.advise.replay import load_replay
from client.data.files import read_run
from client.commands import main


DATA = Path(__file__).parent / "data" / "node_replay"


def http_timing(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``http-timing ARGV`` in this process: its exit code, stdout and stderr."""
    monkeypatch.chdir(cwd)
    try:
        code: object = main(argv)
    except SystemExit as exc:   # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err   # type: ignore[call-overload]


def sweep(shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str, str]:
    return http_timing(["sweep", "--timeline", str(DATA / shape / "agent.cgroup.csv"),
                        "--requests-from", str(DATA / shape / "run.csv"), "--name", "p", *more],
                       tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("shape", ["sequential", "c4", "bursts"])
def test_each_limit_is_saved_as_the_run_its_replay_predicts(
        shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = sweep(shape, tmp_path, monkeypatch, capsys, "--cpus", "none,0.3,0.1",
                           "--no-plot")
    assert code == 0, err
    replayed = load_replay(DATA / shape / "agent.cgroup.csv", DATA / shape / "run.csv", None)
    rows = replay_limits(replayed.demand, [None, 0.3, 0.1], replayed.requests,
                         closed=replayed.closed)
    for tag, row in zip(("none", "0.3", "0.1"), rows):
        run = read_run(tmp_path / "raw-data" / f"p-replay-{tag}.csv")
        assert row.latencies_ns is not None and row.sent_ns is not None
        assert sorted(r.latency_ns for r in run.records) == sorted(row.latencies_ns)
        assert sorted(r.start_ns for r in run.records) == sorted(
            s - replayed.demand.start_ns for s in row.sent_ns)
        predicted = run.metadata.extra["predicted"]
        assert predicted["cpus"] == row.replayed.cpus
        assert (predicted["periods"], predicted["periods_throttled"]) == (
            row.replayed.stats.nr_periods, row.replayed.stats.nr_throttled)
        assert run.metadata.limit is None and run.timeline is None   # no quota, no counters
        assert run.metadata.limit_label() == ("no limit" if tag == "none" else
                                            f"{tag} CPU") + " (replayed)"
    assert "predicted, not measured" in out
    assert (tmp_path / "pictures" / "p-replay-sweep.md").exists()


def test_report_says_a_predicted_run_is_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sweep("c4", tmp_path, monkeypatch, capsys, "--cpus", "0.3")
    assert code == 0, err
    assert (tmp_path / "pictures" / "p-replay-0.3.png").stat().st_size > 0
    assert (tmp_path / "pictures" / "p-replay-sweep.png").stat().st_size > 0
    code, out, err = http_timing(["report", "raw-data/p-replay-0.3.csv"], tmp_path,
                                 monkeypatch, capsys)
    assert code == 0, err
    assert "limit: 0.3 CPU (replayed)" in out
    assert "predicted, not measured: the requests of" in out and " at 0.3 CPU: " in out
    assert "a prediction has no counter" in out and "--cgroup TARGET" not in out
    code, out, err = http_timing(["report", "raw-data/p-replay-0.3.csv", "--json"], tmp_path,
                                 monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["predicted"]["by"] == "client.analysis.replay"


@pytest.mark.parametrize("more, expected", [
    (["--requests", "5"], "--requests: not with --timeline"),
    (["--concurrency", "2", "--rate", "5"], "--concurrency, --rate: not with --timeline"),
    (["--backend", "docker"], "--backend: not with --timeline"),
    (["--cgroup", "docker:x", "--url", "http://127.0.0.1:9/"], "--cgroup, --url: not with"),
])
def test_the_replay_takes_its_load_from_the_record(
        more: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sweep("c4", tmp_path, monkeypatch, capsys, *more)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "raw-data").exists()


@pytest.mark.parametrize("argv, expected", [
    (["sweep", "--timeline", "t.cgroup.csv"], "--timeline FILE and --requests-from FILE go "
     "together"),
    (["sweep", "--requests-from", "r.csv"], "--timeline FILE and --requests-from FILE go "
     "together"),
    (["sweep", "--timeline", "missing.cgroup.csv", "--requests-from", "r.csv"],
     "missing.cgroup.csv"),
])
def test_bad_replay_input_is_one_line(argv: list[str], expected: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = http_timing(argv, tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
