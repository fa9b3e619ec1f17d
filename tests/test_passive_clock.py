"""``advise --passive --requests-from`` a load tool's file of relative times (hey's, oha's):
placed by ``--start`` and lined up with the throttling as ``import`` lines it up
(``client.analysis.clock.align_records``), on the kernel's capture in tests/data/loadshape
(hey -c 1 at 0.3 CPU, 29 periods throttled; hey's zero came about 55 ms after its
``--start``); ``--no-align`` keeps the stated clock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from client.data.timeline import read_timeline
from tests.support import http_timing

DATA = Path(__file__).parent / "data" / "loadshape"


def _copy(tmp_path: Path) -> tuple[str, int]:
    for name in ("hey.csv", "hey-record.cgroup.csv", "hey-record.json"):
        shutil.copy(DATA / name, tmp_path / name)
    samples = read_timeline(tmp_path / "hey-record.cgroup.csv")
    return (DATA / "hey.start").read_text().strip(), samples[-1].nr_throttled - \
        samples[0].nr_throttled


def test_a_hey_file_is_aligned_with_the_throttling_and_says_so(tmp_path: Path) -> None:
    start, periods = _copy(tmp_path)
    args = ("advise", "--passive", "--timeline", "hey-record.cgroup.csv", "--requests-from",
            "hey.csv", "--start", start, "--p99", "60")
    aligned = http_timing(*args, "--json", cwd=tmp_path)
    assert aligned.returncode in (0, 3), aligned.stderr
    requests = json.loads(aligned.stdout)["requests"]
    clock = requests["clock"]
    assert clock["applied"] and 0.04 <= clock["shift_s"] <= 0.07   # hey's start-up
    assert clock["says"].startswith("aligned: a shift of +0.0") and "better" in clock["says"]
    assert "applied to --start (--no-align keeps the stated clock)" in clock["says"]
    # one connection: each throttle holds the one request in flight
    assert abs(requests["delayed_by_throttling"] - periods) <= 0.15 * periods
    text = http_timing(*args, cwd=tmp_path)
    assert f"requests' clock: {clock['says']}" in text.stdout.splitlines()

    stated = http_timing(*args, "--no-align", "--json", cwd=tmp_path)
    assert stated.returncode in (0, 3), stated.stderr
    kept = json.loads(stated.stdout)["requests"]
    assert kept["clock"] == {"shift_s": 0.0, "applied": False,
                             "says": "the stated clock (--start), not aligned: --no-align"}
    assert kept["delayed_by_throttling"] > 1.15 * periods   # the fast ones beside each stretch


def test_a_relative_file_needs_its_start_and_start_needs_a_file(tmp_path: Path) -> None:
    _copy(tmp_path)
    base = ("advise", "--passive", "--timeline", "hey-record.cgroup.csv", "--p99", "60")
    bare = http_timing(*base, "--requests-from", "hey.csv", cwd=tmp_path)
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1, bare.stderr
    assert "hey.csv: hey-csv times are relative to the tool's own start: give --start" \
        in bare.stderr
    alone = http_timing(*base, "--start", "1796161732.5", cwd=tmp_path)
    assert alone.returncode == 2 and "--start goes with --requests-from FILE" in alone.stderr
    live = http_timing("advise", "--p99", "60", "--no-align", cwd=tmp_path)
    assert live.returncode == 2 and "--no-align: with --passive only" in live.stderr
