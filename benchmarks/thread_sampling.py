"""What reading a group's threads costs the tool (issue 45): its own CPU per reading and per
second, for a process of many threads, at two intervals.

    .venv/bin/python -m benchmarks.thread_sampling [--threads 200] [--seconds 5]
                                                   [--intervals 0.01 0.1]

A Python process of ``--threads`` threads (each mostly asleep, waking every 50 ms: a
thread pool's shape) runs in a new group with a 1 CPU quota. ``client.run.thread_usage``
reads its threads every interval for ``--seconds`` on this thread, and this thread's own CPU
clock (``time.thread_time_ns``) counts what the readings cost. ``--cgroup`` runs and
``record`` read threads every 0.1 s; ``watch`` once an interval.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence

from benchmarks.support import describe_load, keep_record, run_main, serve_in_group
from client.run.thread_usage import ThreadUsage

# the process of many threads: starts them, says ``port 0`` (serve_in's handshake), waits
MANY_THREADS = """
import sys, threading, time
def pool_thread():
    while True:
        time.sleep(0.05)
        sum(range(200))
for i in range(int(sys.argv[1]) - 1):
    threading.Thread(target=pool_thread, name=f"pool-{i}", daemon=True).start()
print("port 0", flush=True)
time.sleep(3600)
"""


def readings(usage: ThreadUsage, interval: float, seconds: float) -> tuple[int, list[int]]:
    """Read every ``interval`` for ``seconds``: the readings' count and each one's CPU (ns)."""
    costs: list[int] = []
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < end:
        before = time.thread_time_ns()
        usage.read()
        costs.append(time.thread_time_ns() - before)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    return len(costs), costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.01, 0.1])
    opts = parser.parse_args(argv)
    if opts.threads < 1 or opts.seconds <= 0 or min(opts.intervals) <= 0:
        parser.error("--threads, --seconds and --intervals must be positive")
    print(f"{describe_load('before')}\n")
    print(f"a Python process of {opts.threads} threads in a group of its own, its threads read "
          f"for {opts.seconds:g} s at each interval\n")
    print("| interval | readings | threads | CPU a reading (median) | CPU a reading (p90) "
          "| the tool's CPU, % of one CPU |")
    print("|---|---|---|---|---|---|")
    figures: dict[str, dict[str, float]] = {}
    with serve_in_group([sys.executable, "-c", MANY_THREADS, str(opts.threads)], 1.0) as many:
        for interval in opts.intervals:
            usage = ThreadUsage([many.group])
            try:
                count, costs = readings(usage, interval, opts.seconds)
            finally:
                usage.close()
            seen = len(os.listdir(f"/proc/{many.pid}/task"))
            median, p90 = statistics.median(costs), statistics.quantiles(costs, n=10)[-1]
            share = sum(costs) / (opts.seconds * 1e9)
            figures[f"{interval:g}"] = {"readings": count, "threads_seen": seen,
                                        "cpu_ms_median": median / 1e6, "cpu_ms_p90": p90 / 1e6,
                                        "cpu_share": share}
            print(f"| {interval * 1000:g} ms | {count} | {seen} | {median / 1e6:.2f} ms | "
                  f"{p90 / 1e6:.2f} ms | {100 * share:.2f} % |", flush=True)
    print(f"\n{describe_load('after')}")
    keep_record("thread_sampling", {"threads": opts.threads, "seconds": opts.seconds,
                                    "intervals": figures})
    return 0


if __name__ == "__main__":
    run_main(main)
