"""The CPU burn: a pure-Python busy loop, checked every few hundred iterations.

Each iteration builds a small nested tree and sets and clears its leaf, like the original ESQL
flow's ``SET OutputLocalEnvironment.a.b.c.d.e = 'dummy'`` / ``= NULL``: about 1 microsecond of
CPU on a current x86 core, so the default 5000 iterations burn about 5 ms, as the original
flow's did. A pure-Python loop holds the GIL, so it can never use more than one CPU: for a
request that burns on T threads at once (``?threads=T``, as a multi-threaded runtime does),
:func:`burn_parallel` runs :func:`hash_burn`, the same cost per iteration spent in C
(SHA-256) with the GIL released.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

__all__ = ["CHECK_EVERY", "DEFAULT_ITERATIONS", "BurnResult", "burn", "burn_parallel",
           "bytes_per_iteration", "hash_burn", "resolve_max_threads"]

DEFAULT_ITERATIONS = 5000  # ~5 ms of CPU: /cpuBurnFlow's default, the original flow's burn

# Iterations between two calls of ``checkpoint``: ~0.1-0.3 ms of work, so a throttle that
# pauses the loop stops it close to where the kernel would, without a syscall per iteration.
CHECK_EVERY = 256


@dataclass(frozen=True)
class BurnResult:
    iterations: int
    cpu_ns: int   # CPU time spent in the loop (over all its threads)
    wall_ns: int  # wall time the loop took, pauses included
    threads: int = 1


def burn(iterations: int, checkpoint: Callable[[], object] | None = None,
         check_every: int = CHECK_EVERY) -> BurnResult:
    """Burn ``iterations`` loop iterations of CPU; call ``checkpoint`` between chunks."""
    if iterations < 0:
        raise ValueError("iterations must be >= 0")
    cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
    left = iterations
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
# a JVM or a Go service do. One iteration hashes as many bytes as cost one iteration of
# ``burn`` here (measured once, see ``bytes_per_iteration``).
HASH_MIN_BYTES = 64


@functools.cache
def bytes_per_iteration() -> int:
    """How many bytes of SHA-256 cost as much CPU as one iteration of :func:`burn` on this
    machine (measured once, ~15 ms of CPU; the fastest of five tries of each, the first ones
    of a fresh process being slower)."""
    def best(measure: Callable[[], object]) -> int:
        times = []
        for _ in range(5):
            start = time.thread_time_ns()
            measure()
            times.append(time.thread_time_ns() - start)
        return max(1, min(times))

    loop_ns = best(lambda: burn(4096)) / 4096
    data = bytes(256 * 1024)
    byte_ns = best(lambda: hashlib.sha256(data).digest()) / len(data)
    return max(HASH_MIN_BYTES, round(loop_ns / byte_ns))


@functools.cache
def _zeros(size: int) -> bytes:
    return bytes(size)


def hash_burn(iterations: int, checkpoint: Callable[[], object] | None = None,
              check_every: int = CHECK_EVERY) -> BurnResult:
    """Burn ``iterations`` iterations' worth of CPU in C, with the GIL released; call
    ``checkpoint`` between chunks (as :func:`burn` does)."""
    if iterations < 0:
        raise ValueError("iterations must be >= 0")
    size = bytes_per_iteration()
    block = memoryview(_zeros(size * check_every))
    cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
    left = iterations
    while left > 0:
        n = check_every if left > check_every else left
        hashlib.sha256(block[:n * size]).digest()
        left -= n
        if checkpoint is not None:
            checkpoint()
    return BurnResult(iterations, time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0)


def burn_parallel(iterations: int, threads: int,
                  submit: Callable[[Callable[[], BurnResult]], Future[BurnResult]],
                  checkpoint: Callable[[], object] | None = None,
                  helper_checkpoint: Callable[[], object] | None = None) -> BurnResult:
    """``iterations`` on each of ``threads`` threads at once: this one (calling
    ``checkpoint``) and ``threads - 1`` handed to ``submit`` (a thread pool's; they call
    ``helper_checkpoint``). ``cpu_ns`` is the sum over the threads, ``wall_ns`` from the start
    until the last one is done."""
    if threads < 1:
        raise ValueError("threads must be >= 1")
    bytes_per_iteration()  # measured at the first use: not part of this burn's numbers
    wall0 = time.perf_counter_ns()
    others = [submit(functools.partial(hash_burn, iterations, helper_checkpoint))
              for _ in range(threads - 1)]
    results = [hash_burn(iterations, checkpoint), *(f.result() for f in others)]
    return BurnResult(iterations, sum(r.cpu_ns for r in results),
                      time.perf_counter_ns() - wall0, threads)


def resolve_max_threads(settings: Any) -> int:
    """The largest ``?threads=``: ``--max-threads`` if set, else 2 x the CPUs this process may
    use (so a request can ask for more threads than CPUs, as runtimes do)."""
    from cpuquota.cgroupfs import available_cpus

    return settings.max_threads or 2 * available_cpus()
