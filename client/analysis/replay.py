"""A recorded timeline replayed at another CPU limit (pure, no clock of its own, no I/O).

The record (``<name>.cgroup.csv``: the group's cumulative usage and ``cpu.stat`` counters every
few ms) gives the group's **demand**: the CPU it wanted in each sample interval.

- Where the record was not throttled, the demand is the usage of the interval: exact in the
  model's terms (the CPU ran when it was wanted).
- Where it was throttled, the quota hid part of it: the group wanted to run while it sat
  throttled. Each throttle the timeline shows (``client.data.attribution.throttle_events``:
  its wall stretch and the throttled time the kernel counted, summed over CPUs) is taken as
  that much CPU wanted during its stretch (at most the stretch times the CPUs the group was
  seen to use at once), taken from the usage that ran after it (the backlog it ran once the
  refill came), no more than ran. The total CPU is kept; only when it was wanted moves.
  That is an estimate; :attr:`Demand.throttled_fraction` says how much of the window it
  concerns.

:func:`replay` feeds that demand, as a fluid queue, to :class:`cpuquota.account.QuotaAccount`
(the project's only quota model) on the record's own period grid: work is served as it comes,
up to ``cores`` CPU at once, while the account has runtime; when the quota is spent nothing
runs until the refill and the demand queues. It returns each throttled stretch and the
account's counters (periods throttled as the kernel counts them).

From the stretches: :func:`added_delay` (the wait until the group runs again, for a request
arriving at a uniformly random instant of the window).

With the recorded requests, :func:`replay_load` runs the requests themselves instead: each one
its unthrottled wall time and the CPU the timeline shows it used, the group's other CPU as
background. A closed loop (a load tool's clients: each sends its next request as soon as its
last one ended; the requests are split into the fewest such lanes; an http-timing run's own
plan says whether it was one, else nearly every gap must be under :data:`CLOSED_GAP_NS`, which
a busy client's gaps can pass) sends each one when the one before it in its lane has ended,
as the load did, so a throttled record is not replayed as one long backlog; an open loop (an
access log, a rate) keeps the recorded times. At the recorded limit it gives
each request its recorded latency, within a period.

A request's CPU is the rows' CPU shared among the requests in them: by each one's own CPU
(``Request.cpu_ns``, the server's ``Server-Timing``, when every request has one) spread over
its latency, else by overlap; never more than its latency on the group's CPUs. Where the
record was throttled (or its rows are coarse, below) and every request has its own CPU, each
one is its own times the group's over theirs (:func:`_own_shares`): a server the quota held
queued them, each waited most of its latency and ran at its end, so the rows of the queue's
drain are the few still in flight's, two to three times their own spread evenly. The group's
own work (its runtime, probes: what the window's rows with no request show, CPU per wall
time) runs at that rate in the rows with requests too, as background: a throttled record
stretches the same requests over many more periods, and that work is not theirs (shared
among them, it made each request's CPU grow with the record's length).

Coarse rows (:attr:`Demand.coarse`: half a period apart or more, the node agent's 100 ms):
a throttle's time is exact per row, but not where in its row it lay, so the recorded hold
may lie on the wrong request and the stretches miss part of a request's hold (that part
would run at every limit). There a request a throttle may have held (:func:`held_at_most`)
runs its CPU, on one CPU, at most its latency; at the recorded limit the quota model holds
it again. A row holds several requests, so sharing it by overlap gives a long-held request
the CPU of the short ones beside it (a closed loop then reads slow even unthrottled): with
the requests' own CPU each one is its own times the group's CPU over theirs in the window
(the server and its runtime around the request), and without it the shares stay by overlap:
the percentiles are within a period of the record's at the recorded limit, single requests
not always.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from client.data.summary import percentile
from client.data.attribution import (CounterSample, ThrottleEvent, period_phase,
                                     throttle_events)
from client.data.loadshape import CLOSED_GAP_NS, chains, is_closed, time_step
from client.data.timeline import columns_of
from cpuquota.account import CpuStat, QuotaAccount

__all__ = ["BY_WALL", "CLOSED_GAP_NS", "MEAN", "MIN_DONORS", "ROWS", "MIN_WINDOW_NS", "MIN_WINDOW_PERIODS", "CpuDrawn",
           "Demand", "Job", "LimitRow", "Load", "bunched", "draw_cpu", "placed_shift",
           "ReplayError", "Replayed", "Replayer", "Request", "added_delay", "added_delays", "demand_of", "held_at_most",
           "in_flight", "load_of",
           "predicted_latency", "replay", "replay_limits", "replay_load"]

MIN_WINDOW_NS = 1_000_000_000   # under a second, a replay says nothing worth reading
MIN_WINDOW_PERIODS = 2
MS = 1_000_000
STILL = 0.9                     # a group that ran 0.9 CPU or more in an interval used a CPU
# too few requests showed their CPU: what those it hid get (:func:`load_of`'s ``unseen``)
MEAN, ROWS, BY_WALL = "mean", "rows", "by wall"


class ReplayError(ValueError):
    """A timeline that cannot be replayed; the message says why, in one line."""


@dataclass(frozen=True)
class Demand:
    """The CPU the group wanted per sample interval, and what the record counted."""

    starts_ns: tuple[int, ...]      # each interval's start (the next one's is its end)
    end_ns: int
    wanted_ns: tuple[float, ...]    # CPU wanted in each interval
    period_ns: int
    origin_ns: int                  # a period boundary of the record's grid, <= the start
    cores: int                      # CPUs the group's work used at once (at most)
    recorded: CpuStat               # the counters' change over the window
    usage_ns: int                   # CPU the group used in the window
    hidden_ns: float                # the part of the demand estimated from throttled time
    throttled_wall_ns: int          # the recorded throttled stretches, wall time
    used_ns: tuple[float, ...] = ()  # CPU the group used in each interval (the record's)
    # each throttle as the rows bound it: (earliest start, latest end, longest wall length):
    # its throttled time (exact per row) laid anywhere in the row interval it ended in
    throttles: tuple[tuple[int, int, int], ...] = ()
    resolution_ns: int = 0           # the rows' median interval
    # periods throttled the kernel counted in a row whose throttled time did not grow (it
    # comes with a later row): (the row's start less those periods, its end, those periods)
    counted: tuple[tuple[int, int, int], ...] = ()
    # the requests the window holds only part of (left out of the replay: it ended, or
    # began, while they ran): (start, latency, the server's CPU or 0). The CPU the rows show
    # during them is theirs, neither the replayed requests' nor the group's own: an open
    # loop recorded at its limit ends with a queue of them, and shared among the requests
    # beside them it made each one heavier (:func:`load_of`)
    partial: tuple[tuple[int, int, int], ...] = ()

    @property
    def coarse(self) -> bool:
        """Rows half a period apart or more: where a throttle lay in its row is not known."""
        return 2 * self.resolution_ns >= self.period_ns

    @property
    def start_ns(self) -> int:
        return self.starts_ns[0]

    @property
    def window_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def throttled_fraction(self) -> float:
        """The share of the window the record sat throttled (0: the demand is exact)."""
        return min(1.0, self.throttled_wall_ns / self.window_ns)


@dataclass(frozen=True)
class Replayed:
    """What the limit did over the window: the stretches the group sat throttled (wall time,
    in time order) and the account's counters over the window."""

    cpus: float | None              # None: no limit
    stretches: tuple[tuple[int, int], ...]
    stats: CpuStat
    window: tuple[int, int]

    @property
    def throttled_ns(self) -> int:
        return sum(end - start for start, end in self.stretches)


