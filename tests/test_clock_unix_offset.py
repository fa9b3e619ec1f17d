"""A file of Unix times on a clock a few ms off the host's (issue 57 item 4): ``import`` and
``advise --passive`` search the shifts near its own clock (``client.analysis.clock``'s
``UNIX_NEAR_NS``) and apply the one that fits clearly better, saying how much better.

On the kernel's capture in tests/data/loadshape (hey -c 1 at 0.3 CPU; the kernel throttled
29 periods; one connection, so each throttle holds the one request in flight): hey's
requests written as Locust's CSV of Unix times, on hey's clock (``hey.start`` plus the
~55 ms of its start-up the relative import finds) moved by ``off_ms``. The throttling repeats
every period, so no line-up over the whole check is unambiguous: the clock was kept as it
was, and a file 12 ms off marked 47 requests for the kernel's 29."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from client.data.files import read_run
from client.data.timeline import read_timeline
from tests.support import http_timing

DATA = Path(__file__).parent / "data" / "loadshape"
MS = 1_000_000


def hey_zero_s(tmp_path: Path) -> float:
    """Where hey's zero lies, as the relative import lines it up (its start-up after
    ``hey.start``)."""
    from client.commands import main

    assert main(["import", "hey.csv", "--timeline", "hey-record.cgroup.csv", "--start",
                 (DATA / "hey.start").read_text().strip(), "--name", "hey"]) == 0
    meta = json.loads((tmp_path / "raw-data" / "hey.json").read_text())
    shift = meta["imported"]["aligned_s"]
    assert 0.04 <= shift <= 0.07, shift   # the README's ~55 ms
    return float((DATA / "hey.start").read_text()) + shift


def locust_file(path: Path, zero_s: float, off_ms: float) -> None:
    rows = list(csv.DictReader((DATA / "hey.csv").read_text().splitlines()))
    lines = ["timestamp,request_type,name,response_time_ms,response_length,status_code,"
             "exception"]
    lines += [f"{zero_s + float(r['offset']) + off_ms / 1e3:.6f},GET,/burn,"
              f"{float(r['response-time']) * 1e3:.3f},10,{r['status-code']}," for r in rows]
    path.write_text("\n".join(lines) + "\n")


def delayed(path: Path) -> int:
    return sum(1 for r in read_run(path).records if r.cgroup_held_ns)


@pytest.fixture()
def capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[float, int]:
    for name in ("hey.csv", "hey-record.cgroup.csv", "hey-record.json"):
        shutil.copy(DATA / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    samples = read_timeline(tmp_path / "hey-record.cgroup.csv")
    return hey_zero_s(tmp_path), samples[-1].nr_throttled - samples[0].nr_throttled


@pytest.mark.parametrize("off_ms", [-20, 12, 20])
def test_a_unix_clock_a_few_ms_off_is_moved_back(off_ms: int, tmp_path: Path,
                                                capture: tuple[float, int],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    zero_s, periods = capture
    locust_file(tmp_path / "l.csv", zero_s, off_ms)
    from client.commands import main

    capsys.readouterr()
    assert main(["import", "l.csv", "--timeline", "hey-record.cgroup.csv", "--name",
                 "moved"]) == 0
    out = capsys.readouterr().out
    assert "applied: a shift of " in out and "x better" in out, out
    meta = json.loads((tmp_path / "raw-data" / "moved.json").read_text())
    assert meta["imported"]["aligned_s"] * 1e3 == pytest.approx(-off_ms, abs=4)
    marked = delayed(tmp_path / "raw-data" / "moved.csv")
    assert abs(marked - periods) <= 0.15 * periods, (marked, periods)

    assert main(["import", "l.csv", "--timeline", "hey-record.cgroup.csv", "--name", "kept",
                 "--no-align"]) == 0
    kept = delayed(tmp_path / "raw-data" / "kept.csv")
    assert kept > 1.15 * periods, (kept, periods)   # the clock off: the fast ones beside


def test_on_its_own_clock_it_stays(tmp_path: Path, capture: tuple[float, int]) -> None:
    zero_s, periods = capture
    locust_file(tmp_path / "l.csv", zero_s, 0)
    from client.commands import main

    assert main(["import", "l.csv", "--timeline", "hey-record.cgroup.csv", "--name",
                 "same"]) == 0
    meta = json.loads((tmp_path / "raw-data" / "same.json").read_text())
    assert abs(meta["imported"]["aligned_s"]) <= 0.002
    assert abs(delayed(tmp_path / "raw-data" / "same.csv") - periods) <= 0.15 * periods


def test_advise_passive_applies_it_and_says_so(tmp_path: Path,
                                               capture: tuple[float, int]) -> None:
    zero_s, _periods = capture
    locust_file(tmp_path / "l.csv", zero_s, 20)
    done = http_timing("advise", "--passive", "--timeline", "hey-record.cgroup.csv",
                       "--requests-from", "l.csv", "--p99", "60",
                       "--json", cwd=tmp_path)
    assert done.returncode in (0, 3), done.stderr
    clock = json.loads(done.stdout)["requests"]["clock"]
    assert clock["applied"] and clock["shift_s"] * 1e3 == pytest.approx(-20, abs=4), clock
    assert clock["says"].startswith("aligned: a shift of -0.0") and "better" in clock["says"]
    assert "applied to the file's times" in clock["says"]
