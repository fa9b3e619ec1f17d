"""What a calibrated iteration costs: the burn's CPU against what the calibration promised.

    .venv/bin/python -m benchmarks.burn_calibration [--iteration-us 0.3 1 3] [--iterations 2000]

In this process, no service around it (``service.burn``): for each ``--iteration-us`` a
calibration is measured, ``--iterations`` are burned in the Python loop (``burn``) and in
SHA-256 (``hash_burn``, the parallel burn's), best of three on this thread's CPU clock, and
the calibration is measured again. Printed: the CPU per iteration against the promise, and how
far what a pass of the loop costs moved between the two measurements (on a shared VM it moves
by the minute). Then the measurement itself: its CPU, and what a pass costs measured while
another thread holds the GIL in slices (paused, as under a quota) against just before and after.

The tests check only what this process's own clocks say about each burn (``tests/test_burn.py``);
these ratios move with the machine.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence

from benchmarks.support import describe_load, keep_record, run_main
from service.burn import Calibration, Costs, burn, hash_burn, measure


def best_cpu_ns(work: Callable[[], object], tries: int = 3) -> int:
    spent = []
    for _ in range(tries):
        start = time.thread_time_ns()
        work()
        spent.append(time.thread_time_ns() - start)
    return min(spent)


def paused_measure() -> Costs:
    """:func:`measure` while another thread takes the GIL in slices."""
    stop = threading.Event()

    def hog() -> None:
        while not stop.is_set():
            sum(range(200_000))
            time.sleep(0)

    other = threading.Thread(target=hog, daemon=True)
    other.start()
    try:
        return measure()
    finally:
        stop.set()
        other.join()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iteration-us", type=float, nargs="+", default=[0.3, 1.0, 3.0])
    parser.add_argument("--iterations", type=int, default=2000)
    opts = parser.parse_args(argv)
    if opts.iterations < 1 or min(opts.iteration_us) <= 0:
        parser.error("--iterations and --iteration-us must be positive")
    print(f"{describe_load('before')}\n")
    print("| µs an iteration | loop: CPU / promised | SHA-256: CPU / promised "
          "| a pass before → after ns |")
    print("|---:|---:|---:|---:|")
    rows = []
    for iteration_us in opts.iteration_us:
        before = measure()
        cal = Calibration(before, iteration_us)
        want_ns = opts.iterations * iteration_us * 1000
        loop = best_cpu_ns(lambda: burn(opts.iterations, calibration=cal)) / want_ns
        sha = best_cpu_ns(lambda: hash_burn(opts.iterations, calibration=cal)) / want_ns
        after = measure()
        rows.append({"iteration_us": iteration_us, "loop_ratio": loop, "hash_ratio": sha,
                     "loop_ns_before": before.loop_ns, "loop_ns_after": after.loop_ns})
        print(f"| {iteration_us:g} | {loop:.2f} | {sha:.2f} | {before.loop_ns:.0f} → "
              f"{after.loop_ns:.0f} |", flush=True)
    costs = measure()
    quick = measure(rounds=1000, max_seconds=0.0)   # bounded: two rounds past the deadline
    paused = paused_measure()
    after = measure()
    print(f"\nthe measurement: {costs.cpu_ns / 1e6:.1f} ms of CPU, {costs.wall_ns / 1e6:.1f} ms "
          f"wall ({quick.cpu_ns / 1e6:.1f} ms of CPU bounded to two rounds); a pass "
          f"{costs.loop_ns:.0f} ns before, {paused.loop_ns:.0f} ns paused by "
          f"another thread ({paused.wall_ns / 1e6:.1f} ms wall for {paused.cpu_ns / 1e6:.1f} ms "
          f"of CPU), {after.loop_ns:.0f} ns after")
    print(f"\n{describe_load('after')}")
    keep_record("burn_calibration", {"iterations": opts.iterations, "rows": rows,
                                     "measure_cpu_ms": costs.cpu_ns / 1e6,
                                     "bounded_measure_cpu_ms": quick.cpu_ns / 1e6,
                                     "pass_ns": [costs.loop_ns, paused.loop_ns, after.loop_ns]})
    return 0


if __name__ == "__main__":
    run_main(main)
