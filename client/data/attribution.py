"""Which request a watched group's throttling hit, from its counter timeline (pure, no I/O).

The timeline is a list of samples (``t_ns``, ``usage_ns``, ``nr_periods``, ``nr_throttled``,
``throttled_ns``; cumulative counters, ``t_ns`` on the requests' clock). How the kernel moves
the counters (``kernel/sched/fair.c``) decides how they are read here:

- ``nr_periods`` and ``nr_throttled`` grow at **period boundaries** (the period timer), and
  the throttled time grows when a throttle **ends** (at the boundary whose refill lets the
  group run again), by the whole length of that throttle. So a growth of the throttled time
  seen between two samples is a throttle that *ended* there and *began* that long before:
  the time is not spread over the sample interval, it is laid back from its end.
- The boundaries lie on a fixed grid (the timer keeps its phase). :func:`period_phase` finds
  the grid from the intervals in which ``nr_periods`` grew (each one says "a boundary is in
  here"; with jittery 10 ms samples they pin it to well under a millisecond), and a throttle's
  end is put on the boundary inside its interval (the interval's middle when none is known).
- Overlapping requests share the blame: each request gets the part of every throttled
  stretch that overlaps it, so with concurrency the per-request sums may exceed the group's.

Two figures per request, one of CPU time and one of wall time:

- :func:`attribute`: the **throttled time** (``cgroup_throttled_ns``), as ``cpu.stat`` counts
  it: summed over the CPUs the group was throttled on. A group throttled on 2 CPUs for 70 ms
  counts 140 ms, so on a multi-threaded service it can exceed the request's latency.
- :func:`held`: the **wall time the request was held** by its group's throttling
  (``cgroup_held_ns``): the overlap of the request with the stretches the group sat
  throttled, never more than its latency. What is exact and what is bounded: a throttle's end
  is the period boundary in its sample interval (exact once the grid is known, else the
  interval's middle, +- half a sample interval); its wall length is the throttled time
  divided by the number of CPUs it was throttled on, which ``cpu.stat`` does not say. So the
  length is bounded: at most the throttled time (exact for one CPU: one busy thread), at most
  the time since the group last ran (its usage stood still), since the previous throttle
  ended, and ``max(1, nr_throttled)`` periods (the smallest of these is taken). The true
  length is at least the throttled time over the CPUs the group may use; so the estimate is
  exact for a one-thread service, and an upper bound (capped by the request) for a group
  throttled on several CPUs at once.

It sits in the data layer because the run layer fills the CSV's ``cgroup_*`` columns with it
(``client.run.attach``) and the analysis and render layers read the same timeline with it.
- Several groups above a process may hold a quota (a container's and its pod's), each with its
  own counters and period grid: :func:`attribute_levels` reads each level's timeline apart and
  marks a request with the level that throttled it most.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from client.data.timeline import as_list, columns_of

__all__ = ["MIN_OVERLAP_NS", "CounterSample", "ThrottleEvent", "attribute",
           "attribute_levels", "beyond_own", "held", "period_phase", "throttle_events",
           "throttled_stretches"]

MIN_OVERLAP_NS = 1_000_000   # a stretch overlapping a request by less is estimation noise
STILL = 0.02                 # usage growing slower than 2 % of one CPU: the group is not running


class CounterSample(Protocol):
    """One reading of the group's counters (``client.data.timeline.CgroupSample``)."""

    @property
    def t_ns(self) -> int: ...
    @property
    def usage_ns(self) -> int: ...
    @property
    def nr_periods(self) -> int: ...
    @property
    def nr_throttled(self) -> int: ...
    @property
    def throttled_ns(self) -> int: ...


@dataclass(frozen=True)
class ThrottleEvent:
    """One throttle: the group could not run from ``start_ns`` to ``end_ns`` (estimated),
    ``throttled_ns`` as the kernel counted it (summed over CPUs), ``nr_throttled`` periods."""

    start_ns: int
    end_ns: int
    throttled_ns: int
    nr_throttled: int


