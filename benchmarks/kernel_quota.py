"""What a real kernel CPU quota does to ~5 ms requests: ``burn-service --cpus X``, sequential.

    sudo .venv/bin/python -m benchmarks.kernel_quota [--cpus none 1 0.3 0.1] [--requests 200]
                               [--target-ms 5] [--iterations N] [--cpu-shares 10240]
                               [--client-nice -10]

For each quota it starts ``burn-service`` (``--cpus X`` runs it in a new cgroup, removed at the
end), calibrates nothing further, sends ``--requests`` sequential GETs of ``/cpuBurnFlow`` with
the project's own client (``client.run.modes.time_plan``, one keep-alive connection) and prints
one Markdown table row: latency percentiles, the share of requests over 50 ms, the requests the
kernel throttled (``Server-Timing: kernel-throttled``) and the cgroup's counters. The iteration
count is calibrated first, without a quota, so that the burn's *CPU* time is ``--target-ms``.

Needs Linux, root and a cgroup cpu controller. The CPU may be shared: run it once on a quiet
machine and say how busy it was, or give ``--cpu-shares`` to raise the quota group's weight
(``cpu.shares``; v2 ``cpu.weight`` scaled) above other processes so their load cannot starve
the service below its quota (the quota itself is unchanged; Docker's default weight is 1024),
and ``--client-nice`` to renice this client (root may go below 0) for the same reason.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

from benchmarks.support import burn_service, calibrate, keep_record, run_main
from client.data.record import RequestRecord
from client.data.summary import summarize
from client.run.modes import time_plan
from client.run.plan import LoadPlan
from cpuquota.limit import Limit


@contextmanager
def _service(quota: Limit | None) -> Iterator[str]:
    """``burn-service --cpus CPUS`` (None: no quota); its supervisor's last line (the
    cgroup's summary) goes to stderr when it stops."""
    with burn_service(quota, health_timeout=120) as service:
        try:
            yield service.base_url
        finally:
            summary = service.stop().strip().splitlines()
            if summary:
                print(f"  # {summary[-1]}", file=sys.stderr)


def _set_weight(limits: dict[str, object] | None, shares: int) -> None:
    if not shares or not limits or not limits.get("quota_us"):
        return
    group = Path(str(limits["path"]))
    if limits["version"] == 1:
        (group / "cpu.shares").write_text(str(shares))
    else:
        (group / "cpu.weight").write_text(str(max(1, min(10000, round(shares * 100 / 1024)))))


def _run(base: str, iterations: int, requests: int) -> list[RequestRecord]:
    # one warm-up request, not counted
    httpx.get(f"{base}/cpuBurnFlow", params={"iterations": iterations}, timeout=30)
    return time_plan(f"{base}/cpuBurnFlow?iterations={iterations}",
                     LoadPlan.from_options(requests=requests), lambda record: None).records


def calibrated(target_ms: float) -> int:
    """Iterations whose burn takes ``target_ms`` of CPU on this machine (median of 30 after
    one warm-up, no quota)."""
    with _service(None) as base:
        return calibrate(base, target_ms, requests=30, warmup=1)


def row(label: str, records: Sequence[RequestRecord], limits: dict[str, object] | None) -> str:
    s = summarize(records)
    lat = np.array([r.latency_ms for r in records if r.ok])
    cpu = np.median([r.server_cpu_ns or 0 for r in records]) / 1e6
    throttled = [r for r in records if (r.kernel_nr_throttled or 0) > 0]
    kernel_ms = sum((r.kernel_throttled_ns or 0) for r in records) / 1e6
    over = int((lat > 50).sum())
    quota = "" if not limits or not limits.get("quota_us") else \
        f"{limits['quota_us']}/{limits['period_us']}"
    share = f"{over} ({100 * over / len(lat):.0f} %)"
    return (f"| {label} | {quota or 'none'} | {len(records)} | {cpu:.1f} | {s.p50_ms:.1f} | "
            f"{s.p90_ms:.1f} | {s.p99_ms:.1f} | {s.mean_ms:.1f} | {share} | "
            f"{len(throttled)} | {kernel_ms:.0f} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", nargs="+", default=["none", "1", "0.3", "0.1"],
                        help="quotas to run, 'none' for no quota (default: none 1 0.3 0.1)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--target-ms", type=float, default=5.0,
                        help="CPU per request to calibrate the iterations to (default 5)")
    parser.add_argument("--iterations", type=int, default=0, help="skip calibration")
    parser.add_argument("--cpu-shares", type=int, default=0,
                        help="weight of the quota group, e.g. 10240 (default: Docker's 1024)")
    parser.add_argument("--client-nice", type=int, default=0,
                        help="renice this client, e.g. -10 (root only below 0)")
    args = parser.parse_args(argv)
    try:
        quotas = [None if text == "none" else Limit(float(text)) for text in args.cpus]
    except ValueError as exc:
        parser.error(f"--cpus: {exc}")
    if os.geteuid() != 0 and any(c != "none" for c in args.cpus):
        parser.error("a kernel quota needs root (creating a cgroup)")
    if args.client_nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.client_nice)
    iterations = args.iterations or calibrated(args.target_ms)
    load = os.getloadavg()[0]
    weight = f", cpu.shares {args.cpu_shares}" if args.cpu_shares else ""
    weight += f", client nice {args.client_nice}" if args.client_nice else ""
    print(f"{args.requests} sequential requests of {iterations} iterations, one keep-alive "
          f"connection, load average before {load:.1f} on {os.cpu_count()} CPUs{weight}\n")
    print("| quota | quota/period µs | n | burn CPU ms | p50 ms | p90 ms | p99 ms | mean ms "
          "| > 50 ms | kernel-throttled requests | kernel-throttled ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for text, quota in zip(args.cpus, quotas):
        with _service(quota) as base:
            limits = httpx.get(base + "/limits", timeout=5).json().get("cgroup")
            _set_weight(limits, args.cpu_shares)
            records = _run(base, iterations, args.requests)
        rows[text] = row(f"{text} CPU" if quota else "none", records, limits)
        print(rows[text], flush=True)
    keep_record("kernel_quota", {"iterations": iterations, "requests": args.requests,
                                 "rows": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
