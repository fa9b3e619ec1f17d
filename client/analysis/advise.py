"""``http-timing advise``'s decisions and its answer, pure (the runs are the command's).

- **Limits** are searched in whole millicores, each a :class:`cpuquota.limit.Limit` of one
  *shape* (:func:`shape`: the period and burst), from the smallest the backend can set
  (:func:`floor_millicores`: the kernel's 1 ms quota per period) to a ceiling (the machine's
  CPUs, or the backend's maximum).
- **The search** (:func:`next_millicores`): the first run is at the model's guess (the usage
  rules' limits are run too and count as evidence); while every limit run met the target (or
  every one missed) the next steps down (up) by a factor growing from 1.25; once a met limit
  and a missed one bracket the answer, the geometric middle, until the smallest met limit is
  within 10 % of the largest missed one (:func:`bracket`: a limit that met below a miss does
  not count). A run whose verdict could flip (narrowly met or missed, :func:`needs_repeat`)
  is run once more and the limit judged by the mean of its two runs (:func:`verdicts`); so is
  the answer when only one run says it meets the target (:func:`to_confirm`): if the two
  together miss, the search goes on above it.
- **Each run is judged by what its quota did** (``client.analysis.goal``): the
  requests over the target that no throttling delayed are counted apart, and a run whose
  requests over the target were none of them throttled did not miss because of the limit, so
  the search never climbs on the machine's other load. A target the service misses even
  without a limit, through such requests only, is said (:func:`unthrottled_miss`); the answer
  is then the smallest limit at which throttling pushes no further request past it.
- **The answer** (:class:`Advice`): the recommended limit in every spelling, the runs at it
  and at the next lower step tried, the model's guess beside it, what the usage rules would
  set (measured too), and whether a shorter period or a burst met the target with less.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from client.analysis.advise_model import ModelPoint, Profile, Shape, UsageRule, model_guess
from client.analysis.goal import LatencyGoal, Measured, pooled_runs
from cpuquota.limit import MIN_QUOTA_US, Limit

__all__ = ["ALTERNATIVE_PERIODS_MS", "ALTERNATIVE_ROLES", "MAIN_ROLES", "SAVING", "TOLERANCE",
           "Advice", "Alternative", "UsageResult", "alternative_guesses", "bracket", "by_limit",
           "conclude", "docker_flags", "floor_millicores", "kubernetes_cpu", "needs_repeat",
           "next_millicores", "recommendation", "shape", "to_confirm", "to_recheck",
           "unmet_reason", "unthrottled_miss", "verdicts"]

TOLERANCE = 0.10                       # the answer is bracketed within 10 %
ALTERNATIVE_PERIODS_MS = (50, 20, 10)  # shorter periods the model tries
SAVING = 0.9                           # an alternative is tried when it needs <= 90 %
ALTERNATIVE_ROLES = ("period", "burst")  # the roles of the alternatives' runs
MAIN_ROLES = ("guess", "search", "usage", "confirm")  # the runs of the search's shape


def shape(period_ms: float, burst_ms: float = 0.0, *, full_burst: bool = False) -> Shape:
    """Millicores -> a limit with this period and burst (the burst at most one quota, as the
    kernel allows; ``full_burst``: exactly one quota)."""
    def limit(millicores: int) -> Limit:
        cpus = millicores / 1000
        quota = cpus * period_ms
        return Limit(cpus, period_ms, quota if full_burst else min(burst_ms, quota))
    return limit


def floor_millicores(period_ms: float) -> int:
    """The smallest limit worth trying: 10 m, and a quota of at least the kernel's 1 ms."""
    return max(10, math.ceil(MIN_QUOTA_US / period_ms - 1e-9))


def bracket(verdicts: Mapping[int, bool]) -> tuple[int | None, int | None]:
    """``(low, high)``: the largest limit that missed, and the smallest that met above it (a
    limit that met below a miss does not count: on a noisy machine the answer must hold for
    every limit above it). Either may be None."""
    missed = [m for m, ok in verdicts.items() if not ok]
    low = max(missed) if missed else None
    above = [m for m, ok in verdicts.items() if ok and (low is None or m > low)]
    return low, (min(above) if above else None)


def next_millicores(verdicts: Mapping[int, bool], *, start: int, floor: int, ceiling: int,
                    tolerance: float = TOLERANCE) -> int | None:
    """The next limit to run (millicores), given each limit run so far and whether it met the
    target; None when the answer is bracketed (or the floor met, or the ceiling missed)."""
    if not verdicts:
        return min(ceiling, max(floor, start))
    low, high = bracket(verdicts)
    if high is None:
        assert low is not None
        if low >= ceiling:
            return None
        step = 1.25 ** min(4, sum(1 for m in verdicts if m >= start))  # the steps up so far
        candidate = min(ceiling, max(low + 1, math.ceil(low * step)))
    elif low is None:
        if high <= floor:
            return None
        step = 1.25 ** min(4, sum(1 for m in verdicts if m <= start))  # the steps down so far
        candidate = max(floor, min(high - 1, math.floor(high / step)))
    else:
        if high <= low * (1 + tolerance) or high - low <= 1:
            return None
        candidate = min(high - 1, max(low + 1, round(math.sqrt(low * high))))
    return None if candidate in verdicts else candidate


