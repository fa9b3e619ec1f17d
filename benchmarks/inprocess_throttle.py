"""How faithful is the in-process throttle (``burn-service --cpu-limit PCT``)?

    .venv/bin/python -m benchmarks.inprocess_throttle [--percents 1 2 4 8 30 80]
        [--window 4] [--concurrency 4] [--iterations 3000] [--requests 100]
        [--picture pictures/inprocess-30pct.png] [--raw-data raw-data] [--cpu-shares 10240]

(a) **Share under saturating load.** For each limit a fresh ``burn-service --cpu-limit PCT``
    gets a closed loop of ``--concurrency`` clients sending ``/cpuBurnFlow`` back to back; over
    ``--window`` seconds (after a warm-up) the process's CPU time (``/metrics``,
    ``throttle_lab_process_cpu_seconds_total``: all threads, ns resolution) divided by the wall
    time is the share it got. Goal: within ±5 % (relative) of the target.
(b) **The share per doubling** (1/2/4/8 %, cfs mode): the share must double per doubling
    (goal 1.9-2.1); the throughput factor per doubling is shown next to it, with the CPU each
    request costs outside the burn (event loop, HTTP parsing, the hand-off to a thread): that
    CPU is charged to the same budget, exactly as a cgroup charges it, so it lowers the
    throughput the budget buys. The seed's own test, throughput per doubling in both modes
    with its bounds, is ``benchmarks/throttle_scaling.py``.
(c) **The original demo at 30 %**: ``--requests`` sequential ~5 ms requests (one keep-alive
    connection, the project's client), next to the same run without a limit: p50, p90, the
    share of requests the server paused, the typical stall. Draws the dot picture.

The machine may be shared and noisy: run it once, say how busy it was (the load average is
printed). Each row takes a few seconds. On a busy machine the service may not even get the
CPU its limit allows (then fewer periods are throttled than elapse: see the last column). As
root with cgroup v1, ``--cpu-shares N`` puts this benchmark and its services in a cgroup of
weight N (``cpu.shares``, no quota: it limits nothing, it only wins against neighbours), removed
at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from benchmarks.support import (ROOT, burn_service, calibrate, keep_record, record, run_main,
                                scrape)
from client.data.files import Run
from client.data.record import RequestRecord
from client.data.summary import summarize
from client.render.figures import plot_run
from client.run.modes import time_plan
from client.run.plan import LoadPlan
from client.run.record import RunSpec
from cpuquota.cgroupfs import locate_cpu_controller
from cpuquota.limit import Limit
from service.cgroup import move_pid, remove_group, unique_group_name


@contextmanager
def shielded(shares: int) -> Iterator[Path]:
    """A cgroup v1 group with ``cpu.shares`` = ``shares`` holding this process (and the services
    it starts); this process moves back and the group is removed at the end."""
    controller = locate_cpu_controller()
    if controller.version != 1:
        raise SystemExit("--cpu-shares needs the cgroup v1 cpu controller")
    home = controller.directory
    group = home / unique_group_name()
    group.mkdir()
    try:
        (group / "cpu.shares").write_text(str(shares))
        move_pid(group, os.getpid())
        yield group
    finally:
        move_pid(home, os.getpid())
        if not remove_group(group):
            print(f"warning: could not remove {group}", file=sys.stderr)


@contextmanager
def throttled(percent: float | None) -> Iterator[str]:
    """``burn-service --cpu-limit PERCENT`` (None: no limit) on a free port; its base URL;
    stopped by its pid at the end (a child inherits this process's cgroup, so with
    ``--cpu-shares`` it starts inside the shield)."""
    limit = Limit(percent / 100) if percent is not None else None
    with burn_service(limit, backend="inprocess") as service:
        yield service.base_url


# -- (a) and (b): saturating load ---------------------------------------------------------------

@dataclass(frozen=True)
class Saturated:
    percent: float
    seconds: float
    requests: int
    cpu_s: float        # the process's CPU time in the window
    burn_cpu_s: float   # of which the burn loops
    nr_periods: float
    nr_throttled: float

    @property
    def share(self) -> float:
        """CPU share in percent of one CPU."""
        return 100 * self.cpu_s / self.seconds

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    @property
    def other_cpu_ms(self) -> float:
        """CPU per request spent outside the burn loop (HTTP, event loop, framework)."""
        return 1000 * (self.cpu_s - self.burn_cpu_s) / max(1, self.requests)

    @property
    def burn_cpu_ms(self) -> float:
        return 1000 * self.burn_cpu_s / max(1, self.requests)


def saturate(percent: float, iterations: int, concurrency: int, window_s: float,
             warmup_s: float = 1.0, min_requests: int = 40) -> Saturated:
    """Measure for ``window_s`` seconds, longer (up to 4x) until ``min_requests`` completed:
    at 1 % only a few requests fit in a second and the throughput would be mostly rounding."""
    done: list[int] = []

    def note(record: RequestRecord) -> None:
        if record.ok:
            done.append(time.perf_counter_ns())

    with throttled(percent) as base:
        url = f"{base}/cpuBurnFlow?iterations={iterations}"
        plan = LoadPlan.from_options(concurrency=concurrency,
                                     duration=warmup_s + 4 * window_s + 5)
        loop = threading.Thread(target=time_plan, daemon=True, args=(url, plan, note),
                                kwargs={"timeout": 60.0, "max_consecutive_failures": 1})
        loop.start()
        time.sleep(warmup_s)
        m0, t0 = scrape(base), time.perf_counter_ns()
        while True:
            time.sleep(0.2)
            elapsed = (time.perf_counter_ns() - t0) / 1e9
            if elapsed >= 4 * window_s or elapsed >= window_s and \
                    sum(1 for t in done if t >= t0) >= min_requests:
                break
        m1, t1 = scrape(base), time.perf_counter_ns()
    loop.join(timeout=120)  # the service is gone: the loop ends at its next request

    def delta(name: str) -> float:
        return m1.get(name, 0.0) - m0.get(name, 0.0)

    p = "throttle_lab_inprocess_"
    return Saturated(percent, (t1 - t0) / 1e9, sum(1 for t in done if t0 <= t < t1),
                     delta("throttle_lab_process_cpu_seconds_total"),
                     delta("throttle_lab_burn_cpu_seconds_total"),
                     delta(p + "nr_periods_total"), delta(p + "nr_throttled_total"))


def print_share_table(rows: Sequence[Saturated], iterations: int, concurrency: int) -> None:
    print(f"\n(a) CPU share under saturating load: closed loop of {concurrency} clients, "
          f"/cpuBurnFlow?iterations={iterations}, 100 ms cycle, cfs mode\n")
    print("| limit | CPU share measured | measured / target | requests/s | burn CPU/request "
          "| other CPU/request | nr_throttled / nr_periods |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.percent:g} % | {r.share:.2f} % | {r.share / r.percent:.3f} | "
              f"{r.throughput:.1f} | {r.burn_cpu_ms:.2f} ms | {r.other_cpu_ms:.2f} ms | "
              f"{r.nr_throttled:.0f} / {r.nr_periods:.0f} |")


def print_scaling_table(rows: Sequence[Saturated]) -> None:
    by = {r.percent: r for r in rows}
    steps = [(a, b) for a, b in ((1, 2), (2, 4), (4, 8)) if a in by and b in by]
    if not steps:
        return
    print("\n(b) Scaling per doubling (the seed's test; its CpuThrottler run: throughput "
          "1.63x, 2.05x, 1.91x, CI accepts 1.3x-3.0x)\n")
    print("| step | share factor | throughput factor | other CPU/request (from -> to) |")
    print("|---|---|---|---|")
    for a, b in steps:
        ra, rb = by[a], by[b]
        print(f"| {a:g} % -> {b:g} % | {rb.share / ra.share:.2f}x | "
              f"{rb.throughput / ra.throughput:.2f}x | "
              f"{ra.other_cpu_ms:.2f} -> {rb.other_cpu_ms:.2f} ms |")


# -- (c): the original demo -------------------------------------------------------------------

def sequential(base: str, iterations: int, requests: int, name: str,
               data_dir: Path) -> Run:
    """``requests`` one after another, recorded as any run is (one warm-up request first)."""
    spec = RunSpec(url=f"{base}/cpuBurnFlow?iterations={iterations}",
                   plan=LoadPlan.from_options(requests=requests), name=name, data_dir=data_dir,
                   iterations=iterations, command=["benchmarks/inprocess_throttle.py"], warmup=1,
                   note_load_average=True)
    return record(spec)


def describe_sequential(label: str, records: Sequence[RequestRecord]) -> str:
    s = summarize(records)
    paused = [r for r in records if (r.server_throttle_ns or 0) > 1_000_000]
    stall = statistics.median(r.server_throttle_ns or 0 for r in paused) / 1e6 if paused else 0.0
    cpu = statistics.median(r.server_cpu_ns or 0 for r in records) / 1e6
    share = 100 * len(paused) / len(records)
    return (f"| {label} | {len(records)} | {cpu:.2f} | {s.p50_ms:.1f} | {s.p90_ms:.1f} | "
            f"{s.p99_ms:.1f} | {s.mean_ms:.1f} | {len(paused)} ({share:.0f} %) | {stall:.1f} |")


def demo(percent: float, requests: int, target_ms: float, picture: Path | None,
         raw_dir: Path | None) -> None:
    name = f"inprocess-{percent:g}pct"
    with tempfile.TemporaryDirectory() as scratch:
        with throttled(None) as base:
            iterations = calibrate(base, target_ms)   # median of 20, no limit
            unlimited = sequential(base, iterations, requests, "unlimited", Path(scratch)).records
        with throttled(percent) as base:
            run = sequential(base, iterations, requests, name, raw_dir or Path(scratch))
            limited = run.records
    print(f"\n(c) {requests} sequential requests of {iterations} iterations (~{target_ms:g} ms "
          f"of CPU), one keep-alive connection\n")
    print("| limit | n | burn CPU ms (median) | p50 ms | p90 ms | p99 ms | mean ms "
          "| paused by the throttle (> 1 ms) | typical stall ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(describe_sequential("none", unlimited))
    print(describe_sequential(f"{percent:g} % in-process (cfs, 100 ms)", limited))
    if picture is not None:
        title = (f"In-process throttle, {percent:g} % of one CPU (100 ms cycle, cfs): "
                 f"{requests} sequential ~{target_ms:g} ms requests\n"
                 f"measured {date.today().isoformat()} on a shared, noisy 2-core machine")
        plot_run(run, picture, title=title)
        shown = picture.relative_to(ROOT) if picture.is_relative_to(ROOT) else picture
        print(f"\npicture: {shown}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--percents", type=float, nargs="+", default=[1, 2, 4, 8, 30, 80])
    parser.add_argument("--window", type=float, default=4.0, help="seconds measured per limit")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=3000,
                        help="iterations per request under saturating load")
    parser.add_argument("--requests", type=int, default=100, help="sequential requests in (c)")
    parser.add_argument("--demo-percent", type=float, default=30)
    parser.add_argument("--target-ms", type=float, default=5.0)
    parser.add_argument("--picture", type=Path, default=ROOT / "pictures" / "inprocess-30pct.png")
    parser.add_argument("--raw-data", type=Path, default=ROOT / "raw-data")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--cpu-shares", type=int, default=0,
                        help="as root (cgroup v1): run in a cgroup of this cpu.shares weight")
    args = parser.parse_args(argv)
    if any(not 0 < p <= 100 for p in args.percents) or not 0 < args.demo_percent <= 100:
        parser.error("limits must be in (0, 100]")
    if args.window <= 0 or args.concurrency < 1 or args.iterations < 1 or args.requests < 1:
        parser.error("--window, --concurrency, --iterations and --requests must be positive")
    if args.cpu_shares < 0 or args.cpu_shares and os.geteuid() != 0:
        parser.error("--cpu-shares needs root and a positive weight")
    if args.cpu_shares:
        with shielded(args.cpu_shares) as group:
            print(f"in cgroup {group} with cpu.shares {args.cpu_shares} (weight only, no quota)")
            return run(args)
    return run(args)


def run(args: argparse.Namespace) -> int:
    print(f"{date.today().isoformat()}, {os.cpu_count()} CPUs, load average before "
          f"{os.getloadavg()[0]:.2f} (a shared machine: other work competes for the CPU)")
    rows = [saturate(p, args.iterations, args.concurrency, args.window) for p in args.percents]
    print_share_table(rows, args.iterations, args.concurrency)
    print_scaling_table(rows)
    if not args.skip_demo:
        demo(args.demo_percent, args.requests, args.target_ms, args.picture, args.raw_data)
    print(f"\nload average after {os.getloadavg()[0]:.2f}")
    keep_record("inprocess_throttle", {"iterations": args.iterations,
                                       "concurrency": args.concurrency, "window": args.window,
                                       "saturated": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
