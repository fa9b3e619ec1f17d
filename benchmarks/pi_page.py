"""The pi page's figures: what one ``/api/pi?counter=N`` request looks like per limit. Prints a table.

    .venv/bin/python benchmarks/pi_page.py [--counter 100000] [--requests 10]
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
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from client.run.targets.service import ProcessService, ServiceError  # noqa: E402
from service.pi import measure_overhead  # noqa: E402


def service_args(limit: str) -> list[str] | None:
    """burn-service arguments for a limit name; None when this machine cannot run it."""
    if limit == "none":
        return []
    kind, _, value = limit.partition("-")
    if kind == "inprocess":
        return ["--cpu-limit", value]
    if kind == "kernel":
        if os.geteuid() != 0 or not os.access("/sys/fs/cgroup/cpu", os.W_OK):
            return None
        return ["--cpus", value]
    raise SystemExit(f"pi_page.py: unknown limit {limit!r} (none, inprocess-P, kernel-C)")


@contextmanager
def burn_service(args: Sequence[str]) -> Iterator[str]:
    try:
        with ProcessService.local(["--max-counter", "100000000", *args], health_timeout=30) as service:
            yield service.base_url
    except ServiceError as exc:
        raise SystemExit(f"burn-service {' '.join(args)}: {exc}") from None


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
        args = service_args(limit)
        if args is None:
            print(f"{limit:<14} skipped: needs root and a writable /sys/fs/cgroup/cpu")
            continue
        with burn_service(args) as base:
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
    sys.exit(main())
