"""What watching a group costs: one reading, samples per second, and the client's latency.

    sudo .venv/bin/python -m benchmarks.cgroup_sampler [--requests 400] [--rounds 5]
                                                        [--interval 0.01]
                                                        [--more-processes 10]

1. The cost of one ``read_sample`` (µs, median of many) for each way this machine can read
   usage: ``cpuacct`` (the cpu root group, whose cpuacct twin exists) and ``proc`` (a new
   group under the cpu hierarchy only: the stdlib burner's processes), with the parts: the
   ``pread`` of cpu.stat and ``cpuquota.cgroupfs.parse_cpu_stat``; the ``proc`` reading again
   with ``--more-processes`` more processes in the group (what a process per request costs it).
2. Samples per second the sampler thread achieves at ``--interval`` over a sequential run.
3. The client-side overhead on a sequential run's latency: the burner (in a group whose quota,
   2 CPUs, never throttles on this 2-CPU machine) answering ``/burn?ms=0``, timed as
   ``client.run.http`` does (request built once, ``client.send``), in interleaved
   rounds of three modes: no sampler; the sampler thread; the sampler thread plus a
   ``read_sample`` just before and just after each request (the sequential mode's exact
   reads, outside the timed interval as the integrator will place them); and, as a control,
   no sampler but a spin as long as a reading in place of each read (the same gap between
   requests, no cgroup files touched).
4. How precisely the sampler's timeline places the kernel's period boundaries (which is what
   puts each throttle in the right request): against a ~0.3 ms reference sampling.

Needs Linux, root and a cgroup cpu controller. The machine is shared: compare the modes
within one run (the ratios), repeat, and say how busy the machine was (``uptime``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

from benchmarks.support import burner_in_group, run_main
from client.data.timeline import CgroupSample
from client.data.attribution import period_phase
from client.run.cgroup_sampler import CgroupReader, CgroupSampler, read_sample
from client.run.service_group import ServiceGroup, resolve_cgroup
from cpuquota.cgroupfs import parse_cpu_stat
from cpuquota.limit import Limit
from service.cgroup import create_group, empty_group, move_pid, remove_group


def per_call_us(call: Callable[[], object], n: int = 20000, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean cost of ``n`` calls, in µs."""
    means = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(n):
            call()
        means.append((time.perf_counter_ns() - start) / n / 1000)
    return statistics.median(means)


def reading_costs(targets: dict[str, ServiceGroup], more: int = 0) -> None:
    """``more``: then the ``proc`` rows again with that many more processes in the group
    (``sleep``s: the proc path reads each process's stat and CPU clock every sample)."""
    print("\n### One reading (µs per call, median of 5 × 20000)\n")
    print("| usage source | processes | pread cpu.stat | + parse_cpu_stat | read_sample |")
    print("|---|---|---|---|---|")
    _reading_rows(targets)
    procs = {name: t for name, t in targets.items() if t.usage_source.kind == "proc"}
    if not more or not procs:
        return
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(more)]
    try:
        for target in procs.values():
            for sleeper in sleepers:
                move_pid(target.directory, sleeper.pid)
        _reading_rows(procs)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def _reading_rows(targets: dict[str, ServiceGroup]) -> None:
    for name, target in targets.items():
        fd = os.open(target.stat_path, os.O_RDONLY)
        try:
            raw = per_call_us(lambda: os.pread(fd, 4096, 0))
            parsed = per_call_us(lambda: parse_cpu_stat(os.pread(fd, 4096, 0).decode(),
                                                        target.version))
        finally:
            os.close(fd)
        full = per_call_us(lambda: read_sample(target))
        threads = "-"
        if target.usage_source.kind == "proc":
            threads = str(len((target.directory / "cgroup.procs").read_text().split()))
        print(f"| {name} | {threads} | {raw:.1f} | {parsed:.1f} | {full:.1f} |")