# ---- where the period boundaries are ---------------------------------------------------------

def period_phase(timeline: Sequence[CounterSample], period_ns: int) -> int | None:
    """The boundaries' phase ``φ`` in ``[0, period_ns)``: boundaries are at ``φ + k·period``.

    Every sample interval in which ``nr_periods`` grew holds a boundary; the phase most of
    them agree on (the middle of the widest such arc) wins. None when under half agree
    (the quota was rewritten mid-run, so the timer restarted) or nothing grew."""
    if period_ns <= 0:
        return None
    events: list[tuple[int, int]] = []
    observations = 0
    for before_ns, after_ns in _boundary_intervals(timeline, period_ns):
        observations += 1
        lo, hi = before_ns % period_ns, after_ns % period_ns
        if lo <= hi:
            events += [(lo, 1), (hi, -1)]
        else:
            events += [(lo, 1), (period_ns, -1), (0, 1), (hi, -1)]
    if not observations:
        return None
    events.sort(key=lambda e: (e[0], e[1]))
    best, best_arcs, coverage = 0, [], 0
    for (position, change), (next_position, _) in zip(events, events[1:]):
        coverage += change
        if next_position <= position:
            continue
        if coverage > best:
            best, best_arcs = coverage, [(position, next_position)]
        elif coverage == best:
            best_arcs.append((position, next_position))
    if best * 2 < observations or not best_arcs:
        return None
    lo, hi = _widest(best_arcs, period_ns)
    return int((lo + hi) // 2) % period_ns


def _boundary_intervals(timeline: Sequence[CounterSample],
                        period_ns: int) -> list[tuple[int, int]]:
    """The sample intervals (from, to) in which ``nr_periods`` grew (or fell), under half a
    period long: each holds a boundary, close enough to place it. On a ``Rows``' columns
    at once (the same intervals)."""
    columns = columns_of(timeline)
    if columns is not None:
        t = columns[:, 0]
        at = np.flatnonzero((np.diff(columns[:, 2]) != 0) & (2 * np.diff(t) < period_ns))
        return list(zip(t[at].tolist(), t[at + 1].tolist()))
    return [(before.t_ns, after.t_ns) for before, after in zip(timeline, timeline[1:])
            if after.nr_periods != before.nr_periods and after.t_ns - before.t_ns < period_ns / 2]


def _widest(arcs: list[tuple[int, int]], period_ns: int) -> tuple[int, int]:
    """The widest of the arcs, joining touching ones (also across the wrap at ``period``)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(arcs):
        if merged and merged[-1][1] >= lo:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if len(merged) > 1 and merged[0][0] == 0 and merged[-1][1] == period_ns:
        first = merged.pop(0)
        merged[-1][1] = period_ns + first[1]
    lo, hi = max(merged, key=lambda arc: arc[1] - arc[0])
    return lo, hi


def _boundary_in(lo: int, hi: int, period_ns: int | None, phase: int | None) -> int:
    """The period boundary in the sample interval ``(lo, hi]``; its middle if none is known."""
    if period_ns and phase is not None:
        k = math.ceil((lo - phase) / period_ns)
        boundary = phase + k * period_ns
        if lo <= boundary <= hi:
            return boundary
    return (lo + hi) // 2


# ---- throttles and what they did to each request ---------------------------------------------

def throttle_events(timeline: Sequence[CounterSample],
                    period_ns: int | None = None) -> list[ThrottleEvent]:
    """The throttles the timeline shows, in time order. Each growth of the throttled time
    ends a throttle on the boundary in its sample interval; the throttle began
    ``throttled_ns`` earlier, but not before the previous one ended (several CPUs throttled
    at once count their times together). ``nr_throttled`` grown at boundaries with no
    throttled time yet (a throttle spanning periods) goes to the throttle that ends next,
    unless the group ran again first (its usage grew): then it was a throttle of no counted
    time, over by then."""
    columns = columns_of(timeline)
    if columns is not None and not ((np.diff(columns[:, 3]) > 0).any()
                                    or (np.diff(columns[:, 4]) > 0).any()):
        return []   # neither counter grew: no throttle (the loop below finds none), at once
    timeline = as_list(timeline)
    phase = period_phase(timeline, period_ns) if period_ns else None
    events: list[ThrottleEvent] = []
    previous_end = timeline[0].t_ns if timeline else 0
    pending_nr, pending_from = 0, 0
    for index, (before, after) in enumerate(zip(timeline, timeline[1:])):
        grown_ns = after.throttled_ns - before.throttled_ns
        grown_nr = after.nr_throttled - before.nr_throttled
        if grown_ns <= 0:
            if pending_nr and after.usage_ns > before.usage_ns:
                # the group ran again, yet no throttled time was added: that throttle ended
                # by ``before`` (the kernel sometimes counts a period with ~no time)
                events.append(ThrottleEvent(pending_from, before.t_ns, 0, pending_nr))
                previous_end, pending_nr = before.t_ns, 0
            if grown_nr > 0:
                pending_from = pending_from if pending_nr else before.t_ns
                pending_nr += grown_nr
            continue
        end = _boundary_in(before.t_ns, after.t_ns, period_ns, phase)
        # the wall length: the CPU-summed time over the CPUs it was throttled on (one: all
        # of it), bounded by when the group last ran, the previous throttle, and the periods
        periods = max(1, grown_nr + pending_nr) * period_ns if period_ns else grown_ns
        length = max(1, min(grown_ns, end - previous_end, end - _stopped_at(timeline, index),
                            periods))
        events.append(ThrottleEvent(end - length, end, grown_ns, grown_nr + pending_nr))
        previous_end, pending_nr = end, 0
    if pending_nr and timeline:   # still throttled when the timeline ended
        events.append(ThrottleEvent(max(previous_end, pending_from), timeline[-1].t_ns, 0,
                                    pending_nr))
    return events


def _stopped_at(timeline: Sequence[CounterSample], index: int) -> int:
    """When the group stopped running before sample ``index`` (whose interval holds the
    boundary that ended a throttle): a throttled group runs nothing, so its usage stands
    still from the throttle's start, put where the CPU it used in the interval in which its
    usage last grew would have ended at one CPU. The throttled time cannot say it: it is
    summed over the CPUs the group was throttled on, so laid back from its end it can reach
    far past the throttle's start. The timeline's first instant when it stood still all
    along."""
    j = index
    while j > 0 and (timeline[j].usage_ns - timeline[j - 1].usage_ns
                     <= STILL * (timeline[j].t_ns - timeline[j - 1].t_ns)):
        j -= 1
    if j == 0:
        return timeline[0].t_ns
    # it ran that much CPU from the interval's start: at one CPU (one busy thread, exact), it
    # stopped then; on more CPUs at once, earlier (the stretch is then the shorter)
    return min(timeline[j].t_ns,
               timeline[j - 1].t_ns + timeline[j].usage_ns - timeline[j - 1].usage_ns)


def throttled_stretches(timeline: Sequence[CounterSample],
                        period_ns: int | None = None) -> list[tuple[int, int]]:
    """``(start_ns, end_ns)`` of each throttle, for the picture's shaded bands."""
    return [(e.start_ns, e.end_ns) for e in throttle_events(timeline, period_ns)]


def attribute(intervals: Sequence[tuple[int, int]], timeline: Sequence[CounterSample], *,
              period_ns: int | None = None,
              min_overlap_ns: int = MIN_OVERLAP_NS) -> list[tuple[int, int]]:
    """``(throttled_ns, nr_throttled)`` per request interval ``(start_ns, end_ns)``: the part
    of each throttle's time that overlaps the request (all of it when the throttle lies
    inside), and the periods of every throttle that overlaps it. An overlap shorter than
    ``min_overlap_ns`` (and than the throttle) is taken as the estimate's noise."""
    events = throttle_events(timeline, period_ns)
    ends = [e.end_ns for e in events]
    out: list[tuple[int, int]] = []
    for start, end in intervals:
        throttled, periods = 0.0, 0
        i = bisect.bisect_left(ends, start)
        while i < len(events) and events[i].start_ns <= end:
            event = events[i]
            i += 1
            overlap = min(end, event.end_ns) - max(start, event.start_ns)
            length = event.end_ns - event.start_ns
            if length == 0 and not start <= event.end_ns <= end:
                continue
            if length > 0 and (overlap <= 0 or (overlap < min_overlap_ns and overlap < length)):
                continue
            throttled += event.throttled_ns * (overlap / length if length else 1.0)
            periods += event.nr_throttled
        out.append((round(throttled), periods))
    return out


def held(intervals: Sequence[tuple[int, int]],
         timelines: Sequence[Sequence[CounterSample]],
         periods_ns: Sequence[int | None]) -> list[int]:
    """The wall time (ns) each request interval ``(start_ns, end_ns)`` was held by throttling:
    its overlap with the union of the throttled stretches of every quota level
    (``timelines[k]`` with period ``periods_ns[k]``), never more than the interval. An
    overlap shorter than :data:`MIN_OVERLAP_NS` (and than its stretch) is the estimate's
    noise, as in :func:`attribute`."""
    stretches: list[tuple[int, int]] = []
    for timeline, period in zip(timelines, periods_ns):
        stretches += [(e.start_ns, e.end_ns) for e in throttle_events(timeline, period)
                      if e.end_ns > e.start_ns]
    union: list[list[int]] = []
    for lo, hi in sorted(stretches):
        if union and lo <= union[-1][1]:
            union[-1][1] = max(union[-1][1], hi)
        else:
            union.append([lo, hi])
    ends = [hi for _lo, hi in union]
    out: list[int] = []
    for start, end in intervals:
        total = 0
        i = bisect.bisect_left(ends, start)
        while i < len(union) and union[i][0] <= end:
            lo, hi = union[i]
            i += 1
            overlap = min(end, hi) - max(start, lo)
            if overlap > 0 and (overlap >= MIN_OVERLAP_NS or overlap >= hi - lo):
                total += overlap
        out.append(max(0, min(total, end - start)))
    return out


def beyond_own(held_ns: int, latency_ns: int, own_ns: int | None) -> int:
    """A request's hold, never more than its latency could hold beyond its own time
    (``own_ns``: its CPU as the server measured it; None: not known, the latency caps it);
    0 when what is left is under :data:`MIN_OVERLAP_NS`, the estimate's noise (a request
    placed a few ms off next to a throttle)."""
    if own_ns is None:
        return held_ns
    left = min(held_ns, max(0, latency_ns - own_ns))
    return left if left >= MIN_OVERLAP_NS or left == held_ns else 0


def attribute_levels(intervals: Sequence[tuple[int, int]],
                     timelines: Sequence[Sequence[CounterSample]],
                     periods_ns: Sequence[int | None]) -> list[tuple[int, int, int]]:
    """``(throttled_ns, nr_throttled, level)`` per request: :func:`attribute` on each quota
    level's timeline (``timelines[k]`` with period ``periods_ns[k]``), the request marked by
    the level whose throttling overlapped it most (level 0 when none did)."""
    per_level = [attribute(intervals, timeline, period_ns=period)
                 for timeline, period in zip(timelines, periods_ns)]
    out: list[tuple[int, int, int]] = []
    for i in range(len(intervals)):
        marks = [(level[i][0], level[i][1], k) for k, level in enumerate(per_level)]
        best = max(marks, key=lambda m: (m[0], m[1], -m[2])) if marks else (0, 0, 0)
        out.append(best)
    return out
