"""A timeline's rows read as the agent writes them (five counters, or with level 0's quota
and period) take a short path: the same samples as every other layout's, a quota left
blank none; a row of the wrong length still one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.data.timeline import (CgroupSample, TimelineError, read_timeline,
                                  timeline_columns)


def written(tmp_path: Path, header: tuple[str, ...], rows: list[str]) -> Path:
    path = tmp_path / "x.cgroup.csv"
    path.write_text(",".join(header) + "\n" + "".join(r + "\n" for r in rows))
    return path


def test_the_five_counters_read_as_samples(tmp_path: Path) -> None:
    path = written(tmp_path, timeline_columns(), ["0,5,1,0,0", "100, 9 ,2,1,7"])
    assert read_timeline(path) == [CgroupSample(0, 5, 1, 0, 0), CgroupSample(100, 9, 2, 1, 7)]


def test_level_zeros_quota_reads_with_its_period(tmp_path: Path) -> None:
    path = written(tmp_path, timeline_columns(quotas=True),
                   ["0,5,1,0,0,50000,100000", "100,9,2,1,7,,100000"])
    assert read_timeline(path) == [
        CgroupSample(0, 5, 1, 0, 0, None, None, (), ((50000, 100000),)),
        CgroupSample(100, 9, 2, 1, 7, None, None, (), ((None, 100000),))]


def test_the_other_layouts_read_as_before(tmp_path: Path) -> None:
    path = written(tmp_path, timeline_columns(pressure=True, levels=1, quotas=True),
                   ["0,5,1,0,0,3,,4,2,8,50000,100000,,100000"])
    assert read_timeline(path) == [
        CgroupSample(0, 5, 1, 0, 0, 3, None, ((4, 2, 8),), ((50000, 100000), (None, 100000)))]


def test_a_short_or_bad_row_is_one_line(tmp_path: Path) -> None:
    for row, said in (("0,5,1,0", "4 fields, expected 5"), ("0,5,x,0,0", "line 2")):
        with pytest.raises(TimelineError, match=said):
            read_timeline(written(tmp_path, timeline_columns(), [row]))


def test_the_fast_samples_are_the_frozen_ones(tmp_path: Path) -> None:
    import dataclasses

    got = read_timeline(written(tmp_path, timeline_columns(), ["0,5,1,0,0", "100,9,2,1,7"]))
    slow = [CgroupSample(0, 5, 1, 0, 0), CgroupSample(100, 9, 2, 1, 7)]
    assert got == slow and [hash(s) for s in got] == [hash(s) for s in slow]
    assert [repr(s) for s in got] == [repr(s) for s in slow]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].t_ns = 1   # type: ignore[misc]
    assert dataclasses.replace(got[1], usage_ns=3) == CgroupSample(100, 3, 2, 1, 7)


def test_rows_the_short_path_cannot_split_read_as_csv(tmp_path: Path) -> None:
    # a quoted field, a blank line, a cut-off last line: read as every CSV is
    rows = ['"0",5,1,0,0', "", "100,9,2,1,7"]
    path = written(tmp_path, timeline_columns(), rows)
    path.write_text(path.read_text() + "200,9")
    assert read_timeline(path) == [CgroupSample(0, 5, 1, 0, 0), CgroupSample(100, 9, 2, 1, 7)]
    for row, said in (("0,5,1,0,", "line 3: invalid literal"), ("0,5,1,0,0,1", "line 3: 6 fields")):
        with pytest.raises(TimelineError, match=said):
            read_timeline(written(tmp_path, timeline_columns(), ["1,2,3,4,5", row]))
