"""The in-process CPU throttle: a CFS-like quota on the process's own CPU time.

For people who cannot use cgroups (macOS, Windows, no root) but want to see what a CPU limit
does. ``burn-service --cpu-limit 30`` lets the process use 30 % of one CPU: a quota of
30 ms per 100 ms cycle (``--throttle-cycle``), with the kernel's accounting from
``service.quota`` (refill per period, debt from overshoot, idle periods not counted).

- **Budget** = the CPU time of the whole process, all threads (``time.process_time_ns``),
  like a cgroup: the event loop, HTTP parsing and the threadpool's work are all charged.
  It is **per worker process**: ``--workers 4 --cpu-limit 30`` gives each of the four
  processes its own 30 %, so 1.2 CPU in total (a cgroup around all of them would give 0.3).
- **Modes**: ``cfs`` pauses work in the middle, where the kernel would: the work loop calls
  :meth:`Work.checkpoint` every ~0.1-0.5 ms of CPU and it sleeps until the next cycle once
  the quota is spent, so a request that hits the end of the budget waits about
  ``cycle - quota``. ``boundary`` only checks between requests (transaction-aware, like
  the CpuThrottler of the seed document): a request runs to its end, its overshoot is debt.
  In both modes a request arriving while the process is throttled waits for the next cycle
  before it starts (:meth:`Throttle.start`), as the kernel would not run it either.
- **Cost**: idle costs nothing (no thread, no timer: the periods are computed lazily when
  someone asks). A paused thread sleeps, never spins. A checkpoint reads only the cheap
  monotonic clock while the quota left cannot possibly be spent yet (``cpus`` CPUs at full
  speed since the last reading); otherwise it reads the process CPU clock (one system call)
  under a lock. Thread-safe.
- **Start**: the CPU the process spent before the first request (imports, start-up) is not
  charged; the accounting begins at the first look (a container's quota would charge it).
- **What it cannot do**: stop a thread that does not call a checkpoint (the event loop keeps
  running while the burn threads sleep, and its CPU is charged); the kernel stops everything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from service.cgroup import available_cpus
from service.quota import QuotaAccount, CpuStat

__all__ = ["MODES", "Throttle", "Work"]

MODES = ("cfs", "boundary")

Clock = Callable[[], int]


class Throttle:
    """A quota of ``cpu_limit_percent`` % of one CPU per ``cycle_ms``; 0 % turns it off.

    The clocks and ``sleep`` are parameters so tests can drive it with a fake clock.
    """

    def __init__(self, cpu_limit_percent: float = 0.0, cycle_ms: float = 100.0,
                 mode: str = "cfs", *, burst_ms: float = 0.0, cpus: int | None = None,
                 cpu_clock: Clock = time.process_time_ns, wall_clock: Clock = time.monotonic_ns,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        if not 0 <= cpu_limit_percent <= 100:
            raise ValueError(f"cpu_limit_percent must be in [0, 100] (got {cpu_limit_percent})")
        if cycle_ms <= 0:
            raise ValueError(f"cycle_ms must be > 0 (got {cycle_ms})")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        self.cpu_limit_percent = float(cpu_limit_percent)
        self.cycle_ms = float(cycle_ms)
        self.mode = mode
        self.enabled = cpu_limit_percent > 0
        self._cpus = cpus if cpus is not None else available_cpus()
        self._cpu_clock, self._wall_clock, self._sleep = cpu_clock, wall_clock, sleep
        self._lock = threading.Lock()
        period_ns = round(cycle_ms * 1e6)
        quota_ns = max(1, round(period_ns * cpu_limit_percent / 100))
        self._account: QuotaAccount | None = None
        self._cpu_seen: int | None = None  # read at the first use, not at start-up
        self._safe_until = 0  # before this wall time the quota cannot be spent: skip reading CPU
        if self.enabled:
            self._account = QuotaAccount(quota_ns, period_ns, round(burst_ms * 1e6),
                                         origin_ns=wall_clock())

    @classmethod
    def from_settings(cls, settings: Any) -> Throttle:
        """From ``Settings``: ``cpu_limit``, ``throttle_cycle``, ``throttle_mode``."""
        return cls(settings.cpu_limit, settings.throttle_cycle, settings.throttle_mode)

    @property
    def account(self) -> QuotaAccount | None:
        """The quota accounting (None when off): read ``quota_ns``/``period_ns`` from it; its
        counters change under the throttle's lock, so read them with :meth:`stats`."""
        return self._account

    def describe(self) -> dict[str, Any] | None:
        """The ``"inprocess"`` part of ``/limits``; None when off."""
        if not self.enabled:
            return None
        return {"cpu_limit_percent": self.cpu_limit_percent, "cycle_ms": self.cycle_ms,
                "mode": self.mode}

    # -- used by the work ------------------------------------------------------------

    def start(self) -> Work:
        """Begin a piece of work (a request): first wait while the process is throttled."""
        work = Work(self)
        if self.enabled:
            work.paused_ns += self._wait()
        return work

    def work_checkpoint(self) -> Callable[[], object] | None:
        """A checkpoint for one piece of work that only has a loop to hook into (the pi page).

        None when the throttle is off. In ``cfs`` mode it is :meth:`checkpoint`. In
        ``boundary`` mode its first call waits while the process is throttled (the wait before
        the start, one chunk late) and later calls do nothing. Its wall time is the pause.
        """
        if not self.enabled:
            return None
        if self.mode == "cfs":
            return self.checkpoint
        gate = [True]

        def wait_once() -> None:
            if gate:
                gate.clear()
                self._wait()
        return wait_once

    def checkpoint(self) -> int:
        """Charge the process's CPU since the last look; sleep while the quota is spent.

        Returns the ns slept. Cheap enough to call every ~0.1 ms of work; blocks the calling
        thread (call it from a worker thread, not from the event loop).
        """
        if not self.enabled or self._wall_clock() < self._safe_until:
            return 0
        return self._wait()

    def sync(self) -> None:
        """Charge the process's CPU since the last look, without waiting."""
        if self.enabled:
            with self._lock:
                self._charge(self._wall_clock())

    def stats(self) -> CpuStat:
        """``nr_periods``, ``nr_throttled``, ``throttled_ns`` (and burst counters) so far."""
        if self._account is None:
            return CpuStat()
        with self._lock:
            now = self._wall_clock()
            self._charge(now)
            return self._account.stats(now)

    # -- inside ------------------------------------------------------------------------

    def _charge(self, now: int) -> None:
        """Charge CPU used since the last reading; caller holds the lock."""
        assert self._account is not None
        cpu = self._cpu_clock()
        if self._cpu_seen is not None:  # the first look only sets the baseline
            self._account.charge(max(0, cpu - self._cpu_seen), now)
        self._cpu_seen = cpu

    def _wait(self) -> int:
        assert self._account is not None
        paused = 0
        while True:
            with self._lock:
                now = self._wall_clock()
                self._charge(now)
                resume = self._account.throttled_until(now)
                if resume <= now:
                    # No need to read the CPU clock before the quota left could be spent by
                    # every CPU at once, nor across a boundary (charges must not straddle one).
                    left = self._account.remaining(now)
                    self._safe_until = min(now + left // self._cpus,
                                           self._account.next_boundary(now))
                    return paused
                self._safe_until = 0
            self._sleep((resume - now) / 1e9)
            paused += max(0, self._wall_clock() - now)


class Work:
    """One piece of throttled work (a request): its checkpoint and the time it was paused.

    ``checkpoint()`` is what the work loop calls every ~0.1-0.5 ms of CPU: in ``cfs`` mode it
    charges and pauses like :meth:`Throttle.checkpoint`; in ``boundary`` mode, or with the
    throttle off, it does nothing. ``paused_ns`` adds the wait before the start and every
    pause (``Server-Timing: throttle;dur=``). Use as a context manager or call ``finish()``.
    """

    __slots__ = ("_throttle", "checkpoint", "paused_ns")

    def __init__(self, throttle: Throttle) -> None:
        self._throttle = throttle
        self.paused_ns = 0
        pauses = throttle.enabled and throttle.mode == "cfs"
        self.checkpoint: Callable[[], None] = self._pause if pauses else _nothing

    def _pause(self) -> None:
        self.paused_ns += self._throttle.checkpoint()

    def finish(self) -> None:
        """The work is done: charge its CPU now (in ``boundary`` mode, its overshoot)."""
        self._throttle.sync()

    def __enter__(self) -> Work:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def _nothing() -> None:
    return None