def by_limit(runs: Sequence[Measured]) -> dict[int, list[Measured]]:
    """Millicores -> the judged runs at that limit, in order (unjudged runs left out)."""
    out: dict[int, list[Measured]] = {}
    for run in runs:
        if run.millicores is not None and run.met is not None:
            out.setdefault(run.millicores, []).append(run)
    return out


def verdicts(runs: Sequence[Measured], target: LatencyGoal) -> dict[int, bool]:
    """Millicores -> met: the limit's runs, pooled (the mean of their figures), met ``target``."""
    return {m: bool(pooled_runs(at, target).met) for m, at in by_limit(runs).items()}


def to_recheck(runs: Sequence[Measured], target: LatencyGoal) -> int | None:
    """A limit that missed the target in its only run although a smaller limit met it (the
    evidence contradicts itself: one of them was the machine's): the smallest such limit, to
    run once more before the miss is believed. None when there is none."""
    pools = by_limit(runs)
    judged = verdicts(runs, target)
    met = [m for m, ok in judged.items() if ok]
    if not met:
        return None
    doubtful = [m for m, ok in judged.items() if not ok and m > min(met) and len(pools[m]) == 1]
    return min(doubtful) if doubtful else None


def to_confirm(runs: Sequence[Measured], target: LatencyGoal) -> int | None:
    """Once the search is done: the recommended limit (millicores) when only one run says it
    meets the target; run it again (a second run decides with the first, as their mean).
    None when there is nothing to confirm."""
    _, high = bracket(verdicts(runs, target))
    if high is None or len(by_limit(runs)[high]) >= 2:
        return None
    return high


def needs_repeat(runs_at_limit: Sequence[Measured]) -> bool:
    """Run a limit once more when its only run's verdict could flip (narrow, either way)."""
    return len(runs_at_limit) == 1 and runs_at_limit[0].narrow


def conclude(runs: Sequence[Measured], target: LatencyGoal
             ) -> tuple[Measured | None, Measured | None]:
    """From the runs of one shape, pooled per limit: the recommendation (the smallest limit
    that met the target with no miss above it) and the next lower step tried (the largest
    limit that missed); either may be None."""
    pools = {m: pooled_runs(at, target) for m, at in by_limit(runs).items()}
    low, high = bracket({m: bool(row.met) for m, row in pools.items()})
    return (pools[high] if high is not None else None,
            pools[low] if low is not None else None)


@dataclass(frozen=True)
class UsageResult:
    """A usage rule's limit for the profile's usage, and its runs pooled (``result``)."""

    rule: UsageRule
    usage_cpus: float          # what the rule computes
    limit: Limit               # what was run (rounded up to a millicore, within the backend)
    result: Measured | None = None

    @property
    def met(self) -> bool | None:
        return None if self.result is None else self.result.met

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule.key, "words": self.rule.words, "usage_cpus": self.usage_cpus,
                "cpus": self.limit.cpus, "met": self.met,
                "measured": self.result.to_dict() if self.result else None}


@dataclass(frozen=True)
class Alternative:
    """A shorter period or a burst: the model's limit for it and its runs, pooled per limit."""

    kind: str                  # "period" or "burst"
    model: ModelPoint
    results: tuple[Measured, ...] = ()

    @property
    def proven(self) -> Measured | None:
        """The smallest limit of this shape that met the target."""
        met = [r for r in self.results if r.met]
        return min(met, key=lambda r: r.millicores or 0) if met else None

    def to_dict(self) -> dict[str, Any]:
        proven = self.proven
        return {"kind": self.kind, "model": self.model.to_dict(),
                "met_cpus": proven.limit.cpus if proven and proven.limit else None,
                "measured": [row.to_dict() for row in self.results]}


def alternative_guesses(profile: Profile, target: LatencyGoal, recommended: Limit,
                        guess: ModelPoint | None, possible: Callable[[Limit], bool]
                        ) -> list[tuple[str, Shape, ModelPoint, int]]:
    """Shapes that may meet ``target`` with at most 90 % of the measured ``recommended``:
    ``(kind, shape, the model's limit for it, millicores to run first)``. The model's limit
    is scaled by how far its guess for the search's shape was from the measured answer
    (``recommended / guess``), and kept when that needs <= 90 %: the best shorter period (the
    fewest CPUs; the longer period on a tie) and a burst of one quota, where the backend can
    set them (``possible``)."""
    scale = recommended.cpus / guess.limit.cpus if guess is not None else 1.0
    most = math.floor(recommended.millicores * SAVING)
    candidates: list[tuple[str, Shape]] = [
        ("period", shape(period, recommended.burst_ms))
        for period in ALTERNATIVE_PERIODS_MS if period < recommended.period_ms]
    candidates.append(("burst", shape(recommended.period_ms, full_burst=True)))
    found: dict[str, tuple[Shape, ModelPoint, int]] = {}
    for kind, limit_of in candidates:
        floor = floor_millicores(limit_of(1000).period_ms)
        if floor > most:
            continue
        point = model_guess(profile, target, limit_of, floor, recommended.millicores)
        if point is None:
            continue
        first = max(floor, round(point.limit.millicores * scale))
        if first > most or not possible(limit_of(first)):
            continue
        if kind not in found or first < found[kind][2]:
            found[kind] = (limit_of, point, first)
    return [(kind, *found[kind]) for kind in ("period", "burst") if kind in found]


