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

MS = 1_000_000

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


def test_a_unix_time_file_on_a_clock_off_the_hosts_is_aligned_and_says_so(
        tmp_path: Path) -> None:
    """A vegeta file of Unix times from a clock 370 ms ahead of the host's, against a
    timeline whose throttling comes and goes (7 stretches of 60 ms, irregular): lined up as
    ``import`` lines a Unix-time file up (by an unambiguous line-up only), the shift applied
    to the file's times; ``--no-align`` keeps them."""
    from tests.test_analysis_clock import sequential_requests
    from tests.test_commands_import import ZERO
    from tests.test_passive_range import timeline

    throttled = (10, 17, 31, 40, 55, 58, 73)
    stretches = [((p * 100 + 40) * MS, (p * 100 + 100) * MS) for p in throttled]

    def used(t: int) -> float:   # one CPU, except while throttled
        return t - sum(max(0, min(t, e // MS) - s // MS) for s, e in stretches)

    timeline(tmp_path, 9.0, 0.4, used, lambda p: p in throttled, held_ms=60)
    requests = [(s, e) for s, e in sequential_requests(stretches, 8500 * MS) if s >= 500 * MS]
    ahead = 370 * MS
    (tmp_path / "v.csv").write_text("".join(
        f"{ZERO + s + ahead},200,{e - s},0,78,,,,{i},GET,http://x/y,\n"
        for i, (s, e) in enumerate(requests)))
    slow = sum(1 for s, e in requests if any(a < e and b > s for a, b in stretches))
    args = ("advise", "--passive", "--timeline", "t.cgroup.csv", "--requests-from", "v.csv",
            "--p99", "200", "--json")
    aligned = http_timing(*args, cwd=tmp_path)
    assert aligned.returncode in (0, 3), aligned.stderr
    said = json.loads(aligned.stdout)["requests"]
    clock = said["clock"]
    # to within two of the timeline's 10 ms rows (where in its row a throttle ended)
    assert clock["applied"] and abs(clock["shift_s"] + 0.370) <= 0.02, clock
    assert "applied to the file's times (--no-align keeps the stated clock)" in clock["says"]
    assert said["delayed_by_throttling"] == slow
    kept = json.loads(http_timing(*args, "--no-align", cwd=tmp_path).stdout)["requests"]
    assert kept["clock"] == {"shift_s": 0.0, "applied": False,
                             "says": "the file's own clock, not aligned: --no-align"}
    assert kept["delayed_by_throttling"] != slow
