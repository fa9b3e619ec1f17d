"""``advise --passive``: the smallest limit whose replay of a recorded window meets a latency
target, through the one search (:mod:`client.advise.search`), each limit judged by its replay
(``client.analysis.passive.judge``) instead of a run."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from client.advise.search import Rules, Search
from client.analysis.advise import bracket
from client.analysis.advise_target import LatencyTarget
from client.analysis.passive import LESS, Judged, PassiveAdvice, judge
from client.analysis.replay import LimitRow

__all__ = ["search"]


def _verdicts(rows: Sequence[Judged]) -> dict[int, bool]:
    return {row.millicores: row.met for row in rows if row.millicores is not None}


def search(replay_at: Callable[[int | None], LimitRow], target: LatencyTarget, *, start: int,
           floor: int, ceiling: int) -> PassiveAdvice:
    """The smallest limit in ``[floor, ceiling]`` millicores whose replay (``replay_at``; None:
    no limit) meets ``target``, to advise's tolerance."""
    free = judge(None, replay_at(None), target)
    if not free.met:
        return PassiveAdvice(target, free, (), None, None, floor, ceiling,
                             f"the target cannot be met by a CPU limit: even without one the "
                             f"replay misses it ({', '.join(free.missed)})")
    driver: Search[Judged] = Search(
        lambda millicores, _role, _again: judge(millicores, replay_at(millicores), target),
        Rules(_verdicts), start=start, floor=floor, ceiling=ceiling)
    driver.run()
    tried = {row.millicores: row for row in driver.rows if row.millicores is not None}
    _low, high = bracket(_verdicts(driver.rows))
    if high is None:
        top = tried[max(tried)]
        return PassiveAdvice(target, free, tuple(tried.values()), None, None, floor, ceiling,
                             f"no limit up to {ceiling / 1000:g} CPU met it in the replay "
                             f"({', '.join(top.missed)} at {max(tried) / 1000:g} CPU)")
    lower = max(1, round(high * LESS))
    less = tried.get(lower) or judge(lower, replay_at(lower), target)
    return PassiveAdvice(target, free, tuple(tried.values()), tried[high], less, floor, ceiling)
