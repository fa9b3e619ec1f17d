"""A five-column timeline (the node agent's rows) is read into one array (``Rows``), and what
``cluster`` works out from it on the columns at once is what the samples give a row at a
time: the throttles, the period grid, the demand with its bounds, the usage a second. On
random rows with the awkward cases: counters that stand still, grow within half a period
or exactly at it, fall back; throttled time without periods and periods without time."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from client.analysis.cluster import _per_second
from client.analysis.replay import ReplayError, demand_of
from client.data.attribution import period_phase, throttle_events
from client.data.timeline import (CgroupSample, Rows, TimelineError, read_timeline,
                                  timeline_columns, timeline_rows)

PERIOD_NS = 100_000_000


def random_rows(rng: random.Random) -> list[tuple[int, int, int, int, int]]:
    p = PERIOD_NS
    t = rng.randrange(0, 10 * p)
    usage = periods = nr = held = rng.randrange(0, 1000)
    rows = []
    quiet = rng.random() < 0.3   # a pod whose quota never bit
    for _ in range(rng.randrange(2, 120)):
        rows.append((t, usage, periods, nr, held))
        t += rng.choice([p, p, p // 2, p // 2 - 1, p // 2 + 1, p // 10, 1, 0,
                         rng.randrange(1, 3 * p)])
        usage += rng.choice([0, 0, 1, rng.randrange(0, p), rng.randrange(-5, 0)])
        periods += rng.choice([0, 1, 1, 2])
        if not quiet:
            nr += rng.choice([0, 0, 1, 2, -1])
            held += rng.choice([0, 0, rng.randrange(1, 2 * p), -3])
    return rows


def written(tmp_path: Path, rows: list[tuple[int, ...]], name: str = "x") -> Path:
    path = tmp_path / f"{name}.cgroup.csv"
    path.write_text(",".join(timeline_columns()) + "\n"
                    + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def both(tmp_path: Path, rows: list[tuple[int, ...]]) -> tuple[Rows, list[CgroupSample]]:
    path = written(tmp_path, rows)
    got = timeline_rows(path)
    assert isinstance(got, Rows), got
    return got, [CgroupSample(*r) for r in rows]


def demand_or_why(samples: object, period_ns: int) -> object:
    try:
        return demand_of(samples, period_ns)   # type: ignore[arg-type]
    except ReplayError as exc:
        return str(exc)


@pytest.mark.parametrize("seed", range(4))
def test_the_columns_give_what_the_samples_give(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    quiet = 0
    for _ in range(150):
        rows = random_rows(rng)
        columnar, samples = both(tmp_path, rows)
        period = rng.choice([PERIOD_NS, PERIOD_NS // 2, 3])
        assert throttle_events(columnar, period) == throttle_events(samples, period), rows
        quiet += not throttle_events(samples, period)
        assert period_phase(columnar, period) == period_phase(samples, period), rows
        got, want = demand_or_why(columnar, period), demand_or_why(samples, period)
        assert got == want, rows
        if not isinstance(want, str):   # the same types too: ints and floats, not numpy's
            assert all(type(s) is int for s in got.starts_ns), got   # type: ignore[attr-defined]
            assert all(type(w) is float for w in got.wanted_ns), got   # type: ignore[attr-defined]
            assert all(type(v) is int for b in got.throttles + got.counted   # type: ignore[attr-defined]
                       for v in b), got
        assert _per_second(columnar) == _per_second(samples), rows
    assert quiet > 20   # the counters standing still took the short way often enough


def test_rows_read_as_samples_made_once(tmp_path: Path) -> None:
    rows = [(0, 5, 1, 0, 0), (100, 9, 2, 1, 7), (250, 9, 2, 1, 7)]
    got, samples = both(tmp_path, rows)
    assert len(got) == 3 and got[1] == samples[1] and got[-1] == samples[-1]
    assert got == samples and samples == got and list(got) == samples
    assert isinstance(got[1:], Rows) and got[1:] == samples[1:]
    assert got.samples() is got.samples()   # made once
    assert read_timeline(written(tmp_path, rows)) == samples
    assert type(read_timeline(written(tmp_path, rows))) is list
    with pytest.raises(IndexError):
        got[3]


def test_a_file_of_a_header_alone_is_no_rows(tmp_path: Path) -> None:
    path = written(tmp_path, [])
    assert timeline_rows(path) == [] and read_timeline(path) == []
    path.write_text(",".join(timeline_columns()) + "\n\n\n")
    assert read_timeline(path) == []


@pytest.mark.parametrize("line", ["1,2,3,4,99999999999999999999", "1, 2 ,3,4,5", "\"1\",2,3,4,5",
                                  "1_0,2,3,4,5"])
def test_what_numpy_will_not_read_the_csv_reader_reads(tmp_path: Path, line: str) -> None:
    path = tmp_path / "x.cgroup.csv"
    path.write_text(",".join(timeline_columns()) + "\n0,1,1,0,0\n" + line + "\n")
    fields = [int(v) for v in line.replace('"', "").split(",")]
    assert read_timeline(path) == [CgroupSample(0, 1, 1, 0, 0), CgroupSample(*fields)]


@pytest.mark.parametrize("line, why", [("1,2,3,4", "line 3: 4 fields, expected 5"),
                                       ("1,2,3,4,5.5", "line 3: invalid literal"),
                                       ("1,2,3,4,5,6", "line 3: 6 fields, expected 5")])
def test_a_bad_row_is_still_one_line_naming_it(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "x.cgroup.csv"
    path.write_text(",".join(timeline_columns()) + "\n0,1,1,0,0\n" + line + "\n")
    with pytest.raises(TimelineError, match=why):
        timeline_rows(path)


def test_the_columns_are_int64_rows_of_five(tmp_path: Path) -> None:
    got, _ = both(tmp_path, [(0, 5, 1, 0, 0), (100, 9, 2, 1, 7)])
    assert got.columns.dtype == np.int64 and got.columns.shape == (2, 5)
