"""The advice's one search: a driver that calls a judge at each limit and keeps its rows.

A *judge* gives one row for a limit (millicores) in a role ("guess", "search", "confirm"...):
a live run (``client.analysis.goal.Measured``) or a replay's verdict
(``client.analysis.passive.JudgedReplay``). The driver asks the pure stepping
(``client.analysis.advise.next_millicores``) for the next limit until the answer is bracketed
within the tolerance, and keeps every row in the order judged.

:class:`Rules` say how the rows become a verdict per limit. A judge whose rows can differ from
one to the next (a live run on a busy machine) also says when a limit is run once more: a
narrow verdict (``repeat``), a miss above a met limit (``recheck``), the answer met by one run
only (``confirm``). A replay is deterministic: its rules are the verdicts alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from client.analysis.advise import TOLERANCE, next_millicores

__all__ = ["Judge", "Rules", "Search"]

R = TypeVar("R")


# one row for (millicores, role, again): ``again``, the same limit once more
Judge = Callable[[int, str, bool], R]


def _never(rows: Sequence[object]) -> bool:
    return False


def _none(rows: Sequence[object]) -> int | None:
    return None


@dataclass(frozen=True)
class Rules(Generic[R]):
    """How rows become verdicts, and what is run once more (see the module docstring)."""

    verdicts: Callable[[Sequence[R]], Mapping[int, bool]]   # millicores -> met
    repeat: Callable[[Sequence[R]], bool] = _never          # a limit's one row could flip
    recheck: Callable[[Sequence[R]], int | None] = _none    # a miss to run again first
    confirm: Callable[[Sequence[R]], int | None] = _none    # the answer, met once only


class Search(Generic[R]):
    """The rows of one search, each from ``judge``, from ``start`` within ``[floor,
    ceiling]`` millicores; ``say`` is told why a limit is run once more or the search ends
    early (``max_runs``: most limits judged)."""

    def __init__(self, judge: Judge[R], rules: Rules[R], *, start: int, floor: int,
                 ceiling: int, max_runs: int | None = None, tolerance: float = TOLERANCE,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.judge, self.rules, self.say = judge, rules, say
        self.start, self.floor, self.ceiling = start, floor, ceiling
        self.max_runs, self.tolerance = max_runs, tolerance
        self.rows: list[R] = []

    def once(self, millicores: int, role: str, *, again: bool = False) -> R:
        """One row, kept."""
        row = self.judge(millicores, role, again)
        self.rows.append(row)
        return row

    def at(self, millicores: int, role: str) -> list[R]:
        """A limit's rows: one, and once more when the rules say its verdict could flip."""
        rows = [self.once(millicores, role)]
        if self.rules.repeat(rows):
            rows.append(self.once(millicores, role, again=True))
        return rows

    def run(self) -> None:
        """On from the rows so far until the answer is bracketed within the tolerance (and,
        where the rules ask, confirmed)."""
        rules = self.rules
        while True:
            recheck = rules.recheck(self.rows)
            if recheck is not None:
                self.say(f"advise: {recheck / 1000:g} CPU missed although a smaller limit met "
                         "the target; once more")
                self.once(recheck, "search")
                continue
            judged = rules.verdicts(self.rows)
            step = next_millicores(judged, start=self.start, floor=self.floor,
                                   ceiling=self.ceiling, tolerance=self.tolerance)
            if step is None:
                confirm = rules.confirm(self.rows)
                if confirm is None:
                    return
                self.say(f"advise: {confirm / 1000:g} CPU met the target in one run; once "
                         "more to confirm it")
                self.once(confirm, "confirm")
                continue
            if self.max_runs is not None and len(judged) >= self.max_runs:
                self.say(f"advise: --max-runs {self.max_runs} reached; the answer is the "
                         "bracket so far")
                return
            self.at(step, "search")
