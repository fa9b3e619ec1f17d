"""What the commands print for the committed runs in raw-data/, pinned byte for byte.

tests/golden/ holds the output of the version before the client was split into layers (the
picture paths replaced by PICTURES; since then the model's inputs gained ``threads`` and ``replicas``, and one
prediction's throughput its last digit, from the one definition of throughput; then the one
vocabulary of issue 31: "delayed by throttling" for what counters say, "slow" for latency alone,
a ``saturated`` key and line, and no stall or period read from a saturated run's queue; then
issue 43's: "delayed by throttling" in every table and sentence about requests; then the
stall of a run whose requests carry the service's own pauses, their median): a change of any
number, word or key shows up here."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.analysis.report import build_report
from client.analysis.throughput import throughput_row
from client.commands import main
from client.data.files import read_run
from client.render.tables import format_throughput_table

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"


def output(capsys: pytest.CaptureFixture[str], pictures: Path, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out.replace(str(pictures), "PICTURES")


@pytest.mark.parametrize(("golden", "args"), [
    ("report-kernel-0.3.txt", ["report", "raw-data/kernel-0.3.csv"]),
    ("report-rate20-kernel-0.1.txt", ["report", "raw-data/rate20-kernel-0.1.csv"]),
    ("report-kernel-0.1.json", ["report", "raw-data/kernel-0.1.csv", "--json"]),
    ("predict-kernel-0.1.txt", ["report", "raw-data/kernel-0.1.csv", "--predict"]),
    ("predictjson-inprocess-0.3.txt", ["report", "raw-data/inprocess-0.3.csv", "--predict",
                                       "--json"]),
    ("predict.txt", ["predict", "--service-ms", "5", "--cpus", "0.3"]),
    ("predict2.json", ["predict", "--service-ms", "5", "--cpus", "0.1", "--burst-ms", "5",
                       "--concurrency", "2", "--json"]),
])
def test_report_and_predict(golden: str, args: list[str], tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    extra = ["--pictures-dir", str(tmp_path)] if "--predict" in args else []
    assert output(capsys, tmp_path, *args, *extra) == (GOLDEN / golden).read_text()


def test_compare_table_and_markdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    text = output(capsys, tmp_path, "compare", *(f"raw-data/kernel-{c}.csv" for c in
                                                 ("1", "0.3", "0.1")),
                  "-o", str(tmp_path / "cmp.png"))
    assert text == (GOLDEN / "compare.txt").read_text()
    assert (tmp_path / "cmp.md").read_text() == (GOLDEN / "compare.md").read_text()


def test_throughput_table() -> None:
    runs = [read_run(ROOT / "raw-data" / f"rate20-kernel-{c}.csv") for c in ("1", "0.3", "0.1")]
    rows = [(run.name, throughput_row(run.records,
                                      build_report(run).detection.throttled_fraction))
            for run in runs]
    assert format_throughput_table(rows) == (GOLDEN / "throughput.md").read_text()
