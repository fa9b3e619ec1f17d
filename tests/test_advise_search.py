"""The advice's one search driver (``client.advise.search``), on judges the tests make up: it
calls the judge at the limits the pure stepping asks for, keeps every row in the order judged,
runs a limit once more when the rules say (a narrow verdict, a miss above a met limit, an
answer met once), and stops at ``max_runs`` limits, saying why each time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from client.advise.search import Rules, Search
from client.analysis.advise import TOLERANCE


@dataclass(frozen=True)
class Row:
    millicores: int
    role: str
    met: bool
    again: bool = False
    narrow: bool = False


def verdicts(rows: Sequence[Row]) -> dict[int, bool]:
    """A limit met when every one of its rows met."""
    out: dict[int, bool] = {}
    for row in rows:
        out[row.millicores] = out.get(row.millicores, True) and row.met
    return out


def edge_judge(edge: int, *, narrow: int | None = None) -> Callable[[int, str, bool], Row]:
    """Meets from ``edge`` millicores up; the row at ``narrow`` says it could flip."""
    def judge(millicores: int, role: str, again: bool) -> Row:
        return Row(millicores, role, millicores >= edge, again, millicores == narrow)
    return judge


def test_the_answer_is_bracketed_within_the_tolerance_each_limit_once() -> None:
    search = Search(edge_judge(420), Rules(verdicts), start=1000, floor=10, ceiling=2000)
    search.run()
    judged = verdicts(search.rows)
    met = min(m for m, ok in judged.items() if ok)
    missed = max(m for m, ok in judged.items() if not ok)
    assert 420 <= met <= missed * (1 + TOLERANCE) and missed < 420
    assert len({r.millicores for r in search.rows}) == len(search.rows)   # deterministic
    assert search.rows[0].millicores == 1000 and {r.role for r in search.rows} == {"search"}


def test_a_narrow_row_is_run_once_more() -> None:
    search = Search(edge_judge(420, narrow=800), Rules(verdicts, lambda rows: rows[0].narrow),
                    start=800, floor=10, ceiling=2000)
    rows = search.at(800, "guess")
    assert [(r.millicores, r.role, r.again) for r in rows] == [(800, "guess", False),
                                                               (800, "guess", True)]
    assert search.rows == rows


def test_a_doubtful_miss_is_rechecked_and_the_answer_confirmed() -> None:
    said: list[str] = []
    rechecked: set[int] = set()

    def recheck(rows: Sequence[Row]) -> int | None:
        # a miss at 1500 above a met 1000, once: run it again before believing it
        seen = {r.millicores for r in rows}
        if {1000, 1500} <= seen and 1500 not in rechecked:
            rechecked.add(1500)
            return 1500
        return None

    def confirm(rows: Sequence[Row]) -> int | None:
        judged = verdicts(rows)
        best = min((m for m, ok in judged.items() if ok), default=None)
        return None if best is None or sum(r.millicores == best for r in rows) > 1 else best

    flaky = {1500: [False, True]}      # 1500 misses once, then meets

    def judge(millicores: int, role: str, again: bool) -> Row:
        if millicores in flaky and flaky[millicores]:
            return Row(millicores, role, flaky[millicores].pop(0))
        return Row(millicores, role, millicores >= 420)

    search = Search(judge, Rules(lambda rows: {r.millicores: r.met for r in rows},
                                 recheck=recheck, confirm=confirm),
                    start=1000, floor=10, ceiling=2000, say=said.append)
    search.once(1000, "guess")
    search.once(1500, "usage")
    search.run()
    assert [r.role for r in search.rows if r.millicores == 1500] == ["usage", "search"]
    assert any("1.5 CPU missed although a smaller limit met" in line for line in said)
    confirmed = [r for r in search.rows if r.role == "confirm"]
    assert len(confirmed) == 1 and confirmed[0].met
    assert any(f"{confirmed[0].millicores / 1000:g} CPU met the target in one run" in line
               for line in said)


def test_max_runs_ends_the_search_and_says_so() -> None:
    said: list[str] = []
    search = Search(edge_judge(420), Rules(verdicts), start=2000, floor=10, ceiling=2000,
                    max_runs=3, say=said.append)
    search.run()
    assert len({r.millicores for r in search.rows}) == 3
    assert said == ["advise: --max-runs 3 reached; the answer is the bracket so far"]
