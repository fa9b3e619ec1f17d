"""Threads drain the quota: the same CPU on two threads is throttled, on one it is not.

    sudo .venv/bin/python -m benchmarks.parallel_drain [--cpus 1] [--thread-ms 120]
                                                        [--average 0.1] [--requests 20]

``burn-service --cpus 1`` (a real kernel quota: 100 ms of CPU per 100 ms period) gets an open
loop whose average is far below the limit (``--average`` CPU, 0.1 by default). Every request
burns the same CPU, 2 x ``--thread-ms``: once on two threads at once (``?threads=2``: each
thread ``--thread-ms``), once on one thread (``?threads=1``, twice the iterations). Two threads
spend a 100 ms quota in 50 ms, so a request of more than 50 ms per thread always runs into the
end of its period and waits; one thread can never use more than the period itself, so the same
work on one thread is never throttled, though it takes twice as long.

Writes ``raw-data/drain-threads-{1,2}.csv`` (+ ``.json``), their pictures, and the comparison
``pictures/parallel-drain.png`` with its table; prints the throttled share, the latency and the
service's average CPU use of each. Needs Linux, root and a cgroup cpu controller (as
``burn-service --cpus``); the service is stopped by its pid at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.support import HTTP_TIMING, ROOT, burn_service, calibrate, run_main
from client.analysis.report import build_report
from client.data.files import read_run
from client.run.targets.kernel import kernel_quota_problem
from cpuquota.limit import Limit


def calibrated(base: str, threads: int, cpu_ms: float) -> int:
    """Iterations (on each thread) whose burn on ``threads`` threads takes ``cpu_ms`` of CPU in
    all here: measured for each, so that both runs burn the same CPU per request (a probe of
    100 ms of CPU per thread, calibrated: long enough to average out a cold cache; median of
    5)."""
    return calibrate(base, cpu_ms, probe=100_000, requests=5, threads=threads)


def record(base: str, threads: int, iterations: int, rate: float, requests: int) -> Path:
    name = f"drain-threads-{threads}"
    url = f"{base}/cpuBurnFlow?threads={threads}"
    done = subprocess.run([str(HTTP_TIMING), "--url", url, "--iterations", str(iterations),
                           "--rate", f"{rate:g}", "--requests", str(requests), "--warmup", "1",
                           "--name", name, "--quiet"], cwd=ROOT, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"parallel_drain: http-timing ended with {done.returncode}")
    return ROOT / "raw-data" / f"{name}.csv"


def describe(csv: Path) -> str:
    run = read_run(csv)
    report = build_report(run)
    s, d = report.summary, report.detection
    cpu_ms = sum(r.server_cpu_ns or 0 for r in run.records) / 1e6
    wall = statistics.median((r.server_wall_ns or 0) / 1e6 for r in run.records)
    average = cpu_ms / s.total_ms if s.total_ms else float("nan")
    return (f"| {run.name} | {len(run.records)} | {cpu_ms / len(run.records):.0f} ms | "
            f"{wall:.0f} ms | {average:.3f} CPU | {s.p50_ms:.0f} | {s.p99_ms:.0f} | "
            f"{100 * (d.throttled_fraction or 0):.0f} % |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", type=float, default=1.0)
    parser.add_argument("--thread-ms", type=float, default=120.0,
                        help="CPU of each of the two threads of a request (default 120)")
    parser.add_argument("--average", type=float, default=0.1,
                        help="the load's average CPU use (default 0.1)")
    parser.add_argument("--requests", type=int, default=20)
    opts = parser.parse_args(argv)
    try:
        limit = Limit(opts.cpus)
    except ValueError as exc:
        parser.error(str(exc))
    if problem := kernel_quota_problem():
        print(f"parallel_drain: needs a kernel quota: {problem}", file=sys.stderr)
        return 2
    rate = opts.average / (2 * opts.thread_ms / 1000)
    with burn_service(limit, health_timeout=60) as service:
        per_request = 2 * opts.thread_ms
        iterations = {t: calibrated(service.base_url, t, per_request) for t in (1, 2)}
        print(f"parallel_drain: {per_request:g} ms of CPU per request: {iterations[2]} "
              f"iterations on each of 2 threads, or {iterations[1]} on one; {rate:.3g} "
              f"requests/s = {opts.average:g} CPU on average, limit {opts.cpus:g} CPU", flush=True)
        two = record(service.base_url, 2, iterations[2], rate, opts.requests)
        one = record(service.base_url, 1, iterations[1], rate, opts.requests)
    subprocess.run([str(HTTP_TIMING), "compare", str(one), str(two), "-o",
                    "pictures/parallel-drain.png", "--title",
                    f"The same CPU per request on 1 and on 2 threads, kernel limit "
                    f"{opts.cpus:g} CPU, open loop averaging {opts.average:g} CPU"],
                   cwd=ROOT, check=True, capture_output=True)
    print("\n| run | requests | CPU per request | burn wall | average CPU use | p50 ms "
          "| p99 ms | throttled |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(describe(one))
    print(describe(two))
    print("\npicture: pictures/parallel-drain.png (table: pictures/parallel-drain.md)")
    return 0


if __name__ == "__main__":
    run_main(main)
