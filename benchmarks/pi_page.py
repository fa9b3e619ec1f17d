"""The pi page's figures: what one ``/api/pi?counter=N`` request looks like per limit.

    .venv/bin/python -m benchmarks.pi_page [--counter 100000] [--requests 10]
        [--limits none inprocess-10 kernel-0.1]

For each limit a fresh ``burn-service`` runs (``none``: no limit; ``inprocess-P``:
``--cpu-limit P``; ``kernel-C``: ``--cpus C``, a real cgroup quota, root only) and gets
``--requests`` sequential requests. Per request: the loop's wall and CPU time, its longest gap,
the number of pauses (gaps >= 1 ms) and their sum; the table shows medians (longest gap: the
median of the per-request maxima and the overall maximum). Then the per-iteration cost of the
timing itself (``service.pi.measure_overhead``: best of 5, CPU time).

The machine may be shared and noisy: the load average is printed; run it once.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx

from benchmarks.support import burn_service, run_main
from client.run.targets.kernel import kernel_quota_problem
from cpuquota.limit import Limit, LimitError
from service.pi import measure_overhead


def backend_limit(limit: str) -> tuple[str, Limit | None] | None:
    """The backend and limit for a limit name (``none``, ``inprocess-P``: ``--cpu-limit P``,
    ``kernel-C``: ``--cpus C``); None when this machine cannot run it."""
    if limit == "none":
        return "kernel", None
    kind, _, value = limit.partition("-")
    try:
        if kind == "inprocess":
            return "inprocess", Limit(float(value) / 100)
        if kind == "kernel":
            return None if kernel_quota_problem() else ("kernel", Limit(float(value)))
    except (ValueError, LimitError):
        pass
    raise SystemExit(f"pi_page.py: unknown limit {limit!r} (none, inprocess-P, kernel-C)")


@contextmanager
def limited(backend: str, limit: Limit | None) -> Iterator[str]:
    with burn_service(limit, "--max-counter", "100000000", backend=backend,
                      health_timeout=30) as service:
        yield service.base_url


def measure(base: str, counter: int, requests: int) -> list[dict[str, float]]:
    rows = []
    with httpx.Client(base_url=base, timeout=120) as client:
        client.get("/api/pi", params={"counter": 1000})  # warm-up
        for _ in range(requests):
            body = client.get("/api/pi", params={"counter": counter}).raise_for_status().json()
            rows.append({"wall_ms": body["wall_ns"] / 1e6, "cpu_ms": body["cpu_ns"] / 1e6,
                         "max_gap_ms": body["gaps"][-1]["us"] / 1e3 if body["gaps"] else 0.0,
                         "pauses": body["pauses"]["count"],
                         "paused_ms": body["pauses"]["total_us"] / 1e3})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counter", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--limits", nargs="+", default=["none", "inprocess-10", "kernel-0.1"])
    opts = parser.parse_args(argv)
    if opts.counter < 1 or opts.requests < 1:
        parser.error("--counter and --requests must be >= 1")

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"counter={opts.counter:,}, {opts.requests} sequential requests per limit")
    header = (f"{'limit':<14} {'wall ms':>9} {'cpu ms':>8} {'longest gap ms':>15} "
              f"{'(max)':>8} {'pauses':>7} {'paused ms':>10}")
    print(header)
    print("-" * len(header))
    for limit in opts.limits:
        found = backend_limit(limit)
        if found is None:
            print(f"{limit:<14} skipped: needs root and a writable /sys/fs/cgroup/cpu")
            continue
        with limited(*found) as base:
            rows = measure(base, opts.counter, opts.requests)

        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        print(f"{limit:<14} {med('wall_ms'):>9.1f} {med('cpu_ms'):>8.1f} "
              f"{med('max_gap_ms'):>15.3f} {max(r['max_gap_ms'] for r in rows):>8.3f} "
              f"{med('pauses'):>7.0f} {med('paused_ms'):>10.1f}")

    overhead = measure_overhead(iterations=200_000, repeat=5)
    print(f"\ntiming overhead: {overhead.per_iteration_ns:.0f} ns per iteration on top of "
          f"{overhead.plain_per_iteration_ns:.0f} ns for the bare series term "
          f"(CPU time, best of 5 x {overhead.iterations:,} iterations)")
    return 0


if __name__ == "__main__":
    run_main(main)
