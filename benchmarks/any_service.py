"""Throttling evidence for a service that knows nothing of throttle-lab: a Node.js server.

    sudo .venv/bin/python -m benchmarks.any_service [--cpus 0.2] [--ms 5] [--requests 200]
                                                     [--concurrency 4] [--picture out.png]

``benchmarks/node_burner.js`` (no dependencies; ``GET /burn?ms=N`` burns N ms of CPU) runs in a
new cgroup with a real quota (``--cpus``, removed at the end: ``benchmarks.support.node_in_group``). The group is found the way a
user would (``pid:PID``), sampled every 10 ms while requests are timed:

- sequentially, with exact ``read_sample`` readings just before and after each request
  (what the sequential mode will store per request) besides the timeline;
- with ``--concurrency`` workers (a closed loop), timeline only.

For each it prints the group's own ``cpu.stat`` change over the run, what the timeline
counted, the throttled time attributed to the requests (overlapping requests share the
blame, so with concurrency the sum may exceed the group's; "covered" is the part that
overlapped at least one request), and the latency of the requests marked throttled against
the others. For the sequential run it also compares the timeline's marks with the exact
readings. ``--picture`` draws the sequential run: dots, throttled bands and the usage panel.
Later this will be ``http-timing --cgroup pid:PID``; for now it drives the modules directly.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from benchmarks.support import node_in_group, run_main, union
from client.data.timeline import CgroupSample
from client.data.attribution import attribute
from client.run.cgroup_sampler import CgroupReader, CgroupSampler
from client.run.service_group import ServiceGroup, resolve_cgroup
from cpuquota.account import CpuStat
from cpuquota.limit import Limit


@dataclass
class Measured:
    intervals: list[tuple[int, int]]
    timeline: list[CgroupSample]
    kernel: CpuStat
    exact: list[tuple[CgroupSample, CgroupSample]]   # sequential only: before/after each


def _stat(reader: CgroupReader) -> CpuStat:
    s = reader.read()
    return CpuStat(s.nr_periods, s.nr_throttled, s.throttled_ns)


def run_sequential(target: ServiceGroup, url: str, requests: int) -> Measured:
    intervals, exact = [], []
    with httpx.Client(timeout=60) as client, CgroupReader(target) as reader:
        request = client.build_request("GET", url)
        before = _stat(reader)
        run_start = time.perf_counter_ns()
        with CgroupSampler(target, None) as sampler:
            sampler.start(run_start)
            for _ in range(requests):
                first = reader.read(run_start)
                start = time.perf_counter_ns()
                client.send(request).raise_for_status()
                end = time.perf_counter_ns()
                exact.append((first, reader.read(run_start)))
                intervals.append((start - run_start, end - run_start))
        kernel = _stat(reader) - before
    return Measured(intervals, sampler.samples, kernel, exact)


def run_concurrent(target: ServiceGroup, url: str, requests: int, workers: int) -> Measured:
    intervals: list[tuple[int, int]] = []
    run_start = time.perf_counter_ns()

    def worker(count: int) -> None:
        with httpx.Client(timeout=60) as client:
            request = client.build_request("GET", url)
            for _ in range(count):
                start = time.perf_counter_ns()
                client.send(request).raise_for_status()
                intervals.append((start - run_start, time.perf_counter_ns() - run_start))

    with CgroupReader(target) as reader:
        before = _stat(reader)
        with CgroupSampler(target, None) as sampler:
            sampler.start(run_start)
            threads = [threading.Thread(target=worker, args=(requests // workers,))
                       for _ in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        kernel = _stat(reader) - before
    intervals.sort()
    return Measured(intervals, sampler.samples, kernel, [])


def report(label: str, m: Measured, period_ns: int) -> list[bool]:
    timeline = m.timeline
    counted = timeline[-1].throttled_ns - timeline[0].throttled_ns
    marks = attribute(m.intervals, timeline, period_ns=period_ns)
    attributed = sum(a for a, _n in marks)
    covered = sum(a for a, _n in attribute(union(m.intervals), timeline, period_ns=period_ns))
    seconds = (timeline[-1].t_ns - timeline[0].t_ns) / 1e9
    latency = np.array([(b - a) / 1e6 for a, b in m.intervals])
    marked = np.array([n > 0 for _a, n in marks])
    print(f"\n### {label}: {len(m.intervals)} requests in {seconds:.1f} s, "
          f"{len(timeline) / seconds:.0f} samples/s\n")
    print("| throttled time | ms | vs cpu.stat |")
    print("|---|---|---|")
    kernel_ms = m.kernel.throttled_ns / 1e6
    for name, ns in (("the group's cpu.stat change", m.kernel.throttled_ns),
                     ("the timeline's change", counted),
                     ("attributed to requests (sum)", attributed),
                     ("covered by at least one request", covered)):
        print(f"| {name} | {ns / 1e6:.1f} | {100 * ns / 1e6 / kernel_ms:.0f} % |"
              if kernel_ms else f"| {name} | {ns / 1e6:.1f} | - |")
    print(f"\nperiods {m.kernel.nr_periods}, throttled {m.kernel.nr_throttled}\n")
    print("| requests | count | p50 ms | p90 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for name, mask in (("marked throttled", marked), ("not marked", ~marked)):
        if mask.any():
            p50, p90, p99 = np.percentile(latency[mask], [50, 90, 99])
            print(f"| {name} | {mask.sum()} | {p50:.1f} | {p90:.1f} | {p99:.1f} |")
        else:
            print(f"| {name} | 0 | - | - | - |")
    return list(marked)


def compare_exact(m: Measured, marked: list[bool]) -> None:
    exact = [after.nr_throttled > before.nr_throttled or after.throttled_ns > before.throttled_ns
             for before, after in m.exact]
    exact_ns = sum(after.throttled_ns - before.throttled_ns for before, after in m.exact)
    both = sum(1 for e, t in zip(exact, marked) if e and t)
    only_exact = sum(1 for e, t in zip(exact, marked) if e and not t)
    only_timeline = sum(1 for e, t in zip(exact, marked) if t and not e)
    print("\nexact readings around each request vs the timeline's marks: "
          f"both {both}, exact only {only_exact}, timeline only {only_timeline}, neither "
          f"{len(exact) - both - only_exact - only_timeline}; exact per-request sum "
          f"{exact_ns / 1e6:.1f} ms")


def picture(path: Path, m: Measured, marked: list[bool], limit: Limit) -> None:
    from client.data.attribution import throttled_stretches
    from client.render.figures import pyplot, save_figure
    from client.render.cgroup_plot import draw_throttled_bands, draw_usage_panel
    from client.render.legend import legend_outside

    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(14.5, 8), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    try:
        draw_throttled_bands(top, throttled_stretches(m.timeline, limit.period_ns))
        xs = np.array([a / 1e9 for a, _b in m.intervals])
        ys = np.array([(b - a) / 1e6 for a, b in m.intervals])
        mask = np.array(marked)
        top.scatter(xs[~mask], ys[~mask], s=18, label="request")
        top.scatter(xs[mask], ys[mask], s=18, c="#ff7f0e", label="delayed by throttling")
        top.set_ylabel("latency (ms)")
        top.set_title(f"Node.js service in a {limit.cpus:g} CPU cgroup, sequential requests")
        legend_outside(top)
        top.grid(True, alpha=0.3)
        draw_usage_panel(bottom, m.timeline, limit)
        save_figure(fig, path)
    finally:
        plt.close(fig)
    print(f"\npicture: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=float, default=0.2)
    parser.add_argument("--ms", type=float, default=5.0, help="CPU ms per request")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--picture", type=Path)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (it makes a cgroup)")
    version = subprocess.check_output(["node", "--version"], text=True).strip()
    print(f"load: {' '.join(f'{v:.2f}' for v in os.getloadavg())} (1/5/15 min), "
          f"{os.cpu_count()} CPUs; node {version}")
    with node_in_group(args.cpus) as node:
        base, pid = node.base_url, node.pid
        target = resolve_cgroup(f"pid:{pid}")
        assert target.directory == node.group and target.limit is not None
        print(f"target pid:{pid} -> {target.group} ({target.limit.describe()}, usage from "
              f"{target.usage_source.kind})")
        url = f"{base}/burn?ms={args.ms:g}"
        httpx.get(url, timeout=60)   # warm up (JIT)
        sequential = run_sequential(target, url, args.requests)
        marked = report(f"sequential, {args.ms:g} ms CPU per request", sequential,
                        target.limit.period_ns)
        compare_exact(sequential, marked)
        time.sleep(0.3)
        concurrent = run_concurrent(target, url, args.requests, args.concurrency)
        report(f"concurrency {args.concurrency}, {args.ms:g} ms CPU per request", concurrent,
               target.limit.period_ns)
        if args.picture:
            picture(args.picture, sequential, marked, target.limit)
    return 0


if __name__ == "__main__":
    run_main(main)