def demand_of(timeline: Sequence[CounterSample], period_ns: int,
              cores: int | None = None, *,
              events: Sequence[ThrottleEvent] | None = None) -> Demand:
    """The demand the timeline shows (see the module's docstring); ``ReplayError`` for a
    window under :data:`MIN_WINDOW_NS` or :data:`MIN_WINDOW_PERIODS` periods, or with no
    usage. ``cores``: the CPUs the group could use at once, when the caller knows better
    than the record's highest rate (which a quota caps: :func:`in_flight`); None: that
    rate."""
    if period_ns <= 0:
        raise ReplayError(f"the period must be > 0 (got {period_ns} ns)")
    if len(timeline) < 2:
        raise ReplayError(f"{len(timeline)} sample(s): a window needs at least two")
    start, end = timeline[0].t_ns, timeline[-1].t_ns
    if end - start < max(MIN_WINDOW_NS, MIN_WINDOW_PERIODS * period_ns):
        raise ReplayError(f"the window is {(end - start) / 1e9:.3f} s: too short to say "
                          f"anything (at least {MIN_WINDOW_NS / 1e9:g} s and "
                          f"{MIN_WINDOW_PERIODS} periods of {period_ns / 1e6:g} ms)")
    usage = timeline[-1].usage_ns - timeline[0].usage_ns
    if usage <= 0:
        raise ReplayError("the group used no CPU in the window: nothing to replay")
    starts, ends, wanted, rate, steps = _intervals(timeline)
    used = tuple(wanted)   # the record's, before the hidden demand moves any
    if cores is None:
        cores = max(1, math.ceil(rate * STILL))
    hidden, walls, last_end = 0.0, 0, start
    skip = list(range(len(wanted) + 1))   # see _take_after
    # ``events``: the timeline's throttle_events(timeline, period_ns), when the caller has them
    for event in throttle_events(timeline, period_ns) if events is None else events:
        length = event.end_ns - event.start_ns
        if length <= 0 or event.throttled_ns <= 0:
            continue
        # summed over the CPUs it was throttled on; at most what the group's CPUs could run
        walls += length
        if event.end_ns < last_end:   # out of order: rows skipped may have been refilled
            skip = list(range(len(wanted) + 1))
        last_end = event.end_ns
        moved = _take_after(wanted, starts, ends, event.end_ns,
                            min(event.throttled_ns, length * cores), skip)
        hidden += moved
        _spread(wanted, starts, ends, event.start_ns, event.end_ns, moved)
    phase = period_phase(timeline, period_ns)
    phase = start % period_ns if phase is None else phase
    origin = start - (start - phase) % period_ns
    first, last = timeline[0], timeline[-1]
    recorded = CpuStat(last.nr_periods - first.nr_periods, last.nr_throttled - first.nr_throttled,
                       last.throttled_ns - first.throttled_ns)
    return Demand(tuple(starts), end, tuple(wanted), period_ns, origin, cores, recorded, usage,
                  hidden, walls, used, _throttle_bounds(timeline, period_ns),
                  steps[len(steps) // 2], _counted_bounds(timeline, period_ns))


def _intervals(timeline: Sequence[CounterSample]
               ) -> tuple[list[int], list[int], list[float], float, list[int]]:
    """Each row's start and end, and the CPU its usage grew by (none where it fell); the
    highest rate of a row with a length (1.0 if none has); the rows' lengths in order. On a
    ``Rows``' columns at once (the same ints and floats)."""
    columns = columns_of(timeline)
    if columns is not None:
        t = columns[:, 0]
        grown = np.maximum(np.diff(columns[:, 1]), 0).astype(float)
        step = np.diff(t)
        moving = step > 0
        rate = float((grown[moving] / step[moving]).max()) if moving.any() else 1.0
        return t[:-1].tolist(), t[1:].tolist(), grown.tolist(), rate, np.sort(step).tolist()
    starts = [s.t_ns for s in timeline[:-1]]
    ends = [s.t_ns for s in timeline[1:]]
    wanted = [float(max(0, b.usage_ns - a.usage_ns)) for a, b in zip(timeline, timeline[1:])]
    rate = max((w / (e - s) for w, s, e in zip(wanted, starts, ends) if e > s), default=1.0)
    return starts, ends, wanted, rate, sorted(e - s for s, e in zip(starts, ends))


def _throttle_bounds(timeline: Sequence[CounterSample],
                     period_ns: int) -> tuple[tuple[int, int, int], ...]:
    """Each growth of the throttled time as the rows bound it: it ended in its row interval
    and lasted at most that time (all of it on one CPU) and its periods."""
    columns = columns_of(timeline)
    if columns is not None:   # the same bounds, the rows at once
        t = columns[:, 0]
        grown, periods = np.diff(columns[:, 4]), np.diff(columns[:, 3])
        at = np.flatnonzero(grown > 0)
        longest = np.minimum(grown[at], np.maximum(1, periods[at]) * period_ns)
        return tuple(zip((t[at] - longest).tolist(), t[at + 1].tolist(), longest.tolist()))
    out = []
    for a, b in zip(timeline, timeline[1:]):
        grown_ns = b.throttled_ns - a.throttled_ns
        if grown_ns > 0:
            longest_ns = min(grown_ns, max(1, b.nr_throttled - a.nr_throttled) * period_ns)
            out.append((a.t_ns - longest_ns, b.t_ns, longest_ns))
    return tuple(out)


def _counted_bounds(timeline: Sequence[CounterSample],
                    period_ns: int) -> tuple[tuple[int, int, int], ...]:
    """Each row in which ``nr_throttled`` grew and the throttled time did not: a throttle
    the kernel counted there held the group for at most those periods, before its row's
    end (its time is added when a throttle ends, and sometimes rows later)."""
    columns = columns_of(timeline)
    if columns is not None:   # the same bounds, the rows at once
        t = columns[:, 0]
        counted = np.diff(columns[:, 3])
        at = np.flatnonzero((counted > 0) & (np.diff(columns[:, 4]) == 0))
        held = counted[at] * period_ns
        return tuple(zip((t[at] - held).tolist(), t[at + 1].tolist(), held.tolist()))
    out = []
    for a, b in zip(timeline, timeline[1:]):
        periods = b.nr_throttled - a.nr_throttled
        if periods > 0 and b.throttled_ns == a.throttled_ns:
            out.append((a.t_ns - periods * period_ns, b.t_ns, periods * period_ns))
    return tuple(out)


def bunched(demand: Demand) -> Demand:
    """The demand with each row's CPU wanted as soon as its row began, on all its CPUs, and
    none for the rest of the row: on coarse rows (:attr:`Demand.coarse`) where in its row
    the CPU was wanted is not known, and the even spread :func:`replay` takes is its
    smoothest; this is its burstiest (a bound of the range)."""
    s = np.asarray(demand.starts_ns, dtype=np.int64)
    e = np.append(s[1:], np.int64(demand.end_ns))
    w = np.asarray(demand.wanted_ns, dtype=float)
    u = np.asarray(demand.used_ns or demand.wanted_ns, dtype=float)
    burst = np.ceil(np.maximum(w, u) / demand.cores).astype(np.int64)
    split = (burst > 0) & (burst < e - s)
    # each row, and after a split one its burst ended, wanting nothing: in time order
    at = np.arange(len(s)) + np.cumsum(split) - split   # each row's place in the new rows
    starts = np.empty(len(s) + int(split.sum()), dtype=np.int64)
    wanted, used = np.zeros(len(starts)), np.zeros(len(starts))
    starts[at], wanted[at], used[at] = s, w, u
    starts[at[split] + 1] = (s + burst)[split]
    return replace(demand, starts_ns=tuple(starts.tolist()), wanted_ns=tuple(wanted.tolist()),
                   used_ns=tuple(used.tolist()))


def held_at_most(demand: Demand, start_ns: int, end_ns: int) -> int:
    """The most wall time the record's throttles can have held ``[start_ns, end_ns]``: each
    one at most its length (a throttle counted with no time yet: its periods), where its row
    allows it."""
    total = sum(min(longest, min(end_ns, hi) - max(start_ns, lo))
                for lo, hi, longest in (*demand.throttles, *demand.counted)
                if lo < end_ns and hi > start_ns)
    return max(0, min(end_ns - start_ns, total))


def _spread(wanted: list[float], starts: list[int], ends: list[int], lo: int, hi: int,
            amount: float) -> None:
    """Add ``amount`` over ``[lo, hi]``, evenly in time."""
    for i in range(bisect.bisect_right(ends, lo), len(starts)):
        if starts[i] >= hi:
            break
        overlap = min(hi, ends[i]) - max(lo, starts[i])
        if overlap > 0:
            wanted[i] += amount * overlap / (hi - lo)


def _take_after(wanted: list[float], starts: list[int], ends: list[int], at: int,
                amount: float, skip: list[int] | None = None) -> float:
    """Take up to ``amount`` from the demand after ``at``, the earliest first (the backlog that
    ran once the throttle ended); how much was taken. No more than ran: CPU the group never
    used in the window is not counted as wanted.

    ``skip`` (one entry a row and one past the end; ``list(range(len(wanted) + 1))`` to begin
    with): rows after the first that were found empty are passed over from then on (a
    throttled pod's later rows were emptied by its earlier throttles, and each took a scan of
    them all). It holds while the ``at`` of successive calls does not go back: the demand
    :func:`_spread` adds after a take lies in rows before the next call's first row, or in it
    (always read). None: every row is read."""
    asked = amount
    first = bisect.bisect_right(ends, at)
    i = first
    while i < len(starts):
        if amount <= 0:
            break
        share = 1.0 if starts[i] >= at else (ends[i] - at) / (ends[i] - starts[i])
        taken = min(amount, wanted[i] * share)
        wanted[i] -= taken
        amount -= taken
        if skip is None:
            i += 1
            continue
        if i > first and wanted[i] <= 0:
            skip[i] = i + 1
        i = _live(skip, i + 1)
    return asked - amount


def _live(skip: list[int], i: int) -> int:
    """The first row from ``i`` not passed over (path-halving, so each is passed over about
    once)."""
    while skip[i] != i:
        skip[i] = skip[skip[i]]
        i = skip[i]
    return i


def replay(demand: Demand, cpus: float | None, burst_ns: int = 0,
           period_ns: int | None = None) -> Replayed:
    """The demand served under ``cpus`` (None: no limit) per ``period_ns`` (default: the
    record's), on the record's period grid. A search replays one demand at many limits:
    :class:`Replayer` works out once what does not depend on the limit."""
    return Replayer(demand, burst_ns, period_ns)(cpus)


class Replayer:
    """Each limit's :func:`replay` of one demand (called with the limit's CPUs, None: no
    limit), the same figures, what does not depend on the limit worked out once.

    A limit whose quota no period of the demand can spend (:func:`_most_charged`: the CPU each
    period wants, its rows' rounding on top, under the quota; no burst, no row wanting more
    CPU than the group's or CPU in no time) throttles nowhere, and its replay is the same at
    every such limit: no stretch, and the periods the account counted, which depend only on
    which periods were charged. Those are counted once, without the account; any other
    limit is replayed step by step (:func:`_stepped_plain`; with a burst, :func:`_stepped`)."""

    def __init__(self, demand: Demand, burst_ns: int = 0, period_ns: int | None = None
                 ) -> None:
        self.demand, self.burst_ns = demand, burst_ns
        self.period_ns = period_ns or demand.period_ns
        self.origin_ns = (demand.origin_ns if self.period_ns == demand.period_ns
                          else demand.start_ns)
        self._most: float | None = None   # see _most_charged (worked out when first asked)
        self._worked = False
        self._periods: int | None = None

    def __call__(self, cpus: float | None, stop: tuple[float, float] | None = None
                 ) -> Replayed:
        """The replay at ``cpus``; with ``stop`` (``(wait_ns, budget_ns)``), a replay
        stepped ends once its stretches' time beyond ``wait_ns`` each passes ``budget_ns``
        (:func:`_stepped_plain`): its figures then only what ran until then, for a search
        that keeps only the verdict of such a limit (the wait lies above ``wait_ns`` in
        more of the window than the budget, whatever the rest holds)."""
        demand = self.demand
        if cpus is None:
            return Replayed(None, (), CpuStat(), (demand.start_ns, demand.end_ns))
        if not self.burst_ns:
            if self.never_throttled(cpus):
                if self._periods is None:
                    self._periods = _periods_charged(demand, self.period_ns, self.origin_ns)
                return Replayed(cpus, (), CpuStat(self._periods),
                                (demand.start_ns, demand.end_ns))
        if not self.burst_ns:
            return _stepped_plain(demand, cpus, self.period_ns, stop)
        return _stepped(demand, cpus, self.burst_ns, self.period_ns)


    def never_throttled(self, cpus: float) -> bool:
        """Whether no period of the demand can spend the quota of ``cpus`` (nor of any more):
        its replay there has no stretch, counted in closed form (:func:`_most_charged`)."""
        if self.burst_ns:
            return False
        if not self._worked:
            self._most = _most_charged(self.demand, self.period_ns, self.origin_ns)
            self._worked = True
        return self._most is not None and self._most < max(1, round(cpus * self.period_ns))


def _most_charged(demand: Demand, period: int, origin: int) -> float | None:
    """A quota above this is never spent in any period (:class:`Replayer`); None where the
    demand can queue without a limit (a row wanting more CPU than ``demand.cores``, or CPU
    wanted in no time) or its rows go back in time.

    Without a throttle and with nothing queued, :func:`_stepped_plain` serves each row as it
    comes, in pieces split at the period boundaries (whole periods at once the same),
    charging each piece's CPU rounded to the ns when it ends: a period is charged at most
    the CPU its rows want in it and half a ns a piece (at most one a row beginning in it,
    and one), and while that is under the quota the runtime never runs out, nor ends a
    step, at any such limit. The CPU each period wants, from the cumulative demand at the
    boundaries, is within a thousandth of a ns of the pieces' sum: a ns a piece covers it."""
    starts = np.asarray(demand.starts_ns, dtype=np.int64)
    ends = np.append(starts[1:], np.int64(demand.end_ns))
    wanted = np.maximum(np.asarray(demand.wanted_ns, dtype=float), 0.0)
    lengths = ends - starts
    if (lengths < 0).any() or (wanted[lengths == 0] > 0).any():
        return None
    busy = lengths > 0
    if (wanted[busy] / lengths[busy] > demand.cores).any():
        return None
    first = (demand.start_ns - origin) // period   # the boundaries are origin + k * period
    last = (demand.end_ns - origin) // period + 1
    bounds = origin + np.arange(first, last + 1, dtype=np.int64) * period
    times = np.append(starts, np.int64(demand.end_ns)).astype(float)
    cumulative = np.concatenate(([0.0], np.cumsum(wanted)))
    fluid = np.diff(np.interp(bounds.astype(float), times, cumulative))
    begun = np.bincount((starts - origin) // period - first, minlength=last - first + 1)
    return float((fluid + begun[:len(fluid)] + 2.0).max())


def _periods_charged(demand: Demand, period: int, origin: int) -> int:
    """The periods the account counts where no limit throttles (:func:`_most_charged`): its
    timer counts a boundary from the first charged period of a run of them to the boundary
    after its last (which finds it idle and stops it), up to the window's end; a piece is
    charged where its CPU rounds to a ns or more (more than half a ns: ``round`` takes 0.5
    to 0), the rows at once (the same floats as a row at a time)."""
    first = (demand.start_ns - origin) // period   # the boundaries are origin + k * period
    count = (demand.end_ns - origin) // period - first + 2
    charged = np.zeros(count, dtype=bool)
    t0 = np.asarray(demand.starts_ns, dtype=np.int64)
    t1 = np.append(t0[1:], np.int64(demand.end_ns))
    wanted = np.asarray(demand.wanted_ns, dtype=float)
    keep = (t1 > t0) & (wanted > 0)
    t0, t1, wanted = t0[keep], t1[keep], wanted[keep]
    arriving = wanted / (t1 - t0)
    k = (t0 - origin) // period + 1   # a piece's period: the one its next boundary ends
    edge = origin + k * period
    charged[(k - first)[arriving * (np.minimum(t1, edge) - t0) > 0.5]] = True
    past = t1 > edge
    whole = (t1 - origin) // period    # the whole periods up to the last boundary
    spans = past & (whole > k) & (arriving * period > 0.5)
    if spans.any():   # periods k + 1 to whole, each charged: marked by a running count
        runs = np.zeros(count + 1, dtype=np.int64)
        np.add.at(runs, k[spans] + 1 - first, 1)
        np.add.at(runs, whole[spans] + 1 - first, -1)
        charged |= np.cumsum(runs)[:count] > 0
    tail = origin + whole * period
    charged[(whole + 1 - first)[past & (t1 > tail) & (arriving * (t1 - tail) > 0.5)]] = True
    last = (demand.end_ns - origin) // period   # the last boundary the window passes
    counted = charged.copy()   # a charged period's boundary, and the one after (it stops)
    counted[1:] |= charged[:-1]
    return int(counted[:max(0, last - first + 1)].sum())


def _stepped(demand: Demand, cpus: float, burst_ns: int, period_ns: int) -> Replayed:
    """The demand served under ``cpus`` step by step through the quota's account."""
    window = (demand.start_ns, demand.end_ns)
    period = period_ns
    origin = demand.origin_ns if period == demand.period_ns else demand.start_ns
    account = QuotaAccount(max(1, round(cpus * period)), period, burst_ns, origin)
    before = account.stats(demand.start_ns)
    stretches: list[tuple[int, int]] = []
    backlog, held_until, cores = 0.0, demand.start_ns, demand.cores
    ends = (*demand.starts_ns[1:], demand.end_ns)
    for t0, t1, wanted in zip(demand.starts_ns, ends, demand.wanted_ns):
        if t1 <= t0:
            backlog += wanted
            continue
        arriving = wanted / (t1 - t0)
        t = t0
        while t < t1:
            if t < held_until:   # throttled: the demand queues
                step = min(held_until, t1)
                backlog += arriving * (step - t)
                t = step
                continue
            resume = account.throttled_until(t)
            if resume > t:
                stretches.append((t, resume))
                held_until = resume
                continue
            if backlog <= 0 and 0 < arriving <= cores:   # whole periods at once where none
                step = account.serve_steady(arriving, t, t1)   # can run out
                if step > t:
                    t = step
                    continue
            rate = float(cores) if backlog > 0 else min(arriving, float(cores))
            if rate <= 0:
                t = t1
                continue
            events = [t1, account.next_boundary(t),
                      t + math.ceil(max(1, account.remaining(t)) / rate)]
            if backlog > 0 and cores > arriving:
                events.append(t + math.ceil(backlog / (cores - arriving)))
            step = max(t + 1, min(events))
            used = rate * (step - t)
            backlog = max(0.0, backlog + arriving * (step - t) - used)
            account.charge(round(used), step)
            t = step
    after = account.stats(demand.end_ns)
    clipped = tuple((s, min(e, demand.end_ns)) for s, e in stretches if s < demand.end_ns)
    return Replayed(cpus, clipped, after - before, window)


def _stepped_plain(demand: Demand, cpus: float, period: int,
                   stop: tuple[float, float] | None = None) -> Replayed:
    """:func:`_stepped` without a burst, the account's bookkeeping (``QuotaAccount`` at no
    burst: each boundary refills the runtime to the quota) kept in local variables: the
    same steps, the same figures, without a call a step (the replays of a throttled pod's
    window are most of ``cluster``'s time). Pinned to :func:`_stepped` by
    tests/test_replay_plain.py.

    ``stop``: ``(wait_ns, budget_ns)``, to end the replay (its figures then only what ran
    so far) once its stretches' time beyond ``wait_ns`` each passes ``budget_ns``: the wait
    for a random instant then lies above ``wait_ns`` in more of the window than that budget
    says, whatever the rest holds (:meth:`Replayer.verdict`)."""
    origin = demand.origin_ns if period == demand.period_ns else demand.start_ns
    quota = max(1, round(cpus * period))
    pool, debt, active, idle, nxt, now = quota, 0, False, False, 0, origin
    since: int | None = None
    nr_periods = nr_throttled = throttled_ns = 0
    stretches: list[tuple[int, int]] = []
    wait, budget = stop if stop is not None else (0.0, math.inf)
    beyond = 0.0   # the stretches' time beyond ``wait`` each, so far
    window_end = demand.end_ns
    backlog, held_until, cores = 0.0, demand.start_ns, demand.cores
    edge = demand.start_ns - 1   # the next boundary after the time last asked (none yet)
    fcores = float(cores)
    ceil = math.ceil
    ends = (*demand.starts_ns[1:], demand.end_ns)
    for t0, t1, wanted in zip(demand.starts_ns, ends, demand.wanted_ns):
        if t1 <= t0:
            backlog += wanted
            continue
        arriving = wanted / (t1 - t0)
        t = t0
        while t < t1:
            if t < held_until:   # throttled: the demand queues
                step = held_until if held_until < t1 else t1
                backlog += arriving * (step - t)
                t = step
                continue
            # the account's throttled_until(t): the boundaries up to t (inclusive) pass
            if t > now:
                now = t
            while active and nxt <= now:
                nr_periods += 1
                pool = quota
                if since is None:
                    if idle:
                        active = False
                    else:
                        idle = True
                else:
                    nr_throttled += 1
                    paid = pool if pool < debt else debt
                    pool -= paid
                    debt -= paid
                    if pool > 0:
                        throttled_ns += nxt - since
                        since = None
                    idle = False
                nxt += period
            if debt:
                paid = pool if pool < debt else debt
                pool -= paid
                debt -= paid
            if pool <= 0:
                if not active:
                    active = True
                    nxt = origin + ((now - origin) // period + 1) * period
                if since is None:
                    since = now
                resume = nxt + (debt // quota) * period
                if resume > t:
                    stretches.append((t, resume))
                    held_until = resume
                    over = (resume if resume < window_end else window_end) - t - wait
                    if over > 0.0:
                        beyond += over
                        if beyond > budget:
                            break
                    continue
            elif now > t:
                stretches.append((t, now))
                held_until = now
                over = (now if now < window_end else window_end) - t - wait
                if over > 0.0:
                    beyond += over
                    if beyond > budget:
                        break
                continue
            if backlog <= 0 and 0 < arriving <= cores:   # whole periods at once where none
                # can run out: the account's serve_steady
                if (not debt and active and since is None and now == t and nxt == t + period
                        and pool == quota):
                    periods = (t1 - t) // period
                    charge = round(arriving * period)
                    if (periods >= 1 and 0 < charge <= quota
                            and ceil(quota / arriving) >= period):
                        nr_periods += periods - 1
                        pool, idle = quota - charge, False
                        now = nxt = t + periods * period
                        t = now
                        continue
            rate = fcores if backlog > 0 else (arriving if arriving < fcores else fcores)
            if rate <= 0:
                t = t1
                continue
            if not edge - period <= t < edge:   # the next boundary after t
                edge = origin + ((t - origin) // period + 1) * period
            step = edge if edge < t1 else t1
            # the runtime left at t (the boundaries up to t have passed)
            left = pool - debt
            out = t + ceil((left if left > 1 else 1) / rate)
            if out < step:
                step = out
            if backlog > 0 and cores > arriving:
                out = t + ceil(backlog / (cores - arriving))
                if out < step:
                    step = out
            if step <= t:
                step = t + 1
            used = rate * (step - t)
            queued = backlog + arriving * (step - t) - used
            backlog = queued if queued > 0.0 else 0.0
            # the account's charge(round(used), step): the boundaries before step pass
            if step > now:
                now = step
            while active and nxt < now:
                nr_periods += 1
                pool = quota
                if since is None:
                    if idle:
                        active = False
                    else:
                        idle = True
                else:
                    nr_throttled += 1
                    paid = pool if pool < debt else debt
                    pool -= paid
                    debt -= paid
                    if pool > 0:
                        throttled_ns += nxt - since
                        since = None
                    idle = False
                nxt += period
            charged = round(used)
            if charged:
                if not active:
                    active = True
                    nxt = origin + ((now - 1 - origin) // period + 1) * period
                idle = False
                if debt or charged > pool:   # owed: paid out of the runtime left
                    debt += charged
                    paid = pool if pool < debt else debt
                    pool -= paid
                    debt -= paid
                else:
                    pool -= charged
            t = step
            if (t == edge and t1 - t < period and charged and backlog == 0.0 and not debt
                    and since is None and active and nxt == t and 0 < arriving <= cores):
                # the row's rest past the boundary it reached, as the next step serves it:
                # the boundary passes (the period charged: not idle), and unless the quota
                # runs out first the rest is served at once
                nr_periods += 1
                pool, idle = quota, True
                edge = nxt = t + period
                rate = fcores if arriving >= fcores else arriving
                if t + ceil((quota if quota > 1 else 1) / rate) >= t1:
                    charged = round(rate * (t1 - t))
                    now = t = t1
                    if charged:   # out of a full runtime, nothing owed: the rest is owed
                        idle = False
                        pool, debt = ((quota - charged, 0) if charged <= quota
                                      else (0, charged - quota))
        if beyond > budget:   # the wait's share above ``wait`` passed the budget: stop
            break
    end = demand.end_ns   # the account's stats(end): the boundaries up to it pass
    periods, throttled, held = _boundaries_to(max(end, now), active, nxt, period, quota,
                                              pool, debt, since, idle)
    nr_periods, nr_throttled, throttled_ns = (nr_periods + periods, nr_throttled + throttled,
                                              throttled_ns + held)
    # the stretches in time order, each ending before the next begins: only the last ones can
    # reach past the window's end
    while stretches and stretches[-1][0] >= end:
        stretches.pop()
    if stretches and stretches[-1][1] > end:
        stretches[-1] = (stretches[-1][0], end)
    return Replayed(cpus, tuple(stretches), CpuStat(nr_periods, nr_throttled, throttled_ns),
                    (demand.start_ns, end))


def _boundaries_to(now: int, active: bool, nxt: int, period: int, quota: int, pool: int,
                   debt: int, since: int | None, idle: bool) -> tuple[int, int, int]:
    """The periods, periods throttled and throttled time the boundaries up to ``now`` add
    to :func:`_stepped_plain`'s account (its state passed in), as its loop passes them."""
    periods = throttled = held = 0
    while active and nxt <= now:
        periods += 1
        pool = quota
        if since is None:
            if idle:
                active = False
            else:
                idle = True
        else:
            throttled += 1
            paid = pool if pool < debt else debt
            pool -= paid
            debt -= paid
            if pool > 0:
                held += nxt - since
                since = None
            idle = False
        nxt += period
    return periods, throttled, held


def added_delay(replayed: Replayed, q: float) -> float:
    """The ``q``-th percentile (0..100) of the wait, ns, until the group runs again, for a
    request arriving at a uniformly random instant of the window (0 outside the stretches;
    inside one, the rest of it)."""
    return added_delays(replayed, (q,))[0]


def added_delays(replayed: Replayed, qs: Sequence[float]) -> tuple[float, ...]:
    """:func:`added_delay` at each of ``qs``, the stretches sorted once."""
    lo, hi = replayed.window
    window = hi - lo
    lengths = sorted(e - s for s, e in replayed.stretches if e > s)
    if not lengths or window <= 0:
        return tuple(0.0 for _ in qs)
    # the lengths above w and their sum, by bisection on the sorted lengths: the search asks
    # 64 times, and a throttled window has a stretch a period
    above = [0] * (len(lengths) + 1)
    for i in range(len(lengths) - 1, -1, -1):
        above[i] = above[i + 1] + lengths[i]

    def share_above(w: float) -> float:
        i = bisect.bisect_right(lengths, w)
        return max(0.0, above[i] - (len(lengths) - i) * w) / window

    def at(q: float) -> float:
        beyond = 1.0 - q / 100.0   # P(wait > w) must fall to this
        if share_above(0.0) <= beyond:
            return 0.0
        low, high = 0.0, float(lengths[-1])
        for _ in range(64):
            middle = (low + high) / 2
            if share_above(middle) > beyond:
                low = middle
            else:
                high = middle
        return high

    return tuple(at(q) for q in qs)


def predicted_latency(start_ns: int, latency_ns: int, held_ns: int,
                      stretches: Sequence[tuple[int, int]]) -> int:
    """A recorded request's latency at the replayed limit: its unthrottled part
    (``latency_ns - held_ns``, the recorded hold taken out) plus the wall time the replayed
    stretches hold it from ``start_ns`` until that part has run."""
    left = max(0, latency_ns - held_ns)
    t, held = start_ns, 0
    ends = [e for _s, e in stretches]
    for s, e in stretches[bisect.bisect_right(ends, start_ns):]:
        if s >= t + left:
            break
        if s > t:
            left -= s - t
            t = s
        held += e - t
        t = e
    return max(0, latency_ns - held_ns) + held


def in_flight(requests: Sequence[Request]) -> int:
    """The most requests that ran at once (0: none): the CPUs a server that runs each on a
    thread of its own could have used, whatever the quota let it."""
    edges = sorted([(r.start_ns, 1) for r in requests]
                   + [(r.start_ns + r.latency_ns, -1) for r in requests])
    most = now = 0
    for _t, step in edges:   # an end before a start at the same instant
        now += step
        most = max(most, now)
    return most


@dataclass(frozen=True)
class Request:
    """A recorded request on the timeline's clock, and the wall time the record held it."""

    start_ns: int
    latency_ns: int
    held_ns: int
    cpu_ns: int | None = None   # its CPU as the server measured it (Server-Timing), if known


@dataclass(frozen=True)
class Job:
    """A recorded request as the replay runs it."""

    arrival_ns: int     # when it was sent in the record
    wall_ns: int        # its wall time not held by throttling (latency minus the recorded hold)
    cpu_ns: float       # the group's CPU during it (the timeline's usage, shared by overlap)
    follows: int | None = None   # a closed loop: the job whose end sends it (its lane's last)
    gap_ns: int = 0              # ... that long after that end


@dataclass(frozen=True)
class Load:
    """The recorded requests as work: a closed loop of ``lanes`` clients (each request sent
    when the one before it in its lane has ended, so a slower limit sends the rest later) or
    an open loop (``lanes`` 0: each at its own time, an access log's); and the group's CPU
    outside every request, per interval; and how many requests' CPU the record did not show
    (:class:`CpuDrawn`)."""

    jobs: tuple[Job, ...]
    lanes: int
    background_ns: tuple[float, ...]
    drawn: CpuDrawn | None = None

    @property
    def closed(self) -> bool:
        return self.lanes > 0


@dataclass(frozen=True)
class CpuDrawn:
    """The requests whose CPU a throttled record did not show (a throttle may have held them
    while another request ran beside them, or on coarse rows, in rows others shared; with no
    ``Server-Timing``: their rows' share is a mean, the heavy and the light alike):
    ``unknown`` of them, of ``count``; ``drawn`` of those were given a CPU from the
    ``donors``, the requests no throttle held and none ran beside (on coarse rows: none
    shared a row with; their CPU is the rows'), rank for rank by their latency less
    their hold, so the heavy stay heavy (:func:`draw_cpu`), the ranks placed where together
    they use the CPU their rows show (:func:`placed_shift`: the quota moved when it ran, not
    how much; a heavy request is the likelier to be held), what is left scaled; ``shift``: the
    ranks moved up (+) or down (-) by that share of them (a bound of the range)."""

    count: int
    unknown: int
    drawn: int
    donors: int
    shift: float = 0.0
    unseen: str = MEAN   # too few donors: how the unknown ones were given their rows' CPU

    @property
    def shape_seen(self) -> bool:
        """Whether the CPU of every request is the record's or drawn from a distribution it
        showed (False: too few requests ran unthrottled and alone to show one)."""
        return not self.unknown or bool(self.drawn)

    @property
    def share(self) -> float:
        """The share of the requests whose CPU is not known."""
        return self.unknown / self.count if self.count else 0.0

    def says(self) -> str:
        """In one phrase, what was assumed."""
        if not self.unknown:
            return ("each request's CPU is its rows' (none a throttle held ran beside "
                    "another)")
        if not self.drawn:
            given = {MEAN: "each is given the CPU per request the kernel counted over their "
                           "rows (their mean)",
                     ROWS: "each is given its rows' share",
                     BY_WALL: "their rows' CPU is given out by latency less hold"}[self.unseen]
            return (f"the CPU of {self.unknown} of {self.count} requests is not known (a "
                    f"throttle held them beside others) and {given}: fewer than "
                    f"{MIN_DONORS} requests ran unthrottled and alone, so the shape of its "
                    "distribution was not seen")
        return (f"the CPU of {self.drawn} of {self.count} requests a throttle held beside "
                f"others is drawn from the {self.donors} that ran unthrottled and alone, "
                "rank for rank by latency less hold, as far up their distribution as their "
                "rows' CPU puts them (heavy ones stay heavy; assumed: a request slower under "
                "throttling was a heavier one)")

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.count, "not_known": self.unknown, "drawn": self.drawn,
                "from_unthrottled": self.donors, "shape_seen": self.shape_seen,
                "says": self.says()}


MIN_DONORS = 10   # fewer unthrottled requests than this: no distribution to draw from


def draw_cpu(keys: Sequence[float], donors_ns: Sequence[float], shift: float = 0.0
             ) -> list[float]:
    """Each of the requests ranked by ``keys`` (heavier: a larger key) given the CPU at the
    same rank of ``donors_ns``, the empirical distribution (pure): the ``i``-th smallest of
    ``m`` keys gets the donors' quantile ``(i + 0.5) / m`` (moved by ``shift``, clamped), so
    their CPU keeps the donors' spread and order, not the mean."""
    ordered = sorted(donors_ns)
    n, m = len(ordered), len(keys)
    out = [0.0] * m
    for rank, i in enumerate(sorted(range(m), key=lambda i: keys[i])):
        at = min(1.0 - 1e-12, max(0.0, (rank + 0.5) / m + shift))
        out[i] = float(ordered[min(n - 1, int(at * n))])
    return out


def placed_shift(keys: Sequence[float], donors_ns: Sequence[float], total_ns: float) -> float:
    """The shift of :func:`draw_cpu`'s ranks (in [-1, 1]) whose draw comes nearest to
    ``total_ns`` together (pure): where the requests drawn for used more than the donors'
    mean, they were the heavier part of the distribution, and they get its heavier values
    rather than every value scaled up (a 15 ms request kept at 15 ms, not made 25)."""
    def drawn(shift: float) -> float:
        return sum(draw_cpu(keys, donors_ns, shift))

    low, high = -1.0, 1.0
    if drawn(high) <= total_ns:
        return high
    if drawn(low) >= total_ns:
        return low
    for _ in range(40):   # the sum grows with the shift, in steps
        middle = (low + high) / 2
        if drawn(middle) < total_ns:
            low = middle
        else:
            high = middle
    return low if total_ns - drawn(low) <= drawn(high) - total_ns else high


def _lanes(reqs: Sequence[Request]) -> tuple[list[int | None], list[int]]:
    """Each request's predecessor in the fewest lanes of requests that do not overlap (each
    goes after the lane that ended last before it started), and the gap after it; an overlap
    within the file's rounding (:func:`client.data.loadshape.time_step`: hey's 0.1 ms) is
    not one, so rounded times never make two lanes of one connection."""
    spans = [(r.start_ns, r.start_ns + r.latency_ns) for r in reqs]
    step = time_step(spans)
    return chains(spans, 2 * step if step > 1 else 0)


def load_of(demand: Demand, requests: Sequence[Request], closed: bool | None = None,
            shift: float = 0.0, unseen: str = MEAN) -> Load:
    """The requests (sorted by start) as work: each one's CPU is the group's usage while it
    ran, an interval's usage shared among the requests overlapping it (by each one's own CPU
    spread over its latency when every request has one, else by overlap); usage that overlaps
    no request is background, and so is that usage's rate (CPU per wall time,
    :func:`_idle_rate`) in the rows with requests. On coarse rows or a throttled record, with
    the requests' own CPU, each one is its own CPU times the group's over the requests'
    (:func:`_own_shares`). No request is given more CPU than its latency on the group's
    CPUs: the rest is background where it lay. ``closed``: whether the requests were sent in a closed loop, when their
    file says (None: read from their gaps). Where the record was throttled and the requests
    do not all carry their own CPU, a request whose CPU it hid gets one drawn from those it
    showed (:class:`CpuDrawn`; ``shift`` moves the ranks drawn, a bound of the range).
    Where too few requests ran unthrottled and alone to draw from, the shape of the
    distribution was not seen: ``unseen`` says what those requests are given, together the
    CPU their rows show (the kernel's count less the background): :data:`MEAN`, each the
    same, the CPU per request the kernel counted; :data:`ROWS`, each its own rows' share by
    overlap; :data:`BY_WALL`, each in proportion to its latency less its hold (the slowest
    the heaviest). The last two are bounds of the range."""
    reqs = sorted(requests, key=lambda r: r.start_ns)
    follows, gaps = _lanes(reqs)
    if closed is None:   # the file does not say: a closed loop sends the next request as soon
        # as one ends, so nearly all its gaps are short
        closed = is_closed(follows, gaps)
    lanes = sum(1 for f in follows if f is None) if closed else 0
    starts, ends = demand.starts_ns, (*demand.starts_ns[1:], demand.end_ns)
    own = bool(reqs) and all(r.cpu_ns for r in reqs)
    weight = [0.0] * len(starts)
    spans: list[list[tuple[int, float]]] = []   # (row, the request's weight there)
    for r in reqs:
        lo, hi, mine = r.start_ns, r.start_ns + r.latency_ns, []
        for k in range(max(0, bisect.bisect_right(starts, lo) - 1), len(starts)):
            if starts[k] >= hi:
                break
            overlap = min(hi, ends[k]) - max(lo, starts[k])
            if overlap > 0:
                w = (r.cpu_ns or 0) * overlap / r.latency_ns if own else float(overlap)
                weight[k] += w
                mine.append((k, w))
        spans.append(mine)
    theirs = list(weight)   # the replayed requests' weight alone
    for lo, latency, cpu_ns in demand.partial:   # a part-held request's share is its own
        hi = lo + latency
        for k in range(max(0, bisect.bisect_right(starts, lo) - 1), len(starts)):
            if starts[k] >= hi:
                break
            overlap = min(hi, ends[k]) - max(lo, starts[k])
            if overlap > 0 and latency > 0:
                weight[k] += cpu_ns * overlap / latency if own else float(overlap)
    rate = _idle_rate(demand, weight)
    background = [min(used, rate * (ends[k] - starts[k])) if weight[k] else used
                  for k, used in enumerate(demand.used_ns)]
    ran = [used - bg for used, bg in zip(demand.used_ns, background)]
    shares = [[(k, ran[k] * w / weight[k]) for k, w in mine] for mine in spans]
    if own and (demand.coarse or demand.throttled_wall_ns > 0):
        shares = _own_shares(reqs, spans, sum(u * t / w for u, t, w in zip(ran, theirs, weight)
                                              if t))
    cpus = []
    for r, mine in zip(reqs, shares):
        cpu = sum(c for _k, c in mine)
        most = r.latency_ns * demand.cores
        if cpu > most:   # more than it could have run: the rest was the group's own
            for k, c in mine:
                background[k] += c * (1 - most / cpu)
            cpu = float(most)
        cpus.append(cpu)
    walls = [_unheld(demand, r, cpu) for r, cpu in zip(reqs, cpus)]
    drawn = None
    if not own and demand.throttled_wall_ns > 0:
        drawn = _draw(demand, reqs, spans, weight, cpus, walls, shift, unseen, background)
    if not closed and not demand.coarse:
        _unqueued(reqs, cpus, walls)
    jobs = [Job(r.start_ns, wall, cpu, after if closed else None, gap if closed else 0)
            for r, cpu, wall, after, gap in zip(reqs, cpus, walls, follows, gaps)]
    return Load(tuple(jobs), lanes, tuple(background), drawn)


def _beside(reqs: Sequence[Request]) -> list[bool]:
    """Whether each request (sorted by start) ran at the same time as another, beyond the
    file's rounding (:func:`client.data.loadshape.time_step`)."""
    spans = [(r.start_ns, r.start_ns + r.latency_ns) for r in reqs]
    step = time_step(spans)
    slack = 2 * step if step > 1 else 0
    out = [False] * len(spans)
    latest, owner = -1, -1   # the latest end so far, and whose
    for i, (start, end) in enumerate(spans):
        if owner >= 0 and start + slack < latest:
            out[i] = out[owner] = True
        if end > latest:
            latest, owner = end, i
    return out


def _draw(demand: Demand, reqs: Sequence[Request],
          spans: Sequence[Sequence[tuple[int, float]]], weight: Sequence[float],
          cpus: list[float], walls: list[int], shift: float, unseen: str,
          background: list[float]) -> CpuDrawn:
    """Give each request whose CPU the throttled record did not show (see :class:`CpuDrawn`)
    a CPU drawn from the requests' whose CPU it showed (:func:`draw_cpu`), in ``cpus``, and
    at least that much wall time (on one CPU), in ``walls``, at most the donors' median wall
    per CPU times its CPU (what it takes alone; its latency less its hold, if shorter);
    what was done. With fewer than :data:`MIN_DONORS` donors, the CPU their rows show is
    given out as ``unseen`` says (:func:`load_of`)."""
    def alone(mine: Sequence[tuple[int, float]]) -> bool:
        return all(weight[k] <= w * (1 + 1e-9) for k, w in mine)

    def held_by(r: Request) -> bool:
        return r.held_ns > 0 or held_at_most(demand, r.start_ns, r.start_ns + r.latency_ns) > 0

    beside = _beside(reqs)
    unknown, donors, paces = [], [], []
    for i, (r, mine) in enumerate(zip(reqs, spans)):
        if r.cpu_ns:
            continue
        # one after another on fine rows, a row's CPU splits by time as it ran; a request
        # beside another, or in coarse rows with others, gets their mean
        shown = not beside[i] and (not demand.coarse or alone(mine))
        if held_by(r):
            if not shown:
                unknown.append(i)
        elif shown:
            donors.append(cpus[i])
            if cpus[i] > 0:
                paces.append(walls[i] / cpus[i])
    if not unknown:
        return CpuDrawn(len(reqs), 0, 0, len(donors), shift)
    if len(donors) < MIN_DONORS:
        _unseen_shape(demand, reqs, unknown, cpus, walls, unseen, spans, background)
        return CpuDrawn(len(reqs), len(unknown), 0, len(donors), shift, unseen)
    keys = [float(reqs[i].latency_ns - reqs[i].held_ns) + reqs[i].latency_ns * 1e-9
            for i in unknown]
    # together they used what their rows show: the donors' values, as far up their
    # distribution as that total puts them (the held are not a fair sample: a heavy request
    # is the likelier to meet a throttle), then what is left scaled
    total = sum(cpus[i] for i in unknown)
    picked = draw_cpu(keys, donors, placed_shift(keys, donors, total) + shift)
    scale = total / max(1e-9, sum(picked))
    # the wall a request alone takes a ns of CPU in, as the donors ran: a held request's
    # latency less its hold also holds its wait behind the backlog the throttles built (the
    # requests queued while the group ran), which the replay makes again where a limit
    # builds one (the requests share the group's CPUs), so it is not the request's own
    pace = max(1.0, sorted(paces)[len(paces) // 2]) if paces else math.inf
    for i, cpu in zip(unknown, (c * scale for c in picked)):
        r = reqs[i]
        cpus[i] = cpu = min(cpu, float(r.latency_ns * demand.cores))
        own = min(_unheld(demand, r, cpu), math.ceil(cpu * pace) if cpu > 0 else 0)
        walls[i] = max(own, min(r.latency_ns, math.ceil(cpu)))
    return CpuDrawn(len(reqs), len(unknown), len(unknown), len(donors), shift)


def _unseen_shape(demand: Demand, reqs: Sequence[Request], unknown: Sequence[int],
                  cpus: list[float], walls: list[int], unseen: str,
                  spans: Sequence[Sequence[tuple[int, float]]], background: list[float]
                  ) -> None:
    """The CPU the rows show for the ``unknown`` requests (their shares in ``cpus``: the
    kernel's count less the background) given out among them as ``unseen`` says
    (:func:`load_of`), in ``cpus``, none more than its latency on the group's CPUs (what a
    request cannot hold goes to the others; what none can, to the background where they
    ran); each at least that much wall time (on one CPU), at most its latency, in
    ``walls``."""
    if unseen == ROWS:
        return
    remaining = sum(cpus[i] for i in unknown)
    key = {i: float(max(1, reqs[i].latency_ns - reqs[i].held_ns)) if unseen == BY_WALL
           else 1.0 for i in unknown}
    cap = {i: float(reqs[i].latency_ns * demand.cores) for i in unknown}
    left = set(unknown)
    while left:   # water-filling: the capped take their cap, the rest share what is left
        whole = sum(key[i] for i in left)
        over = {i for i in left if remaining * key[i] / whole > cap[i]}
        if not over:
            for i in left:
                cpus[i] = remaining * key[i] / whole
            remaining = 0.0
            break
        for i in over:
            cpus[i] = cap[i]
            remaining -= cap[i]
        left -= over
    if remaining > 0:   # every one at its cap: the rest was the group's own
        weights = [(k, w) for i in unknown for k, w in spans[i]]
        total = sum(w for _k, w in weights)
        for k, w in weights:
            background[k] += remaining * w / total if total else 0.0
    for i in unknown:
        r, cpu = reqs[i], cpus[i]
        walls[i] = max(_unheld(demand, r, cpu), min(r.latency_ns, math.ceil(cpu)))


def _unqueued(reqs: Sequence[Request], cpus: Sequence[float], walls: list[int]) -> None:
    """An open loop: each request that ran beside another given, in ``walls``, at most the
    wall a request alone takes for its CPU (the median wall per CPU of those that ran alone
    and unheld; with fewer than :data:`MIN_DONORS`, one CPU's), at least its CPU on one
    CPU. The loop kept sending while the group was busy (the quota, or a burst, queued the
    requests), and a request's latency less its hold also holds its wait behind the others
    in that queue (the group ran them): the replay makes that queue again where a limit
    builds one (the requests share the group's CPUs), so it is not the request's own wall;
    kept, it would hold every request at any limit, and count the queue twice at a lower
    one (issue 57's matrix: an asyncio server's open loop at 0.3 CPU read "cannot be met"
    where live met the goal at 0.38; its bursts recorded at 1 CPU advised 0.471 for 0.31)."""
    beside = _beside(reqs)
    paces = sorted(w / c for r, c, w, b in zip(reqs, cpus, walls, beside)
                   if not b and not r.held_ns and c > 0)
    pace = max(1.0, paces[len(paces) // 2]) if len(paces) >= MIN_DONORS else 1.0
    for i, (r, cpu) in enumerate(zip(reqs, cpus)):
        if beside[i] and cpu > 0:
            walls[i] = max(min(walls[i], math.ceil(cpu * pace)),
                           min(r.latency_ns, math.ceil(cpu)))


def _idle_rate(demand: Demand, weight: Sequence[float]) -> float:
    """The group's CPU per ns of wall time in the window's rows that overlap no request, the
    median row's (0 without such rows): its own work, which runs beside the requests at the
    same rate."""
    ends = (*demand.starts_ns[1:], demand.end_ns)
    rates = sorted(u / (e - s) for s, e, u, w in zip(demand.starts_ns, ends, demand.used_ns,
                                                      weight) if not w and e > s)
    if not rates:
        return 0.0
    # the median row's: a row beside the requests may hold their CPU (the counters read a
    # row late or early of the client's clock, the last answer's work), and one such row
    # would set the rate of every row with requests
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


def _own_shares(reqs: Sequence[Request], spans: Sequence[Sequence[tuple[int, float]]],
                ran_ns: float) -> list[list[tuple[int, float]]]:
    """Each request's CPU on coarse rows or in a throttled record: its own (``cpu_ns``, the
    server's) times the CPU the rows overlapping the requests show over the requests' own,
    laid where it ran as its weight lies. A row holds several requests and a throttle's
    place in it is not known, so a row shared among them by weight gives one request
    another's CPU; and under a quota the requests queue, each running its CPU at the end of
    its latency, not spread over it: shared by weight, the rows of the queue's drain (the
    load stopped, the group ran the backlog) went to the few requests still in flight
    (issue 57's matrix: burn-service's open loop at 0.3 CPU gave its last requests 18 ms
    for their own 6 and advised 0.637 CPU for live's 0.412). The ratio (what the group runs
    around a request: the server, its runtime; ``ran_ns`` is the rows' CPU less the group's
    own steady work) is the window's."""
    scale = ran_ns / sum(r.cpu_ns or 0 for r in reqs)
    out = []
    for r, mine in zip(reqs, spans):
        total = sum(w for _k, w in mine)
        out.append([(k, (r.cpu_ns or 0) * scale * w / total) for k, w in mine] if total else [])
    return out


def _unheld(demand: Demand, r: Request, cpu_ns: float) -> int:
    """A request's wall time not held by throttling: its latency less the recorded hold.

    On coarse rows (:attr:`Demand.coarse`) the hold's place in its row is not known (the
    hold laid on a row's middle can cover a request that ran all along), and the part of it
    the stretches miss would run at every limit: a request a throttle may have held
    (:func:`held_at_most`) is taken as its CPU, work run on one CPU, never more than its
    latency."""
    if not demand.coarse or held_at_most(demand, r.start_ns, r.start_ns + r.latency_ns) <= 0:
        return max(0, r.latency_ns - r.held_ns)
    return min(r.latency_ns, math.ceil(cpu_ns))


def replay_load(demand: Demand, load: Load, cpus: float | None, burst_ns: int = 0,
                period_ns: int | None = None
                ) -> tuple[Replayed, tuple[int, ...], tuple[int, ...]]:
    """The requests run again under ``cpus`` (None: no limit) on the record's period grid, and
    each one's latency and send time there (in the order of :attr:`Load.jobs`).

    A request runs for its unthrottled wall time, using its CPU evenly over it (at most
    ``demand.cores`` CPU for the whole group, the background included); while the quota is
    spent nothing runs. A closed loop sends each request its recorded gap after the one before
    it in its lane ended; an open loop at its recorded time. Runs past the window until the last one ends."""
    period = period_ns or demand.period_ns
    origin = demand.origin_ns if period == demand.period_ns else demand.start_ns
    account = (None if cpus is None else
               QuotaAccount(max(1, round(cpus * period)), period, burst_ns, origin))
    before = account.stats(demand.start_ns) if account else CpuStat()
    jobs, cores = load.jobs, float(demand.cores)
    sent, latencies = [0] * len(jobs), [0] * len(jobs)
    left: dict[int, float] = {}
    ends = (*demand.starts_ns[1:], demand.end_ns)
    stretches: list[tuple[int, int]] = []
    pending = [(j.arrival_ns, i) for i, j in enumerate(jobs) if j.follows is None]
    heapq.heapify(pending)
    successor = {j.follows: i for i, j in enumerate(jobs) if j.follows is not None}
    t, k = demand.start_ns, 0
    while True:
        while pending and pending[0][0] <= t:    # send what is due
            due, i = heapq.heappop(pending)
            sent[i], left[i] = due, float(jobs[i].wall_ns)
        done = [i for i, w in left.items() if w <= 0.5]
        for i in done:
            latencies[i] = t - sent[i]
            del left[i]
            if i in successor:
                heapq.heappush(pending, (t + jobs[successor[i]].gap_ns, successor[i]))
        if done:
            continue
        while k < len(ends) and ends[k] <= t:
            k += 1
        bg = load.background_ns[k] / (ends[k] - demand.starts_ns[k]) if k < len(ends) else 0.0
        if not left and bg <= 0:
            later = [x for x in (pending[0][0] if pending else None,
                                 ends[k] if k < len(ends) else None) if x is not None]
            if not later:
                break
            t = max(t + 1, min(later))
            continue
        if account is not None:
            resume = account.throttled_until(t)
            if resume > t:   # throttled: nothing runs until the refill
                stretches.append((t, resume))
                t = resume
                continue
        total = bg + sum(jobs[i].cpu_ns / jobs[i].wall_ns for i in left)
        speed = min(1.0, cores / total) if total > 0 else 1.0
        events = [t + math.ceil(w / speed) for w in left.values()]
        events += [x for x in (pending[0][0] if pending else None,
                               ends[k] if k < len(ends) else None) if x is not None]
        if account is not None and total > 0:
            events += [account.next_boundary(t),
                       t + math.ceil(max(1, account.remaining(t)) / (total * speed))]
        step = max(t + 1, min(events))
        for i in left:
            left[i] -= speed * (step - t)
        if account is not None:
            account.charge(round(total * speed * (step - t)), step)
        t = step
    end = max(t, demand.end_ns)
    stats = account.stats(end) - before if account else CpuStat()
    return (Replayed(cpus, tuple(stretches), stats, (demand.start_ns, end)), tuple(latencies),
            tuple(sent))



@dataclass(frozen=True)
class LimitRow:
    """One limit's answer: the replay, and each request's predicted latency (None: no
    requests were given)."""

    replayed: Replayed
    latencies_ns: tuple[int, ...] | None
    sent_ns: tuple[int, ...] | None = None   # each request's send time, on the record's clock

    def latency_ms(self, q: float) -> float:
        return percentile([v / MS for v in self.latencies_ns or ()], q)

    def delay_ms(self, q: float) -> float:
        return added_delay(self.replayed, q) / MS

    def delays_ms(self, *qs: float) -> tuple[float, ...]:
        return tuple(d / MS for d in added_delays(self.replayed, qs))

    def to_dict(self) -> dict[str, Any]:
        r = self.replayed
        out: dict[str, Any] = {
            "cpus": r.cpus, "periods_throttled": r.stats.nr_throttled,
            "periods": r.stats.nr_periods, "throttled_ms": r.throttled_ns / MS}
        if self.latencies_ns is not None:
            out.update({f"p{q}_ms": self.latency_ms(q) for q in (50, 90, 99)})
        else:
            out.update({f"added_delay_p{q}_ms": self.delay_ms(q) for q in (50, 99)})
        out["throttled"] = [{"start_ms": (s - r.window[0]) / MS, "held_ms": (e - s) / MS}
                            for s, e in r.stretches]
        return out


def replay_limits(demand: Demand, limits: Sequence[float | None],
                  requests: Sequence[Request] | None = None, burst_ns: int = 0,
                  period_ns: int | None = None, closed: bool | None = None) -> list[LimitRow]:
    """Each limit replayed, with the requests' predicted latencies when they are given
    (``closed``: sent in a closed loop or not, when the requests' file says; see
    :func:`load_of`)."""
    if requests is None:
        return [LimitRow(replay(demand, cpus, burst_ns, period_ns), None) for cpus in limits]
    load = load_of(demand, requests, closed)
    return [LimitRow(*replay_load(demand, load, cpus, burst_ns, period_ns)) for cpus in limits]