def _spin(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def timed_round(client: httpx.Client, request: httpx.Request, n: int,
                reads: CgroupReader | None, gap_ns: int = 0) -> list[float]:
    """``n`` timed requests; ``reads``: read just before and after each (outside the timed
    interval); ``gap_ns``: spin that long instead (the same gap between requests, no reads)."""
    latencies = []
    for _ in range(n):
        if reads is not None:
            reads.read()
        elif gap_ns:
            _spin(gap_ns)
        start = time.perf_counter_ns()
        response = client.send(request)
        end = time.perf_counter_ns()
        if reads is not None:
            reads.read()
        elif gap_ns:
            _spin(gap_ns)
        assert response.status_code == 200
        latencies.append((end - start) / 1e6)
    return latencies


def overhead(target: ServiceGroup, base_url: str, requests: int, rounds: int,
             interval: float) -> None:
    gap_ns = round(per_call_us(lambda: read_sample(target), 2000) * 1000)
    control = f"no sampler, {gap_ns / 1000:.0f} µs spin instead of each read (control)"
    modes = ("no sampler", "sampler thread", "sampler + reads around each request", control)
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    rates: list[float] = []
    with httpx.Client(timeout=30) as client:
        request = client.build_request("GET", f"{base_url}/burn?ms=0")
        timed_round(client, request, 100, None)   # warm up
        for _ in range(rounds):
            for mode in modes:
                sampler = None if mode.startswith("no sampler") else \
                    CgroupSampler(target, None, interval)
                reads = CgroupReader(target) if mode.endswith("each request") else None
                start = time.perf_counter_ns()
                if sampler is not None:
                    sampler.start(start)
                latencies[mode] += timed_round(client, request, requests, reads,
                                               gap_ns if mode == control else 0)
                if sampler is not None:
                    samples = sampler.stop()
                    seconds = (samples[-1].t_ns - samples[0].t_ns) / 1e9
                    rates.append((len(samples) - 1) / seconds)
                if reads is not None:
                    reads.close()
    print(f"\n### Samples per second at --cgroup-interval {interval:g} "
          f"({len(rates)} runs of {requests} requests)\n")
    print(f"asked {1 / interval:.0f}/s: min {min(rates):.0f}/s, median "
          f"{statistics.median(rates):.0f}/s, max {max(rates):.0f}/s")
    print(f"\n### Client-side latency of /burn?ms=0, {rounds} interleaved rounds × {requests}"
          " requests per mode\n")
    print("| mode | p50 ms | p90 ms | p99 ms | p50 vs no sampler |")
    print("|---|---|---|---|---|")
    base = float(np.percentile(latencies["no sampler"], 50))
    for mode in modes:
        p50, p90, p99 = np.percentile(latencies[mode], [50, 90, 99])
        print(f"| {mode} | {p50:.3f} | {p90:.3f} | {p99:.3f} | {100 * (p50 / base - 1):+.1f} % |")


def phase_precision(seconds: float) -> None:
    """How well the 10 ms sampler places the kernel's period boundaries: its estimate against
    one from a reference read every ~0.3 ms in a busy loop, while a busy process in a 0.2 CPU
    group is throttled every period."""
    print(f"\n### Period boundaries: the sampler's estimate vs a ~0.3 ms reference ({seconds:g} s "
          "of a busy loop under 0.2 CPU)\n")
    print("| run | reference samples | sampler samples | boundaries seen | error ms |")
    print("|---|---|---|---|---|")
    for run in range(1, 4):
        group = create_group(Limit(0.2))
        busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\n"
                                 f"while time.time() - t < {seconds + 2}: pass"])
        try:
            move_pid(group, busy.pid)
            target = resolve_cgroup(str(group))
            reference: list[CgroupSample] = []
            start = time.perf_counter_ns()
            with CgroupSampler(target) as sampler, CgroupReader(target) as reader:
                sampler.start(start)
                while time.perf_counter_ns() - start < seconds * 1e9:
                    reference.append(reader.read(start))
                    time.sleep(0.0003)
            period = 100_000_000
            truth, estimate = period_phase(reference, period), period_phase(sampler.samples,
                                                                             period)
            seen = sampler.samples[-1].nr_periods - sampler.samples[0].nr_periods
            error = "-" if truth is None or estimate is None else \
                f"{((estimate - truth + period // 2) % period - period // 2) / 1e6:+.2f}"
            print(f"| {run} | {len(reference)} | {len(sampler.samples)} | {seen} | {error} |")
        finally:
            busy.kill()
            busy.wait()
            empty_group(group)
            remove_group(group)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--phase-seconds", type=float, default=5.0)
    parser.add_argument("--more-processes", type=int, default=10,
                        help="the proc reading again with this many more processes in the group")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (it makes a cgroup)")
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} (1/5/15 min), {os.cpu_count()} CPUs")
    with burner_in_group(2.0) as burner:
        target = resolve_cgroup(str(burner.group))
        with httpx.Client() as client:   # start a few handler threads in the group
            client.get(f"{burner.base_url}/healthz")
        targets = {"proc (a cpu-only group)": target}
        root = resolve_cgroup("/sys/fs/cgroup/cpu") if Path("/sys/fs/cgroup/cpu").is_dir() \
            else None
        if root is not None and root.usage_source.kind != "proc":
            targets[f"{root.usage_source.kind} (the cpu root group)"] = root
        reading_costs(targets, args.more_processes)
        overhead(target, burner.base_url, args.requests, args.rounds, args.interval)
    phase_precision(args.phase_seconds)
    print(f"\nload after: {os.getloadavg()[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    run_main(main)
