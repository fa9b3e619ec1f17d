"""The in-process CPU throttle (``burn-service --cpu-limit PCT``), in two modes.

For people who cannot use cgroups (macOS, Windows, no root) but want to see what a CPU limit
does. ``--cpu-limit 30`` is a quota of 30 ms per 100 ms cycle (``--throttle-cycle``), with
the kernel's accounting from ``cpuquota.account`` (refill per period, debt from overshoot, idle
periods not counted); 0 % turns it off. The modes differ in *what* is charged and *whose*
budget it is:

- ``cfs`` (the default) is a cgroup in miniature: the budget is the CPU time of the **whole
  process**, all threads (``time.process_time_ns``: the event loop, HTTP parsing, the
  threadpool's work), one budget **per worker process** (``--workers 4 --cpu-limit 30`` gives
  each process its own 30 %, where one cgroup around them would give 0.3 CPU in all). Work is
  paused in the middle, where the kernel would: the work loop calls :meth:`Work.checkpoint`
  every ~0.1-0.5 ms of CPU and it sleeps until the next cycle once the quota is spent; a
  request that arrives while the process is throttled waits for the next cycle before it
  starts. It cannot stop code that has no checkpoint (the event loop), though it charges it.
- ``boundary`` is the seed's CpuThrottler (``begin_work()`` / ``end_work()`` around each
  transaction): only **the work** is charged (the burn or the pi loop: the CPU time of the
  thread between :meth:`Throttle.start` and :meth:`Work.finish`, ``time.thread_time_ns``),
  and every **worker thread** has a budget of its own, so throughput doubles when the limit
  doubles. A piece of work always runs to its end; when it leaves its thread's budget spent,
  the thread sleeps right there (the seed's ``end_work``) until its next cycle refills the
  budget, holding the request (and its concurrency slot) meanwhile. The worker threads are
  the threads that run requests, at most ``--max-concurrent`` at once per process, so the
  work of a process gets at most ``max_concurrent × PCT`` %. Unlike the seed's class, a
  work's overshoot is carried as debt into the next cycles (the kernel's rule), so a burn
  longer than the budget still gets exactly its share.

- **Cost**: idle costs nothing (no thread, no timer: the periods are computed lazily when
  someone asks). A paused thread sleeps, never spins. A ``cfs`` checkpoint reads only the
  cheap monotonic clock while the quota left cannot possibly be spent yet (``cpus`` CPUs at
  full speed since the last reading) and sleeps straight away while another thread has found
  the process throttled; otherwise it reads the process CPU clock (one system call) under a
  lock. The throttle's own CPU (its bookkeeping, sleeps and wake-ups: ~50-100 us each on a
  small VM) is not charged, as the kernel's throttling is not charged to the group.
  ``boundary`` reads the thread's CPU clock twice per piece of work.
- **Start**: the CPU the process spent before the first request (imports, start-up) is not
  charged; the accounting begins at the first look (a container's quota would charge it).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cpuquota.cgroupfs import available_cpus
from cpuquota.account import CpuStat, QuotaAccount

__all__ = ["MODES", "Throttle", "Work"]

MODES = ("cfs", "boundary")
SCOPES = {"cfs": "process", "boundary": "worker thread"}  # whose budget it is, per mode

Clock = Callable[[], int]


@dataclass
class _Worker:
    """One worker thread's budget in ``boundary`` mode."""

    account: QuotaAccount
    thread: weakref.ReferenceType[threading.Thread]