def docker_flags(limit: Limit) -> str:
    """``--cpus 0.6``; a period other than 100 ms: ``--cpu-period 10000 --cpu-quota 2000``."""
    if limit.period_ms == 100:
        return f"--cpus {limit.cpus:g}"
    return f"--cpu-period {limit.period_us} --cpu-quota {limit.quota_us}"


def kubernetes_cpu(limit: Limit) -> str:
    """``resources.limits.cpu``: ``600m``."""
    return f"{limit.millicores}m"


def recommendation(limit: Limit) -> dict[str, Any]:
    """The recommended limit in the answer's JSON: in every spelling."""
    return {"cpus": limit.cpus, "millicores": limit.millicores, "period_ms": limit.period_ms,
            "burst_ms": limit.burst_ms, "docker": docker_flags(limit),
            "kubernetes_limits_cpu": kubernetes_cpu(limit)}


@dataclass(frozen=True)
class Advice:
    """Everything ``advise`` found; ``to_dict`` is its ``--json``."""

    target: LatencyGoal
    backend: str
    load: str
    profile: Profile
    guess: ModelPoint | None
    runs: tuple[Measured, ...]              # every run, the profile first
    at: Measured | None                      # at the recommendation
    below: Measured | None                   # at the next lower step tried
    floor: int
    ceiling: int
    reason: str | None = None                # why there is no recommendation
    usage_based: tuple[UsageResult, ...] = ()
    alternatives: tuple[Alternative, ...] | None = None   # None: not looked for
    curve: tuple[ModelPoint, ...] = field(default=(), compare=False)

    @property
    def recommended(self) -> Limit | None:
        return self.at.limit if self.at is not None else None

    @property
    def at_floor(self) -> bool:
        return self.at is not None and self.at.millicores == self.floor and self.below is None

    @property
    def guess_error(self) -> float | None:
        """(model's guess - measured answer) / measured answer."""
        rec = self.recommended
        if rec is None or self.guess is None:
            return None
        return (self.guess.limit.cpus - rec.cpus) / rec.cpus

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommended
        recommended = None if rec is None else recommendation(rec)
        guess = None if self.guess is None else {
            **self.guess.to_dict(), "vs_measured": self.guess_error}
        return {
            "target": self.target.to_dict(), "backend": self.backend, "load": self.load,
            "recommended": recommended, "reason": self.reason,
            "at_recommended": self.at.to_dict() if self.at else None,
            "next_lower": self.below.to_dict() if self.below else None,
            "runs": [run.to_dict() for run in self.runs], "model_guess": guess,
            "profile": self.profile.to_dict(),
            "usage_based": [u.to_dict() for u in self.usage_based],
            "alternatives": (None if self.alternatives is None
                             else [a.to_dict() for a in self.alternatives]),
            "search": {"floor_cpus": self.floor / 1000, "ceiling_cpus": self.ceiling / 1000,
                       "tolerance": TOLERANCE},
        }


def unmet_reason(profile: Profile, target: LatencyGoal, top: Measured | None,
                 ceiling_words: str) -> str:
    """Why no limit up to the ceiling met the target, in one sentence."""
    free = profile.run
    said = (f"even at {ceiling_words} the run missed it ({', '.join(top.missed or ())})"
            if top is not None else f"no run up to {ceiling_words} met it")
    why = [f"the target cannot be met by a CPU limit alone: {said}; without a limit p99 was "
           f"{free.p99_ms:.1f} ms"]
    if profile.cpu_ms >= target.p99_ms:
        why.append(f"the work itself takes {profile.cpu_ms:.1f} ms of CPU per request, "
                   "slower than the target")
    elif top is not None and top.throttled_fraction:
        why.append(f"a quota that large still throttled {top.throttled_fraction * 100:.0f} % "
                   "of the requests (the service's bursts over several threads)")
    return "; ".join(why)


def unthrottled_miss(free: Measured, target: LatencyGoal) -> str | None:
    """When the run without a limit misses ``target`` only through requests slow without any
    throttling (waits that are not the CPU's): what it reaches and what that means for the
    answer, in one sentence. None when it meets the target (or misses it typically: that
    target is below what the service does, and no answer is sought)."""
    raw = target.misses(free.p90_ms, free.p99_ms, None)
    if not raw or target.misses(free.judged_p90, free.judged_p99, None):
        return None
    return (f"{', '.join(raw)} even unthrottled: {free.slow_unthrottled} of {free.requests} "
            "requests are slow without any throttling (a wait that is not the CPU's: a sleep, "
            "I/O, the machine's other load); every run counts such requests apart, and the "
            "answer is the smallest limit at which throttling pushes no further request past "
            "the target")
