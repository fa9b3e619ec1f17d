"""The kernel's CPU quota accounting (CFS bandwidth control), as a pure, clock-agnostic model.

A cgroup with ``cpu.cfs_quota_us = Q`` and ``cpu.cfs_period_us = P`` (``docker run --cpus
Q/P``, a Kubernetes CPU limit) may run Q of CPU time in every period P. When the quota of a
period is spent, everything in the group stops until the next period refills it. This module
does that bookkeeping and nothing else: no clock, no threads, no I/O. The caller says what
time it is (``now_ns``, any monotonic nanosecond clock) and how much CPU ran, so the same
:class:`QuotaAccount` drives the in-process throttle (``service.throttle``, on the real clock)
and the client's prediction of what a quota does to requests (a simulated clock).

Semantics, after ``kernel/sched/fair.c`` (Linux >= 5.14, ``do_sched_cfs_period_timer``,
``__refill_cfs_bandwidth_runtime``, ``__assign_cfs_rq_runtime``):

- **Periods** lie on a fixed grid ``origin_ns + k * period_ns``. The kernel's period timer
  keeps its phase (``hrtimer_forward_now``) when it stops and restarts.
- **Refill**: at each period boundary the pool gains ``quota`` and is capped at
  ``quota + burst``. Without burst that is "back to ``quota``"; with burst, quota left unused
  accumulates up to ``burst`` extra (``cpu.cfs_burst_us`` v1 / ``cpu.max.burst`` v2).
- **Timer stops when idle**: a boundary with no CPU charged during the period before it marks
  the group idle; the next boundary that finds it still idle refills once more and stops the
  period timer. Periods that pass while the timer is stopped are neither refilled nor counted
  in ``nr_periods`` (so after a long pause the pool holds at most two refills, capped at
  ``quota + burst``). The first charge restarts the timer at the next boundary of the grid.
- **Throttling**: work that wants to run when the runtime left is ``<= 0`` is throttled
  (:meth:`QuotaAccount.throttled_until`) until the first boundary whose refill leaves runtime
  ``> 0``. ``nr_throttled`` counts the boundaries that found the group throttled (a throttle
  that lasts three periods counts three), ``throttled_ns`` adds the time from the throttle to
  the boundary that lifted it (like ``throttled_time``, only once it has ended).
- **Debt**: CPU charged beyond the runtime left (the overshoot between "the quota ran out" and
  "the check noticed": a scheduler tick in the kernel, a checkpoint here) is owed and is paid
  out of the next refills before anything may run again; it is never forgiven by idle time
  (the kernel keeps it in the per-CPU ``runtime_remaining``). A throttle that forgives it gets
  more than its share.
- **Burst statistics**: at each boundary, CPU used from the pool beyond ``quota`` in the period
  just ended counts as a burst (``nr_bursts``, ``burst_time``).

Simplifications, said out loud: the kernel hands runtime to each CPU's runqueue in 5 ms
slices and sums ``throttled_time`` over runqueues (two CPUs throttled for 70 ms count 140 ms);
this model has one runqueue with perfect accounting, so ``throttled_ns`` is wall time.
The kernel refuses quotas under 1 ms; this model accepts any positive quota.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CpuStat", "QuotaAccount", "RunResult"]


@dataclass(frozen=True)
class CpuStat:
    """The counters of ``cpu.stat`` with the kernel's names, times in ns (v1 ``throttled_time``
    is ns, v2 ``throttled_usec`` µs: ``cpuquota.cgroupfs`` normalises). The same record whether
    the kernel counted (a cgroup's file) or this module did (:meth:`QuotaAccount.stats`); the
    difference of two readings is what happened between them."""

    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_ns: int = 0
    nr_bursts: int = 0
    burst_ns: int = 0

    def __sub__(self, other: CpuStat) -> CpuStat:
        return CpuStat(self.nr_periods - other.nr_periods, self.nr_throttled - other.nr_throttled,
                       self.throttled_ns - other.throttled_ns, self.nr_bursts - other.nr_bursts,
                       self.burst_ns - other.burst_ns)


@dataclass(frozen=True)
class RunResult:
    """What :meth:`QuotaAccount.run` did to one piece of work."""

    start_ns: int   # when the work asked for the CPU
    end_ns: int     # when its last nanosecond of CPU ran
    paused_ns: int  # wall time it spent throttled (before it started and in the middle)


class QuotaAccount:
    """A CPU quota of ``quota_ns`` per ``period_ns``, with an optional ``burst_ns``.

    Typical use, from a loop that checks every so often::

        account = QuotaAccount(quota_ns=30_000_000, period_ns=100_000_000)
        account.charge(cpu_ns_since_last_check, now_ns)
        resume_ns = account.throttled_until(now_ns)   # == now_ns: keep going
        # else: sleep until resume_ns, then check again

    Times must come from one monotonic clock; a ``now_ns`` earlier than one already seen is
    taken as the latest seen (callers on several threads may race to the lock).
    """

    def __init__(self, quota_ns: int, period_ns: int, burst_ns: int = 0,
                 origin_ns: int = 0) -> None:
        if period_ns <= 0:
            raise ValueError(f"period_ns must be > 0 (got {period_ns})")
        if quota_ns <= 0:
            raise ValueError(f"quota_ns must be > 0 (got {quota_ns})")
        if burst_ns < 0:
            raise ValueError(f"burst_ns must be >= 0 (got {burst_ns})")
        self.quota_ns = int(quota_ns)
        self.period_ns = int(period_ns)
        self.burst_ns = int(burst_ns)
        self.origin_ns = int(origin_ns)
        self._pool = self.quota_ns      # the group's runtime for this period (>= 0)
        self._debt = 0                  # CPU charged beyond the pool, paid from later refills
        self._snap = self.quota_ns      # the pool right after the last refill (burst stats)
        self._active = False            # the period timer runs
        self._idle = False              # no CPU charged since the last boundary
        self._next_ns = 0               # the next boundary, while the timer runs
        self._throttled_since: int | None = None
        self._now = self.origin_ns
        self._nr_periods = self._nr_throttled = self._throttled_ns = 0
        self._nr_bursts = self._burst_ns = 0

    # -- queries -----------------------------------------------------------------------

    def remaining(self, now_ns: int) -> int:
        """Runtime left in this period at ``now_ns``; ``<= 0`` means work would be throttled."""
        self._advance(now_ns, inclusive=True)
        return self._pool - self._debt

    def is_throttled(self, now_ns: int) -> bool:
        """Whether work was throttled and is still waiting for a refill at ``now_ns``."""
        self._advance(now_ns, inclusive=True)
        return self._throttled_since is not None

    def next_boundary(self, now_ns: int) -> int:
        """The first period boundary of the grid strictly after ``now_ns``."""
        elapsed = int(now_ns) - self.origin_ns
        return self.origin_ns + (elapsed // self.period_ns + 1) * self.period_ns

    def stats(self, now_ns: int | None = None) -> CpuStat:
        """The counters, after the boundaries up to ``now_ns`` (if given) have passed."""
        if now_ns is not None:
            self._advance(now_ns, inclusive=True)
        return CpuStat(self._nr_periods, self._nr_throttled, self._throttled_ns,
                          self._nr_bursts, self._burst_ns)

    # -- events ------------------------------------------------------------------------

    def charge(self, cpu_ns: int, now_ns: int) -> None:
        """Account ``cpu_ns`` of CPU the group ran just before ``now_ns``.

        Boundaries before ``now_ns`` pass first (a boundary at exactly ``now_ns`` passes after
        the charge). Charge in small steps: the model cannot know where inside a long step a
        boundary fell. CPU beyond the runtime left becomes debt.
        """
        if cpu_ns < 0:
            raise ValueError(f"cpu_ns must be >= 0 (got {cpu_ns})")
        now_ns = self._advance(now_ns, inclusive=False)
        if cpu_ns == 0:
            return
        self._start_timer(now_ns, ran_before=True)
        self._idle = False
        self._debt += int(cpu_ns)
        self._pay_debt()

    def throttled_until(self, now_ns: int) -> int:
        """When work that wants the CPU at ``now_ns`` may run.

        Returns ``now_ns`` when runtime is left. Otherwise the group is throttled from
        ``now_ns`` (counted as the kernel counts it) and the answer is the first future
        boundary whose refills cover the debt and leave runtime ``> 0``.
        """
        now_ns = self._advance(now_ns, inclusive=True)
        self._pay_debt()
        if self._pool > 0:
            return now_ns
        self._start_timer(now_ns)
        if self._throttled_since is None:
            self._throttled_since = now_ns
        # Each boundary while throttled refills `quota` into an empty pool and pays debt.
        fires = self._debt // self.quota_ns + 1
        return self._next_ns + (fires - 1) * self.period_ns

    def serve_steady(self, rate: float, start_ns: int, end_ns: int) -> int:
        """Serve CPU wanted at a steady ``rate`` (CPUs, > 0) from ``start_ns``, a period
        boundary, over whole periods up to ``end_ns``, and return the time it got to: as
        charging ``rate * period`` at each boundary, one period at a time, would leave the
        account, in one step. Only where no period can run out (no burst, no debt, the
        period's charge within the quota, the quota not spent before the boundary); else it
        does nothing and returns ``start_ns`` (the caller charges step by step). Call it
        after :meth:`throttled_until` answered ``start_ns``."""
        period, quota = self.period_ns, self.quota_ns
        if (rate <= 0 or self.burst_ns or self._debt or not self._active
                or self._throttled_since is not None or self._now != start_ns
                or self._next_ns != start_ns + period
                or self._pool != quota or self._snap != quota):
            return start_ns
        periods = (end_ns - start_ns) // period
        charge = round(rate * period)
        if periods < 1 or not 0 < charge <= quota or math.ceil(quota / rate) < period:
            return start_ns
        # each boundary but the last passed: refilled to the quota (no burst, nothing owed),
        # not idle; the last one's charge made, the boundary itself still ahead
        end = start_ns + periods * period
        self._nr_periods += periods - 1
        self._pool, self._snap, self._idle = quota - charge, quota, False
        self._now = self._next_ns = end
        return end

    def run(self, cpu_ns: int, start_ns: int, *, cpus: float = 1.0,
            overshoot_ns: int = 0) -> RunResult:
        """Simulate one piece of work of ``cpu_ns`` CPU that asks for the CPU at ``start_ns``.

        The work uses ``cpus`` CPU per ns of wall time while it runs (2.0 = two busy threads on
        two cores). When the quota runs out it goes on for ``overshoot_ns`` more CPU before it
        stops (the check interval: a scheduler tick in the kernel, a checkpoint in the
        in-process throttle), which becomes debt. Nothing else may use the account meanwhile;
        a simulator of concurrent work drives :meth:`charge` and :meth:`throttled_until`.
        """
        if cpu_ns < 0:
            raise ValueError(f"cpu_ns must be >= 0 (got {cpu_ns})")
        if cpus <= 0:
            raise ValueError(f"cpus must be > 0 (got {cpus})")
        if overshoot_ns < 0:
            raise ValueError(f"overshoot_ns must be >= 0 (got {overshoot_ns})")
        t = self.throttled_until(start_ns)
        paused = t - start_ns
        left = int(cpu_ns)
        while left > 0:
            self._start_timer(t)  # the timer starts when the work starts, not when it is charged
            step = min(left, self.remaining(t) + overshoot_ns)
            # stop at the next boundary: its refill changes what is left
            step = min(step, max(1, math.floor((self._next_ns - t) * cpus)))
            t += max(1, math.ceil(step / cpus))
            self.charge(step, t)
            left -= step
            if left > 0:
                resume = self.throttled_until(t)
                paused += resume - t
                t = resume
        return RunResult(start_ns=start_ns, end_ns=t, paused_ns=paused)

    # -- the period timer --------------------------------------------------------------

    def _advance(self, now_ns: int, *, inclusive: bool) -> int:
        now_ns = max(int(now_ns), self._now)
        self._now = now_ns
        while self._active and (self._next_ns < now_ns or inclusive and self._next_ns == now_ns):
            self._boundary(self._next_ns)
            self._next_ns += self.period_ns
        return now_ns

    def _start_timer(self, now_ns: int, ran_before: bool = False) -> None:
        # The timer starts when work starts. CPU charged at ``now_ns`` ran *before* it, so a
        # boundary at exactly ``now_ns`` is still ahead of it; work starting at ``now_ns``
        # gets the next one (``hrtimer_forward_now``: strictly after now).
        if not self._active:
            self._active = True
            self._next_ns = self.next_boundary(now_ns - 1 if ran_before else now_ns)

    def _boundary(self, at_ns: int) -> None:
        """``do_sched_cfs_period_timer`` for one period (overrun 1)."""
        throttled = self._throttled_since is not None
        self._nr_periods += 1
        self._pool += self.quota_ns
        over = self._snap - self._pool  # pool used beyond quota in the period just ended
        if over > 0:
            self._nr_bursts += 1
            self._burst_ns += over
        self._pool = min(self._pool, self.quota_ns + self.burst_ns)
        self._snap = self._pool
        if self._idle and not throttled:
            self._active = False
            return
        if not throttled:
            self._idle = True
            return
        self._nr_throttled += 1
        self._pay_debt()
        if self._pool > 0:
            assert self._throttled_since is not None
            self._throttled_ns += at_ns - self._throttled_since
            self._throttled_since = None
        self._idle = False

    def _pay_debt(self) -> None:
        paid = min(self._pool, self._debt)
        self._pool -= paid
        self._debt -= paid
