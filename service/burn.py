"""The CPU burn: a pure-Python busy loop, checked every few hundred passes, calibrated so that
one iteration costs the same CPU on any machine.

Each pass of the loop builds a small nested tree and sets and clears its leaf, like the
original ESQL flow's ``SET OutputLocalEnvironment.a.b.c.d.e = 'dummy'`` / ``= NULL``. A pass
costs what the CPU makes of it: ~1 us on the machines the recorded runs came from, ~0.3 us on
a 2.6 GHz Xeon of 2024. So ``iterations`` are not passes: when the service starts it measures
a pass (:func:`measure`: best of a few short rounds of CPU time, ~10-20 ms in all) and a
:class:`Calibration` turns each iteration into as many passes (a fraction of one included) as
cost ``--iteration-us`` of CPU, 1 us unless said: the default 5000 iterations burn ~5 ms of
CPU, as the original flow's did, on any CPU. ``--no-calibrate`` keeps one pass per iteration.

A pure-Python loop holds the GIL, so it can never use more than one CPU: for a request that
burns on T threads at once (``?threads=T``, as a multi-threaded runtime does),
:func:`burn_parallel` runs :func:`hash_burn`, SHA-256 in C with the GIL released, as many
bytes per iteration as cost the same CPU.

The measurement counts CPU time (``time.thread_time_ns``), never wall time: a kernel quota or
the in-process throttle in force at start pauses the thread but does not change what it
counts, and another busy process only makes some rounds slower (the best one is kept).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

__all__ = ["CHECK_EVERY", "DEFAULT_ITERATIONS", "DEFAULT_ITERATION_US", "BurnResult",
           "Calibration", "Costs", "burn", "burn_parallel", "calibration_for", "hash_burn",
           "measure", "measured", "resolve_max_threads"]

DEFAULT_ITERATIONS = 5000  # ~5 ms of CPU: /cpuBurnFlow's default, the original flow's burn
DEFAULT_ITERATION_US = 1.0  # CPU per iteration (calibrated): the original's ~1 us

# Passes of the loop between two calls of ``checkpoint``: ~0.1-0.3 ms of work, so a throttle
# that pauses the loop stops it close to where the kernel would, without a syscall per pass.
CHECK_EVERY = 256


@dataclass(frozen=True)
class BurnResult:
    iterations: int
    cpu_ns: int   # CPU time spent in the loop (over all its threads)
    wall_ns: int  # wall time the loop took, pauses included
    threads: int = 1


# -- what the work costs on this machine ------------------------------------------------------

@dataclass(frozen=True)
class Costs:
    """The CPU the raw work costs here, as measured by :func:`measure`."""

    loop_ns: float   # one pass of the Python loop
    byte_ns: float   # one byte of SHA-256
    cpu_ns: int      # CPU time the measurement itself took
    wall_ns: int     # wall time it took (longer under a quota or on a busy machine)


def _best_cpu_ns(work: Callable[[], object], rounds: int, deadline: float) -> int:
    """The least CPU time (this thread's) of up to ``rounds`` runs of ``work``; stops early,
    after two runs, past ``deadline`` (``perf_counter``): bounded even at 0.01 CPU."""
    best = 0
    for done in range(rounds):
        start = time.thread_time_ns()
        work()
        spent = time.thread_time_ns() - start
        best = spent if not best or spent < best else best
        if done >= 1 and time.perf_counter() > deadline:
            break
    return max(1, best)


def measure(rounds: int = 7, passes: int = 4000, hash_bytes: int = 256 * 1024,
            max_seconds: float = 2.0) -> Costs:
    """Measure a pass of the loop and a byte of SHA-256 in CPU time: the best of ``rounds``
    (after one to warm up), so a busy neighbour or a throttled moment only lose rounds.
    ~10-20 ms of CPU on a current x86 core; at most ``max_seconds`` of wall time per part
    (past it, the best of the rounds so far, at least two)."""
    wall0 = time.perf_counter_ns()   # the wall time encloses the CPU time
    cpu0 = time.thread_time_ns()
    burn(passes // 8)  # the first passes of a fresh process are slower
    loop_ns = _best_cpu_ns(functools.partial(burn, passes), rounds,
                           time.perf_counter() + max_seconds) / passes
    data = bytes(hash_bytes)
    byte_ns = _best_cpu_ns(lambda: hashlib.sha256(data).digest(), rounds,
                           time.perf_counter() + max_seconds) / hash_bytes
    cpu_ns = time.thread_time_ns() - cpu0
    return Costs(loop_ns, byte_ns, cpu_ns, time.perf_counter_ns() - wall0)


@functools.cache
def measured() -> Costs:
    """:func:`measure`, once per process (the service's apps and the tests share it)."""
    return measure()


@dataclass(frozen=True)
class Calibration:
    """How much work one iteration is: ``iteration_us`` of CPU (None: one raw pass, whatever
    it costs here), from the measured ``costs``."""

    costs: Costs
    iteration_us: float | None = DEFAULT_ITERATION_US

    @property
    def calibrated(self) -> bool:
        return self.iteration_us is not None

    @property
    def iteration_ns(self) -> float:
        """The CPU one iteration costs: the asked-for cost, or a raw pass's."""
        return self.iteration_us * 1000 if self.iteration_us is not None else self.costs.loop_ns

    @property
    def loops_per_iteration(self) -> float:
        """Passes of the Python loop per iteration (1 uncalibrated; a fraction is fine: a burn
        makes ``round(iterations * loops_per_iteration)`` passes)."""
        return self.iteration_ns / self.costs.loop_ns if self.calibrated else 1.0

    @property
    def bytes_per_iteration(self) -> float:
        """Bytes of SHA-256 per iteration of :func:`hash_burn`: the same CPU."""
        return self.iteration_ns / self.costs.byte_ns

    @property
    def bytes_per_loop(self) -> float:
        """Bytes of SHA-256 that cost what a pass of the loop costs."""
        return self.costs.loop_ns / self.costs.byte_ns

    def loops(self, iterations: int) -> int:
        return round(iterations * self.loops_per_iteration)

    def describe(self) -> dict[str, Any]:
        """For ``/limits``: the cost of an iteration and how it was made."""
        return {"calibrated": self.calibrated,
                "iteration_us": round(self.iteration_ns / 1000, 4),
                "loop_us": round(self.costs.loop_ns / 1000, 4),
                "loops_per_iteration": round(self.loops_per_iteration, 4),
                "hash_bytes_per_iteration": round(self.bytes_per_iteration, 1),
                "measured_cpu_ms": round(self.costs.cpu_ns / 1e6, 2),
                "measured_wall_ms": round(self.costs.wall_ns / 1e6, 2)}

    def startup_line(self) -> str:
        """One line for the log at start (no "iterations" in it: the access log's tests look
        for a query's words)."""
        c = self.costs
        how = (f"{self.loops_per_iteration:.3g} passes of the loop at {c.loop_ns / 1000:.3g} us"
               if self.calibrated else
               "one pass of the loop, uncalibrated (--no-calibrate)")
        return (f"burn: one iteration = {self.iteration_ns / 1000:.3g} us of CPU ({how}; "
                f"measured in {c.cpu_ns / 1e6:.0f} ms of CPU, {c.wall_ns / 1e6:.0f} ms wall); "
                f"the default burn of {DEFAULT_ITERATIONS} ~ "
                f"{DEFAULT_ITERATIONS * self.iteration_ns / 1e6:.3g} ms of CPU")


def calibration_for(settings: Any) -> Calibration:
    """The calibration ``settings`` ask for (``iteration_us``, ``calibrate``), from this
    process's measurement."""
    return Calibration(measured(), settings.iteration_us if settings.calibrate else None)


# -- the burns ---------------------------------------------------------------------------------

def burn(iterations: int, checkpoint: Callable[[], object] | None = None,
         check_every: int = CHECK_EVERY, calibration: Calibration | None = None) -> BurnResult:
    """Burn ``iterations`` iterations of CPU (one raw pass each without a ``calibration``);
    call ``checkpoint`` every ``check_every`` passes and after the last."""
    if iterations < 0:
        raise ValueError("iterations must be >= 0")
    wall0 = time.perf_counter_ns()   # the wall time encloses the CPU time
    cpu0 = time.thread_time_ns()
    left = calibration.loops(iterations) if calibration is not None else iterations
    while left > 0:
        n = check_every if left > check_every else left
        for _ in range(n):
            tree: dict[str, Any] = {"a": {"b": {"c": {"d": {"e": "dummy"}}}}}
            tree["a"]["b"]["c"]["d"]["e"] = None
            tree["a"]["b"]["c"]["d"]["e"] = "dummy"
            tree["a"]["b"]["c"]["d"]["e"] = None
        left -= n
        if checkpoint is not None:
            checkpoint()
    return BurnResult(iterations, time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0)


# -- on several threads at once ---------------------------------------------------------------

# A C-level burn that releases the GIL: SHA-256 over a buffer (hashlib lets other threads run
# while it hashes 2 KiB or more), so T threads really burn on T CPUs at once, as the threads of
# a JVM or a Go service do.
GIL_FREE_BYTES = 4096  # the smallest chunk hashed between checkpoints


@functools.lru_cache(maxsize=4)
def _zeros(size: int) -> bytes:
    return bytes(size)


def hash_burn(iterations: int, checkpoint: Callable[[], object] | None = None,
              check_every: int = CHECK_EVERY, calibration: Calibration | None = None
              ) -> BurnResult:
    """Burn ``iterations`` iterations' worth of CPU in C, with the GIL released: the bytes
    that cost what :func:`burn` with the same ``calibration`` costs (None: a raw pass each);
    call ``checkpoint`` every ``check_every`` passes' worth and after the last."""
    if iterations < 0:
        raise ValueError("iterations must be >= 0")
    cal = calibration if calibration is not None else Calibration(measured(), None)
    left = round(iterations * cal.bytes_per_iteration)
    chunk = min(left, max(GIL_FREE_BYTES, round(check_every * cal.bytes_per_loop)))
    block = memoryview(_zeros(chunk))
    wall0 = time.perf_counter_ns()   # the wall time encloses the CPU time
    cpu0 = time.thread_time_ns()
    while left > 0:
        n = chunk if left > chunk else left
        hashlib.sha256(block[:n]).digest()
        left -= n
        if checkpoint is not None:
            checkpoint()
    return BurnResult(iterations, time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0)


def burn_parallel(iterations: int, threads: int,
                  submit: Callable[[Callable[[], BurnResult]], Future[BurnResult]],
                  checkpoint: Callable[[], object] | None = None,
                  helper_checkpoint: Callable[[], object] | None = None,
                  calibration: Calibration | None = None) -> BurnResult:
    """``iterations`` on each of ``threads`` threads at once: this one (calling
    ``checkpoint``) and ``threads - 1`` handed to ``submit`` (a thread pool's; they call
    ``helper_checkpoint``). ``cpu_ns`` is the sum over the threads, ``wall_ns`` from the start
    until the last one is done."""
    if threads < 1:
        raise ValueError("threads must be >= 1")
    if calibration is None:
        calibration = Calibration(measured(), None)  # measured before: not part of the burn
    wall0 = time.perf_counter_ns()
    others = [submit(functools.partial(hash_burn, iterations, helper_checkpoint,
                                       calibration=calibration))
              for _ in range(threads - 1)]
    results = [hash_burn(iterations, checkpoint, calibration=calibration),
               *(f.result() for f in others)]
    return BurnResult(iterations, sum(r.cpu_ns for r in results),
                      time.perf_counter_ns() - wall0, threads)


def resolve_max_threads(settings: Any) -> int:
    """The largest ``?threads=``: ``--max-threads`` if set, else 2 x the CPUs this process may
    use (so a request can ask for more threads than CPUs, as runtimes do)."""
    from cpuquota.cgroupfs import available_cpus

    return settings.max_threads or 2 * available_cpus()
