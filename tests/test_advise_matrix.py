"""benchmarks/advise_matrix.py's verdict of a cell (issue 57): the passive answer within 25 % of
the live one, else its range must say so (the live answer inside it, ``sure`` false, or no
answer with its reason); the matrix meets its goal with 90 % of the cells within and no cell
that misleads; a cell whose two halves ran on a machine loaded differently is marked, and where
it neither is within nor says so it is not comparable, not misleading. Pure logic: the figures
are the benchmark's, or files made up here."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from benchmarks.advise_matrix import (
    Pace,
    live_answers,
    live_pace,
    live_span,
    load_differs,
    pace_of,
    summary,
    verdict,
)


def test_within_25_percent_either_way_is_within_whatever_the_range() -> None:
    for passive in (0.75, 1.0, 1.25):
        v = verdict(passive, 2.0, 3.0, True, 1.0)
        assert v.within and v.says_so, passive
        assert v.ratio is not None and abs(v.ratio - passive) < 1e-12
    assert v.in_range is False and v.word == "misses live"


def test_beyond_25_percent_the_range_must_hold_the_live_answer() -> None:
    held = verdict(0.5, 0.4, 1.2, True, 1.0)
    assert not held.within and held.in_range and held.says_so and held.word == "holds live"
    missed = verdict(0.5, 0.4, 0.6, True, 1.0)
    assert not missed.within and missed.in_range is False and not missed.says_so
    assert not verdict(0.74, 0.7, 0.8, True, 1.0).within


def test_live_answers_that_differ_are_the_reference_s_range() -> None:
    # live said 0.31 and 0.48 on the same load: within 25 % of either is within
    for passive in (0.2325, 0.354, 0.6):
        v = verdict(passive, passive, passive, True, 0.31, live_high=0.48)
        assert v.within and v.says_so, passive
    assert verdict(0.4, 0.4, 0.4, True, 0.31, live_high=0.48).ratio == 1.0
    low = verdict(0.2, 0.2, 0.2, True, 0.31, live_high=0.48)
    assert not low.within and low.ratio is not None and abs(low.ratio - 0.2 / 0.31) < 1e-12
    high = verdict(0.7, 0.7, 0.7, True, 0.31, live_high=0.48)
    assert not high.within and high.ratio is not None and abs(high.ratio - 0.7 / 0.48) < 1e-12
    # a passive range overlapping the live span holds a live answer
    assert verdict(0.7, 0.45, 0.8, True, 0.31, live_high=0.48).in_range
    assert verdict(0.7, 0.5, 0.8, True, 0.31, live_high=0.48).in_range is False


def test_live_answers_are_read_in_run_order_and_spanned(tmp_path: Path) -> None:
    for name, cpus in (("live", 0.48), ("live-2", None), ("live-3", 0.31)):
        answer = {"recommended": None if cpus is None else {"cpus": cpus}}
        (tmp_path / f"{name}.json").write_text(json.dumps(answer))
    (tmp_path / "live-5.json").write_text("{}")   # after a gap: not a run of this cell
    answers, first = live_answers(tmp_path)
    assert answers == [0.48, None, 0.31] and first == {"recommended": {"cpus": 0.48}}
    assert live_span(answers) == (0.31, 0.48)
    assert live_span([None]) == (None, None)
    assert live_answers(tmp_path / "none") == ([], {})


def test_a_range_open_above_holds_any_live_answer_over_its_low_end() -> None:
    assert verdict(0.5, 0.45, None, False, 1.7).in_range
    assert verdict(0.5, 0.45, None, False, 0.4).in_range is False


def test_not_sure_says_so_even_where_the_range_misses() -> None:
    v = verdict(0.5, 0.45, 0.55, False, 1.0)
    assert not v.within and v.in_range is False and v.says_so
    assert v.word == "misses live, not sure"


def test_an_answer_without_a_range_must_be_within() -> None:
    assert not verdict(0.5, None, None, None, 1.0, has_range=False).says_so
    v = verdict(0.9, None, None, None, 1.0, has_range=False)
    assert v.within and v.in_range is None and v.word == "no range"


def test_no_passive_answer_is_never_within_but_says_why() -> None:
    v = verdict(None, None, None, None, 0.6)
    assert not v.within and v.says_so and v.ratio is None


def test_where_live_found_no_limit_only_no_passive_answer_agrees() -> None:
    assert verdict(None, None, None, None, None).within
    v = verdict(0.8, 0.7, 0.9, True, None)
    assert not v.within and not v.says_so
    assert verdict(0.8, 0.7, 0.9, False, None).says_so


def test_the_goal_is_ninety_percent_within_and_no_cell_that_misleads() -> None:
    within = verdict(1.0, 0.9, 1.1, True, 1.0)
    said = verdict(None, None, None, None, 1.0)
    silent = verdict(0.5, 0.45, 0.55, True, 1.0)
    assert summary([within] * 9 + [said])["met"]
    assert not summary([within] * 8 + [said] * 2)["met"]     # 80 % within
    s = summary([within] * 19 + [silent])
    assert s["share_within"] == 0.95 and s["misleading"] == 1 and not s["met"]
    assert not summary([])["met"]


def test_no_answer_that_claims_the_goal_cannot_be_met_misleads_where_live_met_it() -> None:
    v = verdict(None, None, None, None, 0.6, unmeetable=True)
    assert not v.within and not v.says_so and v.word == "says unmeetable"
    assert verdict(None, None, None, None, None, unmeetable=True).within


def test_a_slower_machine_in_one_half_is_a_load_that_differed() -> None:
    quiet = Pace(5.0, 5.6, 1.0)
    # the same request took twice the wall on the same CPU: the machine was busier live
    said = load_differs(quiet, Pace(5.2, 12.1, 1.0))
    assert said is not None and "5.6 ms recorded, 12.1 live" in said and "×0.46" in said
    assert load_differs(quiet, Pace(7.0, 5.6, 1.0)) is not None   # more CPU a request
    assert load_differs(quiet, Pace(5.5, 6.2, 1.0)) is None       # within 1.15 both ways
    # the same median, a tail 1.22 times heavier: busy at times
    tail = load_differs(Pace(5.0, 22.8, 1.0, 39.3), Pace(5.0, 21.4, 1.0, 32.2))
    assert tail is not None and "p90 39.3 ms recorded, 32.2 live" in tail and "median" not in tail
    # a recording whose requests were mostly delayed: its undelayed ones are the quick ones
    assert load_differs(Pace(5.0, 5.6, 0.3), Pace(5.2, 12.1, 1.0)) is None
    assert load_differs(quiet, Pace(5.2, None, 0.0)) is None      # live: no run unlimited


def test_a_cell_whose_load_differed_is_not_comparable_rather_than_misleading() -> None:
    within = verdict(1.0, 0.9, 1.1, True, 1.0)
    silent = verdict(1.4, 1.3, 1.45, True, 1.0)
    marked = replace(silent, differed="CPU per request ×1.4")
    assert silent.misleads and not marked.misleads and marked.not_comparable
    assert not replace(within, differed="x").not_comparable   # within stays within
    s = summary([within] * 19 + [marked])
    assert (s["misleading"], s["not_comparable"], s["load_differed"]) == (0, 1, 1)
    assert s["within"] == 19 and not s["met"]   # 95 % within, none misleads: measure it again
    s = summary([within] * 19 + [replace(within, differed="x")])
    assert s["load_differed"] == 1 and s["not_comparable"] == 0 and s["met"]
    s = summary([within] * 8 + [marked] * 2)
    assert s["share_within"] == 0.8 and not s["met"]          # never counted within


def test_pace_is_read_from_a_kept_run_and_live_takes_its_unlimited_run(tmp_path: Path) -> None:
    def run(stem: str, usage_ms: list[int], latencies_ms: list[float],
            held: list[int]) -> None:
        (tmp_path / f"{stem}.cgroup.csv").write_text(
            "t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n" + "".join(
                f"{i * 10**8},{u * 10**6},{i},0,0\n" for i, u in enumerate(usage_ms)))
        (tmp_path / f"{stem}.csv").write_text(
            "seq,start_ns,latency_ns,status,cgroup_nr_throttled,cgroup_held_ns\n" + "".join(
                f"{i},{i * 10**7},{round(v * 10**6)},200,{int(h > 0)},{h}\n"
                for i, (v, h) in enumerate(zip(latencies_ms, held))))

    run("rec", [0, 12, 20], [5, 6, 40, 7], [0, 0, 30 * 10**6, 0])
    rec = pace_of(tmp_path / "rec")
    assert rec.cpu_ms == 5.0 and rec.free_share == 0.75 and rec.free_ms == 6.0
    assert rec.free_p90_ms == 6.0   # of 5, 6, 7: the 90th percentile's rank below it
    (tmp_path / "live").mkdir()
    for name, used in (("live/a-none", 40), ("live/a-0.5", 24), ("live/a-0.4", 28)):
        run(name, [0, used], [12.0] * 4, [0] * 4)
    live = live_pace(tmp_path / "live")
    assert live is not None and live.cpu_ms == 7.0 and live.free_ms == 12.0
    said = load_differs(rec, live)
    assert said is not None and "CPU per request 5.00 ms recorded, 7.00 live" in said
    assert live_pace(tmp_path / "none-here") is None
