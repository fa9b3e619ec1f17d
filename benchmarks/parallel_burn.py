"""The parallel burn's speed-up: CPU time over wall time of ``?threads=T`` (``service.burn``).

    .venv/bin/python -m benchmarks.parallel_burn [--iterations 20000] [--threads 1 2 4]
                                                 [--rounds 5]

For each T, ``rounds`` burns of ``--iterations`` calibrated iterations (1 us of CPU each) on
each of T threads at once (this one and T-1 of a pool, as ``/cpuBurnFlow?threads=T`` does),
in this process, no service around it. Prints the CPU per thread, the wall time and CPU / wall
(the CPUs used at once: up to min(T, idle CPUs)), best and median over the rounds. Then the
GIL: the CPU a Python thread gets beside one long hash (the C burn releases the GIL: about 1
of the hash's own, on two idle CPUs) and beside a C call that keeps the GIL (about 0), each
thread on its own CPU clock.

This needs idle CPUs to say anything: another busy process on one of two CPUs holds the
parallel burn near 1.0. The tests prove the behaviour that does not (``tests/test_burn.py``:
each thread's own CPU clock, the GIL released); this measures the speed-up.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from benchmarks.support import describe_load, keep_record, run_main
from service.burn import Calibration, burn, burn_parallel, hash_burn, measured


def cpu_of_a_python_thread_beside(work: Callable[[], object]) -> float:
    """The CPU another thread spinning in the Python loop got while ``work`` ran on this one,
    over this thread's CPU for ``work`` (each thread's own CPU clock)."""
    stop, started = threading.Event(), threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            burn(64)

    other = threading.Thread(target=spin, daemon=True)
    other.start()
    try:
        started.wait()
        clock = time.pthread_getcpuclockid(other.ident or 0)
        theirs, ours = time.clock_gettime_ns(clock), time.thread_time_ns()
        work()
        ours, theirs = time.thread_time_ns() - ours, time.clock_gettime_ns(clock) - theirs
    finally:
        stop.set()
        other.join()
    return theirs / ours


def gil_shares(cal: Calibration, rounds: int) -> dict[str, list[float]]:
    """A Python thread's CPU beside a 40 ms hash (GIL released) and beside ~80 ms of ``sum``
    (GIL held), over the call's own CPU, ``rounds`` times each."""
    hashing = [cpu_of_a_python_thread_beside(
        lambda: hash_burn(40_000, check_every=10**9, calibration=cal)) for _ in range(rounds)]
    start = time.thread_time_ns()
    sum(range(100_000))
    n = round(80e6 / max(1, time.thread_time_ns() - start) * 100_000)
    held = [cpu_of_a_python_thread_beside(lambda: sum(range(n))) for _ in range(rounds)]
    return {"beside_the_hash": hashing, "beside_a_gil_holding_call": held}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args(argv)
    if opts.iterations < 1 or opts.rounds < 1 or min(opts.threads) < 1:
        parser.error("--iterations, --threads and --rounds must be positive")
    cal = Calibration(measured())
    print(f"{cal.startup_line()}\n{describe_load('before')}\n")
    print("| threads | CPU per thread ms | wall ms (median) | CPU / wall best | median |")
    print("|---:|---:|---:|---:|---:|")
    figures: dict[str, dict[str, float]] = {}
    with ThreadPoolExecutor(max_workers=max(opts.threads)) as pool:
        for threads in opts.threads:
            runs = [burn_parallel(opts.iterations, threads, pool.submit, calibration=cal)
                    for _ in range(opts.rounds)]
            ratios = [r.cpu_ns / r.wall_ns for r in runs]
            figures[str(threads)] = {"cpu_over_wall_best": max(ratios),
                                     "cpu_over_wall_median": statistics.median(ratios),
                                     "wall_ms_median": statistics.median(r.wall_ns for r in runs)
                                     / 1e6}
            print(f"| {threads} | {statistics.median(r.cpu_ns for r in runs) / threads / 1e6:.1f}"
                  f" | {statistics.median(r.wall_ns for r in runs) / 1e6:.1f} | "
                  f"{max(ratios):.2f} | {statistics.median(ratios):.2f} |", flush=True)
    gil = gil_shares(cal, opts.rounds) if hasattr(time, "pthread_getcpuclockid") else {}
    for what, shares in gil.items():
        print(f"\na Python thread's CPU {what.replace('_', ' ')}, over the call's: "
              + " ".join(f"{share:.2f}" for share in shares))
    print(f"\n{describe_load('after')}")
    keep_record("parallel_burn", {"iterations": opts.iterations, "rounds": opts.rounds,
                                  "threads": figures, "gil": gil})
    return 0


if __name__ == "__main__":
    run_main(main)
