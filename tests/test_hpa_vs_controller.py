"""benchmarks/hpa_vs_controller.py's pure parts: the pods' windows summed on the wall clock
(the demand the replay's HPA runs over), the controller's count at each minute's end, the
load's stages. The benchmark itself runs on the node."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.hpa_vs_controller import minutes_of, parse_stages
from client.advise.pooled import summed_rates
from tests.test_advise_hpa import ramp_capture
from tests.test_commands_import import ZERO


def test_two_pods_windows_sum_to_twice_one_on_the_wall_clock(tmp_path: Path) -> None:
    """The ramp (0.2 CPU for 60 s, then 0.5) recorded twice: summed, 0.4 then 1.0 CPU a
    second; from a wall-clock start 10 s into the window, the rows start there."""
    one, _ = ramp_capture(tmp_path)
    (tmp_path / "b").mkdir()
    two = tmp_path / "b" / "t.cgroup.csv"
    shutil.copy(one, two)
    shutil.copy(tmp_path / "t.json", tmp_path / "b" / "t.json")
    (tmp_path / "b" / "t.cgroup.csv").rename(tmp_path / "b" / "ns_late.cgroup.csv")
    (tmp_path / "b" / "t.json").rename(tmp_path / "b" / "ns_late.json")
    two = tmp_path / "b" / "ns_late.cgroup.csv"   # pod "late" of namespace "ns", as fetched
    t0 = ZERO / 1e9
    rows = summed_rates([one, two], t0, t0 + 120)
    assert len(rows) == 120 and rows[0][:2] == (0.0, 1.0)
    assert [round(c, 2) for _s, _e, c in rows[5:55]] == [0.4] * 50
    assert [round(c, 2) for _s, _e, c in rows[65:115]] == [1.0] * 50
    later = summed_rates([one], t0 + 10, t0 + 70)
    assert [round(c, 2) for _s, _e, c in later[:45]] == [0.2] * 45
    assert round(later[55][2], 2) == 0.5
    # a pod's rows before it was Ready are its start: left out
    started = summed_rates([one, two], t0, t0 + 120, {"late": t0 + 30.5})
    assert [round(c, 2) for _s, _e, c in started[5:25]] == [0.2] * 20
    assert [round(c, 2) for _s, _e, c in started[35:55]] == [0.4] * 20


def test_the_controllers_count_is_the_last_poll_before_each_minutes_end() -> None:
    counts = [(0.0, 1), (58.0, 1), (59.9, 2), (60.0, 3), (119.0, 3), (150.0, 1)]
    assert minutes_of(counts, 180.0) == [2, 3, 1]
    assert minutes_of([(70.0, 2)], 120.0) == [None, 2]


def test_stages_are_rate_seconds_pairs() -> None:
    assert parse_stages("4:120,0:30") == [(4.0, 120.0), (0.0, 30.0)]
    with pytest.raises(SystemExit, match="RATE:SECONDS"):
        parse_stages("4:0")
