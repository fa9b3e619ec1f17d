"""How sure a passive answer is: the range of limits that meets the goal under what the record
could not show (pure: the searches are the caller's, ``client.advise.passive``).

Each thing the record could not show is an *unknown*, and each unknown has bounding
assumptions: the CPUs the hidden demand ran on (1, or as many as were in flight), the
tail's order statistic (with n requests the p99 is one of few requests: its confidence
interval spans the neighbouring order statistics, :func:`tail_ms`), the load's shape when it
was inferred (open or closed). The same search runs under each assumption; the smallest and
largest answers are the range (:func:`range_of`), and the unknowns that moved it most are
named first; a widening no search bounds (a p99 of fewer requests than it takes for their
largest to bound it, :func:`tail_covered`) is named after them. A range within ±25 % of the
answer is *sure*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SURE", "Bound", "Range", "range_of", "tail_covered", "tail_ms", "tail_needs",
           "tail_rank"]

SURE = 0.25        # a range within ±25 % of the answer is sure
Z = 1.96           # the tail's ranks: a 95 % interval
SIDE = 0.975       # ... 97.5 % on each side
EXACT_BELOW = 1000  # under this many values, the ranks are the binomial's exact quantiles


@dataclass(frozen=True)
class Bound:
    """The answer under one bounding assumption of an unknown: ``millicores`` None, no limit
    up to the ceiling met the goal under it."""

    unknown: str        # what the record could not show, in words ("the hidden demand")
    assumption: str     # the assumption, in words ("on 1 CPU")
    millicores: int | None
    # a widening no search can bound (the tail beyond the largest request): named in any
    # case, with ``assumption`` saying why; its ``millicores`` is not a limit of the range
    note: bool = False


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
    answers = [b.millicores for b in bounds if not b.note]
    low = min([answer, *(m for m in answers if m is not None)])
    high = None if None in answers else max([answer, *(m for m in answers if m is not None)])
    moved: dict[str, float] = {}
    said: dict[str, list[str]] = {}
    notes = [f"{b.unknown} ({b.assumption})" for b in bounds if b.note]
    for b in bounds:
        if b.note:
            continue
        away = (math.inf if b.millicores is None
                else abs(b.millicores - answer) / max(1, answer))
        if away <= 0:
            continue
        moved[b.unknown] = max(moved.get(b.unknown, 0.0), away)
        at = ("none met" if b.millicores is None else f"{b.millicores / 1000:g} CPU")
        said.setdefault(b.unknown, []).append(f"{b.assumption}: {at}")
    order = sorted(moved, key=lambda u: -moved[u])
    return Range(answer, low, high, ceiling,
                 tuple(f"{u} ({', '.join(said[u])})" for u in order) + tuple(notes))


def _binomial_cdf(n: int, p: float) -> list[float]:
    """``P(B <= k)`` for ``k`` in ``0..n``, ``B`` binomial(``n``, ``p``)."""
    out, total = [], 0.0
    for k in range(n + 1):
        log = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
               + (k * math.log(p) if k else 0.0) + ((n - k) * math.log1p(-p) if n - k else 0.0))
        total += math.exp(log)
        out.append(min(1.0, total))
    return out


def tail_rank(n: int, q: float, side: int) -> int:
    """The rank (0-based, ascending) of the order statistic that bounds the ``q``-th
    percentile of ``n`` values from below (``side`` -1), at it (0) or above (+1), each side
    97.5 % of the time (19 times in 20 between them). The number of values below the
    percentile is binomial(``n``, ``p = q / 100``): under :data:`EXACT_BELOW` values the
    ranks are its exact quantiles (the order statistics' confidence bound; above the largest
    value no rank can bound it: the largest, and :func:`tail_covered` says how often it
    does); from there on, ``n p`` within ``1.96 sqrt(n p (1 - p))`` ranks."""
    p = q / 100.0
    at = min(n - 1, max(0, math.ceil(n * p) - 1))
    if side == 0 or n <= 0:
        return at
    if n < EXACT_BELOW:
        cdf = _binomial_cdf(n, p)
        if side > 0:   # the smallest u (1-based) with P(B <= u - 1) >= 97.5 %
            return next((u - 1 for u in range(1, n + 1) if cdf[u - 1] >= SIDE), n - 1)
        # the largest l (1-based) with P(B >= l) = 1 - P(B <= l - 1) >= 97.5 %
        return next((l - 1 for l in range(n, 0, -1) if 1 - cdf[l - 1] >= SIDE), 0)
    spread = Z * math.sqrt(n * p * (1 - p))
    rank = math.ceil(n * p) - 1 + side * math.ceil(spread)
    return min(n - 1, max(0, rank))


def tail_covered(n: int, q: float) -> float:
    """How often the largest of ``n`` values lies above their ``q``-th percentile: ``1 -
    p^n``. Under :data:`SIDE` (97.5 %), no order statistic bounds the tail from above."""
    return 1.0 - (q / 100.0) ** n if n > 0 else 0.0


def tail_needs(q: float) -> int:
    """The fewest values whose largest bounds their ``q``-th percentile from above 97.5 % of
    the time (368 for the p99)."""
    return math.ceil(math.log(1 - SIDE) / math.log(q / 100.0))


def tail_ms(values_ms: Sequence[float], q: float, side: int) -> float:
    """The order statistic of ``values_ms`` that :func:`tail_rank` gives (NaN: no value)."""
    if not values_ms:
        return math.nan
    ordered = sorted(values_ms)
    return ordered[tail_rank(len(ordered), q, side)]
