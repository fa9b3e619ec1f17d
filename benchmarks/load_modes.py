"""How much the client itself adds in each load mode, and how punctual the open loop is.

    .venv/bin/python -m benchmarks.load_modes [--requests 300] [--rate 100] [--iterations 0]

Starts ``burn-service`` (no limit) on a free port and times the same cheap request
(``/cpuBurnFlow?iterations=0`` by default) sequentially, in a closed loop of 1 and of 4
workers, and in an open loop at ``--rate``. Prints one Markdown row per mode: latency p50/p99
and, for the open loop, how late requests went out against their intended send time (the
lag is part of their latency by design; a small lag means the client keeps its schedule).
The server shares the machine's CPUs with the client: run it once on a quiet machine and say
how busy it was (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

import httpx
import numpy as np

from benchmarks.support import burn_service, run_main
from client.data.record import RequestRecord
from client.run.modes import time_plan
from client.run.plan import LoadPlan


def _row(label: str, records: Sequence[RequestRecord]) -> str:
    lat = np.asarray([r.latency_ns for r in records if r.ok], dtype=float) / 1e6
    p50, p99 = np.percentile(lat, [50, 99])
    lags = [r.start_ns - r.scheduled_ns for r in records if r.scheduled_ns is not None]
    lag = (f"{np.percentile(lags, 50) / 1e6:.2f} / {np.percentile(lags, 99) / 1e6:.2f}"
           if lags else "")
    return f"| {label} | {len(records)} | {p50:.2f} | {p99:.2f} | {lag} |"


def _paced(url: str, rate: float, requests: int) -> list[RequestRecord]:
    """One client, one thread: send request i at i / rate s, time send -> end of body."""
    records = []
    with httpx.Client() as client:
        request = client.build_request("GET", url)
        start = time.perf_counter_ns()
        for i in range(requests):
            wait = start + i * 1e9 / rate - time.perf_counter_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            sent = time.perf_counter_ns()
            response = client.send(request)
            records.append(RequestRecord(i, sent - start, time.perf_counter_ns() - sent,
                                         response.status_code))
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--iterations", type=int, default=0)
    args = parser.parse_args(argv)
    with burn_service(health_timeout=30) as service:
        base = service.base_url
        url = f"{base}/cpuBurnFlow?iterations={args.iterations}"
        time_plan(url, LoadPlan.from_options(requests=20), lambda r: None)  # warm-up
        print(f"{args.requests} requests of {url.split('/', 3)[-1]}, load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
        print("| mode | n | p50 ms | p99 ms | open-loop send lag p50 / p99 ms |")
        print("|---|---|---|---|---|")
        plans = [("sequential", LoadPlan.from_options(requests=args.requests)),
                 ("closed loop, 1 worker", LoadPlan.from_options(concurrency=1,
                                                                 requests=args.requests)),
                 ("closed loop, 4 workers", LoadPlan.from_options(concurrency=4,
                                                                  requests=args.requests)),
                 (f"open loop, {args.rate:g}/s", LoadPlan.from_options(rate=args.rate,
                                                                       requests=args.requests))]
        for label, plan in plans:
            outcome = time_plan(url, plan, lambda r: None)
            print(_row(label, outcome.records), flush=True)
        print(_row(f"baseline: one thread, paced at {args.rate:g}/s",
                   _paced(url, args.rate, args.requests)))
        print("\nThe paced baseline is a plain loop that sleeps between requests: what an idle "
              "server (and CPU) costs to wake, which every open loop pays too.")
    return 0


if __name__ == "__main__":
    run_main(main)
