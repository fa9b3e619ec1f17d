"""One quota level or two: burn-service in a container's group under a pod's group, as the
kubelet lays them out, timed like the Kubernetes demo's Job.

    sudo .venv/bin/python -m benchmarks.two_quotas [--cpus 0.3] [--runs 4] [--requests 200]
                                                   [--iterations 5000]

A kubelet writes a pod's CPU limit twice: into the container's group and into the pod's group
above it (each ``quota per 100 ms``). Each group has its own period timer, so the two refills
fall at different points of the 100 ms. For each layout (``container``: the quota on the
container's group only; ``pod+container``: on both, the kubelet's) and each run, this makes a
fresh pair of groups (new timers), starts ``burn-service`` in the inner one, sends
``--requests`` sequential ``/cpuBurnFlow?iterations=N`` with ``http-timing`` (one keep-alive
connection, like the Job) and prints one Markdown row: the latency percentiles, each level's
``nr_throttled`` and ``throttled_time`` over the run (the kernel's counters), and the offset
of the pod group's timer from the container group's (when each group's ``nr_periods`` moved,
read every 0.2 ms, median modulo the period). The groups are removed at the end.

Needs Linux, root and a cgroup cpu controller (v1 or v2). Run it on a quiet machine and say how
busy it was: a CPU shared with other work stretches each period's run and shortens its stall.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import final

from benchmarks.support import (
    BIN,
    HTTP_TIMING,
    describe_load,
    free_port,
    http_server,
    run_main,
)
from client.data.files import read_run
from client.data.summary import summarize
from client.run.limiters.base import write_quota
from cpuquota.account import CpuStat
from cpuquota.cgroupfs import locate_cpu_controller, read_cpu_stat
from cpuquota.limit import Limit
from service.cgroup import create_group, empty_group, move_pid, remove_group

LAYOUTS = ("container", "pod+container")
PERIOD_NS = 100_000_000


@contextmanager
def _pod(limit: Limit, layout: str) -> Iterator[tuple[Path, Path, int]]:
    """A pod's group and its container's group inside, with the layout's quotas; (pod,
    container, cgroup version); both removed at the end."""
    version = locate_cpu_controller().version
    pod = create_group(limit)
    container = pod / "container"
    try:
        if version == 2:
            (pod / "cgroup.subtree_control").write_text("+cpu\n")
        container.mkdir()
        write_quota(container, version, limit)
        write_quota(pod, version, limit if layout == "pod+container" else None)
        yield pod, container, version
    finally:
        for group in (container, pod):
            if group.exists():
                empty_group(group)
                remove_group(group)


@final
class _Timers:
    """When each group's ``nr_periods`` moves (its period timer fired), read every 0.2 ms."""

    def __init__(self, groups: Sequence[Path], version: int) -> None:
        self._groups, self._version = list(groups), version
        self.fired: list[list[int]] = [[] for _ in groups]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _periods(self, group: Path) -> int:
        stat = read_cpu_stat(group, self._version)
        return stat.nr_periods if stat is not None else 0

    def _watch(self) -> None:
        last = [self._periods(g) for g in self._groups]
        while not self._stop.is_set():
            for i, group in enumerate(self._groups):
                now = self._periods(group)
                if now != last[i]:
                    self.fired[i].append(time.monotonic_ns())
                    last[i] = now
            time.sleep(0.0002)

    def __enter__(self) -> _Timers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def offset_ms(self) -> float | None:
        """The pod's timer after the container's, in ms modulo the period (None: one level)."""
        if not all(self.fired):
            return None
        pod, container = (statistics.median(t % PERIOD_NS for t in times) for times in self.fired)
        return (pod - container) % PERIOD_NS / 1e6


def _stat(group: Path, version: int) -> CpuStat:
    stat = read_cpu_stat(group, version)
    if stat is None:
        raise SystemExit(f"cannot read {group}'s cpu.stat")
    return stat


def _throttled(before: Sequence[CpuStat], after: Sequence[CpuStat]) -> str:
    return " | ".join(f"{d.nr_throttled} / {d.throttled_ns / 1e6:.0f} ms"
                      for d in (a - b for b, a in zip(before, after)))


def one_run(layout: str, limit: Limit, requests: int, iterations: int) -> str:
    with _pod(limit, layout) as (pod, container, version):
        port = free_port()
        command = [str(BIN / "burn-service"), "--port", str(port), "--log-level", "warning"]
        with http_server(command, port, what="burn-service") as service:
            pid = getattr(service, "pid", None)
            if pid is None:
                raise SystemExit("burn-service: no process id")
            move_pid(container, pid)   # all its threads move with it
            levels = (pod, container)
            before = [_stat(g, version) for g in levels]
            with _Timers(levels, version) as timers, \
                    tempfile.TemporaryDirectory(prefix="two-quotas-") as out:
                subprocess.run([str(HTTP_TIMING), "--url", f"{service.base_url}/cpuBurnFlow",
                                "--iterations", str(iterations), "--requests", str(requests),
                                "--warmup", "10", "--name", "run",
                                "--quiet", "--no-plot"], cwd=out, check=True,
                               stdout=subprocess.DEVNULL)
                run = read_run(Path(out) / "raw-data" / "run.csv")
            after = [_stat(g, version) for g in levels]
    s = summarize(run.records)
    offset = timers.offset_ms()
    return (f"| {layout} | {s.p50_ms:.1f} | {s.p90_ms:.1f} | {s.p99_ms:.1f} | "
            f"{_throttled(before, after)} | "
            f"{'–' if offset is None else f'{offset:.0f} ms'} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", type=float, default=0.3, help="the limit (default 0.3)")
    parser.add_argument("--runs", type=int, default=4, help="runs per layout (default 4)")
    parser.add_argument("--requests", type=int, default=200, help="per run (default 200)")
    parser.add_argument("--iterations", type=int, default=5000,
                        help="of each request's burn (default 5000, the Job's: ~5 ms)")
    args = parser.parse_args(argv)
    limit = Limit(args.cpus)
    print(f"# {limit.cpus:g} CPU ({limit.quota_us} µs per {limit.period_us} µs); "
          f"{describe_load('before')}", file=sys.stderr)
    print("| layout | p50 ms | p90 ms | p99 ms | pod group: throttled | container group: "
          "throttled | pod timer after the container's |")
    print("|---|---|---|---|---|---|---|")
    for layout in LAYOUTS:
        for _ in range(args.runs):
            print(one_run(layout, limit, args.requests, args.iterations), flush=True)
    print(f"# {describe_load('after')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
