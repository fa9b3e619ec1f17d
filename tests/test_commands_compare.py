"""End to end: ``http-timing compare`` on recorded runs (the ``runs`` fixture) and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import http_timing, usage_error

REPORT_KEYS = {"count", "errors", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms",
               "throttled_fraction", "stall_ms", "period_ms", "throughput_rps", "limit"}




def test_compare_prints_the_table_and_saves_picture_and_markdown(runs: Path) -> None:
    result = http_timing("compare", "raw-data/free.csv", "raw-data/throttled.json",
                         "graph-30.txt", "-o", "cmp/all.png", "--title", "three", cwd=runs)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "limit", "requests"]
    assert [line.split()[0] for line in lines[1:4]] == ["free", "throttled", "graph-30"]
    assert lines[1].split()[1] == "none" and "0.05 CPU (in-process)" in lines[2]
    # a text capture has no counters: its share is of slow requests, from latency alone
    assert lines[3].split()[1] == "unknown" and lines[3].endswith("33 % slow")
    assert lines[4] == f"picture: {Path('cmp/all.png')}, table: {Path('cmp/all.md')}"
    assert (runs / "cmp" / "all.png").read_bytes()[:4] == b"\x89PNG"
    md = (runs / "cmp" / "all.md").read_text()
    assert "| graph-30 | unknown | 6 |" in md and "| throttled | 0.05 CPU (in-process) | 60 |" in md


def test_without_o_the_picture_is_named_after_its_runs_and_never_overwrites(
        runs: Path) -> None:
    earlier = runs / "pictures" / "compare-free-throttled.png"
    earlier.parent.mkdir(exist_ok=True)
    earlier.write_bytes(b"an earlier comparison")
    result = http_timing("compare", "raw-data/free.csv", "raw-data/throttled.json", cwd=runs)
    assert result.returncode == 0, result.stderr
    picture = Path("pictures/compare-free-throttled-2.png")
    assert result.stdout.splitlines()[-1] == (
        f"picture: {picture}, table: {picture.with_suffix('.md')}")
    assert (runs / picture).read_bytes()[:4] == b"\x89PNG"
    assert earlier.read_bytes() == b"an earlier comparison"   # kept as it was


@pytest.mark.parametrize("args", [
    ["compare"],
    ["compare", "missing.csv"],
    ["compare", "graph-30.txt", "-o", "table.txt"],
])
def test_bad_input_is_one_line_and_exit_2(runs: Path, args: list[str],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    usage_error(args, runs, monkeypatch, capsys)
