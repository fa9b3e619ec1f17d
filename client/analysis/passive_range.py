"""How sure a passive answer is: the range of limits that meets the goal under what the record
could not show (pure: the searches are the caller's, ``client.advise.passive``).

Each thing the record could not show is an *unknown*, and each unknown has bounding
assumptions: the CPUs the hidden demand ran on (1, or as many as were in flight), the
tail's order statistic (with n requests the p99 is one of few requests: its confidence
interval spans the neighbouring order statistics, :func:`tail_ms`), the load's shape when it
was inferred (open or closed). The same search runs under each assumption; the smallest and
largest answers are the range (:func:`range_of`), and the unknowns that moved it most are
named first. A range within ±25 % of the answer is *sure*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SURE", "Bound", "Range", "range_of", "tail_ms", "tail_rank"]

SURE = 0.25        # a range within ±25 % of the answer is sure
Z = 1.96           # the tail's ranks: a 95 % interval


@dataclass(frozen=True)
class Bound:
    """The answer under one bounding assumption of an unknown: ``millicores`` None, no limit
    up to the ceiling met the goal under it."""

    unknown: str        # what the record could not show, in words ("the hidden demand")
    assumption: str     # the assumption, in words ("on 1 CPU")
    millicores: int | None


@dataclass(frozen=True)
class Range:
    """The limits that meet the goal under the unknowns (``high`` None: under one of them, no
    limit up to ``ceiling`` met it) and the unknowns that widened it, most first."""

    answer: int
    low: int
    high: int | None
    ceiling: int
    widened_by: tuple[str, ...]

    @property
    def sure(self) -> bool:
        """The range lies within ±25 % of the answer."""
        return (self.high is not None and self.low >= (1 - SURE) * self.answer
                and self.high <= (1 + SURE) * self.answer)

    def words(self) -> str:
        """The range and what widens it, in one line."""
        high = (f"over {self.ceiling / 1000:g}" if self.high is None
                else f"{self.high / 1000:g}")
        said = f"range {self.low / 1000:g} to {high} CPU: "
        said += ("sure (within ±25 % of the answer)" if self.sure
                 else "not sure (wider than ±25 % of the answer)")
        if self.widened_by:
            said += "; widened by " + "; ".join(self.widened_by)
        return said


def range_of(answer: int, bounds: Sequence[Bound], ceiling: int) -> Range:
    """The range of ``answer`` and the answers under ``bounds`` (see the module docstring);
    an unknown is named where it moved the answer, the one that moved it most first."""
    answers = [b.millicores for b in bounds]
    low = min([answer, *(m for m in answers if m is not None)])
    high = None if None in answers else max([answer, *(m for m in answers if m is not None)])
    moved: dict[str, float] = {}
    said: dict[str, list[str]] = {}
    for b in bounds:
        away = (math.inf if b.millicores is None
                else abs(b.millicores - answer) / max(1, answer))
        if away <= 0:
            continue
        moved[b.unknown] = max(moved.get(b.unknown, 0.0), away)
        at = ("none met" if b.millicores is None else f"{b.millicores / 1000:g} CPU")
        said.setdefault(b.unknown, []).append(f"{b.assumption}: {at}")
    order = sorted(moved, key=lambda u: -moved[u])
    return Range(answer, low, high, ceiling,
                 tuple(f"{u} ({', '.join(said[u])})" for u in order))


def tail_rank(n: int, q: float, side: int) -> int:
    """The rank (0-based, ascending) of the order statistic that bounds the ``q``-th
    percentile of ``n`` values from below (``side`` -1), at it (0) or above (+1): with
    ``n`` values the ``q``-th percentile lies within about ``1.96 sqrt(n p (1 - p))`` ranks
    of ``n q / 100`` (``p = q / 100``), 19 times in 20."""
    p = q / 100.0
    spread = Z * math.sqrt(n * p * (1 - p))
    rank = math.ceil(n * p) - 1 + side * math.ceil(spread)
    return min(n - 1, max(0, rank))


def tail_ms(values_ms: Sequence[float], q: float, side: int) -> float:
    """The order statistic of ``values_ms`` that :func:`tail_rank` gives (NaN: no value)."""
    if not values_ms:
        return math.nan
    ordered = sorted(values_ms)
    return ordered[tail_rank(len(ordered), q, side)]
