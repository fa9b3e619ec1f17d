"""Several pods' timelines, each read at instants of its own (their nodes' agents), as one
timeline of their sum, as ``client.run.cgroup_sampler.PodsReader`` sums the pods' groups read
here.

The counters are cumulative: the sum at an instant is, for each pod, its last row at or before
that instant, added up. The instants are every pod's rows from the first instant at which every
pod has one (before it, a pod's count is unknown); two pods' rows at the same instant are one
row of the sum. So the sum's change over any two of its instants is the sum of the pods' own
changes between their last rows at or before them: nothing counted twice, nothing left out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from client.data.timeline import CgroupSample, QuotaSetting

__all__ = ["sum_timelines", "whole_past"]


def sum_timelines(timelines: Sequence[Sequence[CgroupSample]]) -> list[CgroupSample]:
    """One timeline of the pods' sum (each timeline in time order): usage, periods, periods
    throttled and throttled time, level by level when every pod has the same levels, and each
    level's quota summed (None when a pod has none there; left out when a pod's rows have no
    quota). No pressure: a stall summed over groups is no group's pressure."""
    if not timelines or any(not rows for rows in timelines):
        return []
    times = [[s.t_ns for s in rows] for rows in timelines]
    begin = max(t[0] for t in times)
    instants = sorted({t for each in times for t in each if t >= begin})
    out = []
    for instant in instants:
        now = [rows[bisect_right(t, instant) - 1] for rows, t in zip(timelines, times)]
        out.append(_added(instant, now))
    return out


def _added(t_ns: int, now: list[CgroupSample]) -> CgroupSample:
    count = len(now[0].levels)
    levels: tuple[tuple[int, int, int], ...] = ()
    if all(len(s.levels) == count for s in now):
        levels = tuple((sum(s.levels[k][0] for s in now), sum(s.levels[k][1] for s in now),
                        sum(s.levels[k][2] for s in now)) for k in range(count))
    quotas: list[QuotaSetting] = []
    if all(len(s.quotas) == len(now[0].quotas) == 1 + len(levels) for s in now):
        for k, (_, period) in enumerate(now[0].quotas):
            each = [s.quotas[k][0] for s in now]
            quotas.append((None if any(q is None for q in each) else
                           sum(q for q in each if q is not None), period))
    return CgroupSample(t_ns, sum(s.usage_ns for s in now), sum(s.nr_periods for s in now),
                        sum(s.nr_throttled for s in now), sum(s.throttled_ns for s in now),
                        None, None, levels, tuple(quotas))


def whole_past(summed: Sequence[CgroupSample], t_ns: int) -> list[CgroupSample]:
    """The sum without its rows after ``t_ns`` but the last: cut across a run (each pod's
    timeline to its first row at or after the run's end), a row of the sum past ``t_ns`` is
    whole only once every pod's row past it has come, and that is the last row. Read "from
    the first row at or after the run's end", the sum then counts every pod up to its row
    past the end, as each pod's own timeline does."""
    if not summed:
        return []
    return [s for s in summed[:-1] if s.t_ns <= t_ns] + [summed[-1]]
