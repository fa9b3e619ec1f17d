"""benchmarks/advise_matrix.py's verdict of a cell (issue 57): the passive answer within 25 % of
the live one, else its range must say so (the live answer inside it, ``sure`` false, or no
answer with its reason); the matrix meets its goal with 90 % of the cells within and no cell
that misleads. Pure logic: the figures are the benchmark's."""

from __future__ import annotations

from benchmarks.advise_matrix import summary, verdict


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