class Throttle:
    """A quota of ``cpu_limit_percent`` % of one CPU per ``cycle_ms``; 0 % turns it off.

    The clocks and ``sleep`` are parameters so tests can drive it with a fake clock:
    ``cpu_clock`` is the process's CPU (``cfs``), ``thread_cpu_clock`` the calling thread's
    (``boundary``).
    """

    def __init__(self, cpu_limit_percent: float = 0.0, cycle_ms: float = 100.0,
                 mode: str = "cfs", *, burst_ms: float = 0.0, cpus: int | None = None,
                 cpu_clock: Clock = time.process_time_ns,
                 thread_cpu_clock: Clock = time.thread_time_ns,
                 wall_clock: Clock = time.monotonic_ns,
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
        self.period_ns = round(cycle_ms * 1e6)
        self.quota_ns = max(1, round(self.period_ns * cpu_limit_percent / 100))
        self.burst_ns = round(burst_ms * 1e6)
        self._cpus = cpus if cpus is not None else available_cpus()
        self._cpu_clock, self._thread_cpu_clock = cpu_clock, thread_cpu_clock
        self._wall_clock, self._sleep = wall_clock, sleep
        self._lock = threading.Lock()
        # cfs: one account for the process
        self._account: QuotaAccount | None = None
        self._cpu_seen: int | None = None  # read at the first use, not at start-up
        self._seen_at = 0  # the wall time of that reading
        self._safe_until = 0  # before this wall time the quota cannot be spent: skip reading CPU
        self._resume_at = 0   # before this wall time the process is throttled: just sleep
        self._own_ns = 0      # CPU the throttle itself used since the last reading
        if self.enabled and mode == "cfs":
            self._account = self._new_account()
        # boundary: one account per worker thread (and the counters of threads that ended)
        self._local = threading.local()
        self._workers: list[_Worker] = []
        self._retired = CpuStat()

    @classmethod
    def from_settings(cls, settings: Any) -> Throttle:
        """From ``Settings``: ``cpu_limit``, ``throttle_cycle``, ``throttle_mode``."""
        return cls(settings.cpu_limit, settings.throttle_cycle, settings.throttle_mode)

    @property
    def per(self) -> str:
        """Whose budget it is: ``process`` (cfs) or ``worker thread`` (boundary)."""
        return SCOPES[self.mode]

    @property
    def pauses_work(self) -> bool:
        """Whether work may be paused in the middle (``cfs`` and on): its loop should call
        :meth:`Work.checkpoint`; otherwise the checkpoint does nothing."""
        return self.enabled and self.mode == "cfs"

    def describe(self) -> dict[str, Any] | None:
        """The ``"inprocess"`` part of ``/limits``; None when off."""
        if not self.enabled:
            return None
        return {"cpu_limit_percent": self.cpu_limit_percent, "cycle_ms": self.cycle_ms,
                "mode": self.mode, "per": self.per}

    # -- used by the work ------------------------------------------------------------

    def start(self) -> Work:
        """Begin a piece of work (a request's burn or pi loop).

        ``cfs``: first wait while the process is throttled. ``boundary``: note the thread's CPU
        clock (the seed's ``begin_work``); its thread never starts throttled, as it slept at
        the end of its previous work.
        """
        if not self.enabled:
            return Work(self, None)
        if self.mode == "boundary":
            self._worker()  # a new thread's first cycle begins with its first work
            return Work(self, self._thread_cpu_clock())
        work = Work(self, None)
        work.paused_ns += self._wait()
        return work

    def checkpoint(self) -> int:
        """``cfs``: charge the process's CPU since the last look; sleep while the quota is spent.

        Returns the ns slept. Cheap enough to call every ~0.1 ms of work; blocks the calling
        thread (call it from a worker thread, not from the event loop). Does nothing in
        ``boundary`` mode or when off.
        """
        if self._account is None or self._wall_clock() < self._safe_until:
            return 0
        return self._wait()

    def sync(self) -> None:
        """``cfs``: charge the process's CPU since the last look, without waiting."""
        if self._account is not None:
            with self._lock:
                self._charge(self._wall_clock())

    def stats(self) -> CpuStat:
        """``nr_periods``, ``nr_throttled``, ``throttled_ns`` (and burst counters) so far; in
        ``boundary`` mode the sum over the worker threads, those that ended included."""
        if not self.enabled:
            return CpuStat()
        with self._lock:
            now = self._wall_clock()
            if self._account is not None:
                self._charge(now)
                return self._account.stats(now)
            alive = []
            for worker in self._workers:
                thread = worker.thread()
                if thread is not None and thread.is_alive():
                    alive.append(worker)
                else:  # its thread ended: keep its counters, forget its budget
                    self._retired = _total((self._retired, worker.account.stats(now)))
            self._workers = alive
            return _total([self._retired, *(w.account.stats(now) for w in alive)])

    # -- inside: cfs ---------------------------------------------------------------------

    def _new_account(self) -> QuotaAccount:
        return QuotaAccount(self.quota_ns, self.period_ns, self.burst_ns,
                            origin_ns=self._wall_clock())

    def _charge(self, now: int) -> None:
        """Charge the process's CPU used since the last reading, less the throttle's own (its
        bookkeeping, sleeps and wake-ups, as the kernel's throttling is not charged to the
        group either); caller holds the lock."""
        account = self._account
        assert account is not None
        cpu = self._cpu_clock()
        if self._cpu_seen is not None:  # the first look only sets the baseline
            used = max(0, cpu - self._cpu_seen - self._own_ns)
            # The CPU since the last look ran all along, not just now: when that spans whole
            # periods (an idle service's timers, requests that did no burn), their refills
            # absorb their share, as the kernel's would; only the excess is owed.
            current = account.next_boundary(now) - account.period_ns  # this period's start
            whole = (current - account.next_boundary(self._seen_at)) // account.period_ns
            if used and whole > 0 and now > self._seen_at:
                early = used * (current - self._seen_at) // (now - self._seen_at)
                account.charge(max(0, early - whole * account.quota_ns), current)
                used -= early
            account.charge(used, now)
        self._cpu_seen, self._seen_at, self._own_ns = cpu, now, 0

    def _wait(self) -> int:
        assert self._account is not None
        paused = 0
        mark = self._thread_cpu_clock()  # this thread's CPU when the throttle's work began
        while True:
            now = self._wall_clock()
            resume = self._resume_at
            if now >= resume:
                with self._lock:
                    self._own_ns += self._thread_cpu_clock() - mark
                    now = self._wall_clock()
                    self._charge(now)
                    resume = self._account.throttled_until(now)
                    if resume <= now:
                        # No need to read the CPU clock before the quota left could be spent
                        # by every CPU at once, nor across a boundary (charges must not
                        # straddle one).
                        left = self._account.remaining(now)
                        self._safe_until = min(now + left // self._cpus,
                                               self._account.next_boundary(now))
                        return paused
                    self._safe_until = 0
                    self._resume_at = resume
                mark = self._thread_cpu_clock()
            # else: another thread found the process throttled until `resume`; looking again
            # before then would only say so (this thread's CPU is charged at the next look)
            self._sleep((resume - now) / 1e9)
            paused += max(0, self._wall_clock() - now)

    # -- inside: boundary ------------------------------------------------------------------

    def _worker(self) -> _Worker:
        """The calling thread's budget, made at its first piece of work."""
        worker: _Worker | None = getattr(self._local, "worker", None)
        if worker is None:
            with self._lock:
                worker = _Worker(self._new_account(), weakref.ref(threading.current_thread()))
                self._workers.append(worker)
            self._local.worker = worker
        return worker

    def _end_work(self, cpu_start: int, extra_ns: int = 0) -> int:
        """The seed's ``end_work``: charge the work's CPU (this thread's since ``cpu_start``,
        plus ``extra_ns`` it spent on others) to this thread's budget; if that spent it, sleep
        until a cycle refills it. Returns the ns slept."""
        account = self._worker().account
        used = max(0, self._thread_cpu_clock() - cpu_start) + extra_ns
        paused = 0
        while True:
            with self._lock:
                now = self._wall_clock()
                if used:
                    account.charge(used, now)
                    used = 0
                resume = account.throttled_until(now)
            if resume <= now:
                return paused
            self._sleep((resume - now) / 1e9)
            paused += max(0, self._wall_clock() - now)


class Work:
    """One piece of throttled work (a request's burn or pi loop) and the time it was paused.

    ``checkpoint()`` is what the work loop calls every ~0.1-0.5 ms of CPU: in ``cfs`` mode it
    charges and pauses like :meth:`Throttle.checkpoint`; in ``boundary`` mode, or with the
    throttle off, it does nothing. ``finish()`` ends the work: ``cfs`` charges the process's
    CPU so far, ``boundary`` charges the work's CPU to the thread and may sleep (the seed's
    ``end_work``). ``paused_ns`` adds every wait: before the start, in checkpoints and at the
    end (``Server-Timing: throttle;dur=``). Use as a context manager or call ``finish()``.
    """

    __slots__ = ("_cpu_start", "_extra_ns", "_throttle", "checkpoint", "paused_ns")

    def __init__(self, throttle: Throttle, cpu_start: int | None) -> None:
        self._throttle = throttle
        self._cpu_start = cpu_start
        self._extra_ns = 0
        self.paused_ns = 0
        self.checkpoint: Callable[[], None] = self._pause if throttle.pauses_work else _nothing

    def _pause(self) -> None:
        self.paused_ns += self._throttle.checkpoint()

    def add_cpu(self, cpu_ns: int) -> None:
        """CPU this work spent on other threads (a burn on several at once): ``boundary``
        charges it with the work's own; ``cfs`` already sees it in the process's CPU."""
        self._extra_ns += max(0, cpu_ns)

    def finish(self) -> None:
        if self._cpu_start is not None:
            start, self._cpu_start = self._cpu_start, None
            self.paused_ns += self._throttle._end_work(start, self._extra_ns)
        else:
            self._throttle.sync()

    def __enter__(self) -> Work:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def _total(stats: Iterable[CpuStat]) -> CpuStat:
    """The sum of several threads' counters."""
    out = CpuStat()
    for s in stats:
        out = CpuStat(out.nr_periods + s.nr_periods, out.nr_throttled + s.nr_throttled,
                      out.throttled_ns + s.throttled_ns, out.nr_bursts + s.nr_bursts,
                      out.burst_ns + s.burst_ns)
    return out


def _nothing() -> None:
    return None
