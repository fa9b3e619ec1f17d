"""The CPU burn: a pure-Python busy loop, checked every few hundred iterations.

Each iteration builds a small nested tree and sets and clears its leaf, like the original ESQL
flow's ``SET OutputLocalEnvironment.a.b.c.d.e = 'dummy'`` / ``= NULL``: about 1 microsecond of
CPU on a current x86 core, so the default 5000 iterations burn about 5 ms, as the original
flow's did.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CHECK_EVERY", "DEFAULT_ITERATIONS", "BurnResult", "burn"]

DEFAULT_ITERATIONS = 5000  # ~5 ms of CPU: /cpuBurnFlow's default, the original flow's burn

# Iterations between two calls of ``checkpoint``: ~0.1-0.3 ms of work, so a throttle that
# pauses the loop stops it close to where the kernel would, without a syscall per iteration.
CHECK_EVERY = 256


@dataclass(frozen=True)
class BurnResult:
    iterations: int
    cpu_ns: int   # CPU time this thread spent in the loop
    wall_ns: int  # wall time the loop took, pauses included


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
            tree = {"a": {"b": {"c": {"d": {"e": "dummy"}}}}}
            tree["a"]["b"]["c"]["d"]["e"] = None
            tree["a"]["b"]["c"]["d"]["e"] = "dummy"
            tree["a"]["b"]["c"]["d"]["e"] = None
        left -= n
        if checkpoint is not None:
            checkpoint()
    return BurnResult(iterations, time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0)
