"""A fleet of throttled replicas on one machine: the seed's scale test (120 workers at 5 % on
an 8-core machine), here with real replicas of the service, each under its own limit.

    sudo .venv/bin/python -m benchmarks.fleet [--backend kernel] [--sizes 20 50 100]
                                              [--share 0.01] [--rate 20] [--duration 5]

For each size N: ``http-timing sweep --replicas N --cpus N x share`` (kernel: one cgroup each,
made and removed by each replica's supervisor; in-process: ``--cpu-limit``), an open loop of
``--rate`` requests per second for ``--duration`` s spread round-robin over the replicas (after
two warm-up requests to each, not recorded: a first request costs tens of ms of CPU), then
every replica stopped by its pid. Prints per size: the time to start them all, memory per
replica, how many replicas answered, requests/s, p50/p99, and the throttled share. A size
that cannot start (memory, time) is reported as such and ends the list.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.support import HTTP_TIMING, run_main
from client.analysis.replicas import replica_row
from client.analysis.report import build_report
from client.data.files import read_run


def memory_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_size(size: int, opts: argparse.Namespace, scratch: Path) -> str:
    total = size * opts.share
    began = time.monotonic()
    done = subprocess.run(
        [str(HTTP_TIMING), "sweep", "--backend", opts.backend, "--replicas", str(size),
         "--cpus", f"{total:g}", "--rate", f"{opts.rate:g}", "--duration", f"{opts.duration:g}",
         "--iterations", str(opts.iterations), "--warmup", "2", "--name", "fleet", "--data-dir",
         str(scratch / "raw-data"), "--pictures-dir", str(scratch / "pictures")],
        capture_output=True, text=True, timeout=opts.timeout)
    wall = time.monotonic() - began
    if done.returncode not in (0, 1):  # 1: it ran, some requests failed (counted below)
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines()
                or [f"exit code {done.returncode}"])[-1]
        return f"| {size} | {opts.share:g} | did not run: {last[:120]} |||||||||"
    run = read_run(scratch / "raw-data" / f"fleet-{opts.backend}-replicas-{size}.csv")
    row = replica_row(run, build_report(run))
    meta = run.metadata.replicas
    total_rss = sum(meta.rss_mib) if meta else float("nan")
    return (f"| {size} | {opts.share:g} | {row.start_s or float('nan'):.1f} | "
            f"{row.rss_mib or float('nan'):.0f} MiB | {total_rss / 1024:.2f} GiB | "
            f"{row.answered_by} | {row.throughput_rps or 0:.1f} | {row.p50_ms:.1f} | "
            f"{row.p99_ms:.1f} | {100 * (row.throttled_fraction or 0):.0f} % | "
            f"{sum(1 for r in run.records if not r.ok)} | {wall:.0f} s |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="kernel", choices=("kernel", "inprocess"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 100])
    parser.add_argument("--share", type=float, default=0.01, help="CPU of each replica")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per size")
    opts = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for size in opts.sizes:
            before = memory_available_mib()
            print(f"fleet: {size} replicas of {opts.share:g} CPU ({opts.backend}); "
                  f"{before / 1024:.1f} GiB available", file=sys.stderr, flush=True)
            try:
                rows.append(one_size(size, opts, Path(scratch)))
            except subprocess.TimeoutExpired:
                rows.append(f"| {size} | {opts.share:g} | did not start within "
                            f"{opts.timeout:g} s |||||||||")
            if "did not" in rows[-1]:
                break
    print(f"\nFleet, {opts.backend} backend, open loop {opts.rate:g} requests/s for "
          f"{opts.duration:g} s, {opts.iterations} iterations "
          f"(burn-service's calibrated iterations: CPU per request in its Server-Timing); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    print("| replicas | CPU each | start s | memory each | memory in all | answered by "
          "| requests/s | p50 ms | p99 ms | throttled | failed | wall |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    run_main(main)
