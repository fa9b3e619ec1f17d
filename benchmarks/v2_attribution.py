"""Marks against the kernel on cgroup v2: a pod's quota over a container without one.

    sudo .venv/bin/python -m benchmarks.v2_attribution [--cpus 0.2] [--ms 5] [--requests 100]
                                                       [--concurrency 4]

Run on a cgroup v2 kernel (this machine mounts the cpu controller on v1: boot the guest, see
docs/limits.md, docs/benchmarks.md). It makes the groups a Kubernetes node with the systemd
driver gives a burstable pod, ``kubepods.slice/kubepods-burstable.slice/
kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``, with ``+cpu`` handed down to
the pod's group and no further: the pod's group holds the quota (``cpu.max``), the
container's has no cpu controller at all, as the issue's refusal had it. The stdlib burner
(``benchmarks/burner_server.py``, ``GET /burn?ms=N`` burns N ms of CPU) runs in the container's
group, found the way a user would (``pid:PID``), and its requests are timed sequentially and
with ``--concurrency`` workers while the client samples the pod's ``cpu.stat`` and the
container's ``cpu.pressure`` every 10 ms.

One table, a row per run: the pod's ``throttled_usec`` change read from the file around the
run (the truth), the timeline's change, the throttled time the marks give the requests (their
sum: with concurrency overlapping requests share the blame, so it may exceed the group's;
"covered": the part that overlapped at least one request), how many requests were marked,
and the container's PSI ``some``/``full`` stall against the throttled time. The groups and
the process are removed by path and pid at the end, also on failure.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from benchmarks.support import burner_in, run_main, union
from client.data.attribution import attribute_levels
from client.data.timeline import level_timelines
from client.run.cgroup_sampler import CgroupSampler
from client.run.service_group import ServiceGroup, resolve_cgroup
from cpuquota.cgroupfs import parse_cpu_stat, parse_pressure

ROOT = Path("/sys/fs/cgroup")
UID = "8d1f5a3c_1b2e_4c6d_9e8f_0a1b2c3d4e5f"
POD = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID}.slice"
CONTAINER = f"{POD}/cri-containerd-{'4f2a9c' + '0' * 58}.scope"


@contextmanager
def pod_and_container(cpus: float) -> Iterator[tuple[Path, Path]]:
    """(pod group with the quota, container group without the cpu controller)."""
    if "cpu" not in (ROOT / "cgroup.controllers").read_text().split():
        raise SystemExit(f"{ROOT} is not cgroup v2 with the cpu controller (boot the guest)")
    made: list[Path] = []
    try:
        here = ROOT
        for part in CONTAINER.split("/"):
            if here != ROOT / POD:      # hand +cpu down to the pod's group, not below it
                control = here / "cgroup.subtree_control"
                if "cpu" not in control.read_text().split():
                    control.write_text("+cpu\n")
            here = here / part
            if not here.exists():
                here.mkdir()
                made.append(here)
        (ROOT / POD / "cpu.max").write_text(f"{round(cpus * 100_000)} 100000\n")
        yield ROOT / POD, here
    finally:
        for directory in reversed(made):
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def truth(pod: Path, container: Path) -> tuple[int, int, int | None]:
    """(pod's throttled ns, container's PSI some ns, full ns) from the files, now."""
    stat = parse_cpu_stat((pod / "cpu.stat").read_text(), 2)
    pressure = parse_pressure((container / "cpu.pressure").read_text())
    assert stat is not None
    return stat.throttled_ns, pressure.some_ns, pressure.full_ns


def timed(target: ServiceGroup, url: str, requests: int, workers: int
          ) -> tuple[list[tuple[int, int]], CgroupSampler]:
    """Request spans (ns since the run's start) and the sampler that watched them."""
    spans: list[tuple[int, int]] = []
    start_ns = time.perf_counter_ns()

    def worker(count: int) -> None:
        with httpx.Client(timeout=120) as client:
            for _ in range(count):
                start = time.perf_counter_ns()
                client.get(url).raise_for_status()
                spans.append((start - start_ns, time.perf_counter_ns() - start_ns))

    sampler = CgroupSampler(target, None)
    with sampler:
        sampler.start(start_ns)
        threads = [threading.Thread(target=worker, args=(requests // workers,))
                   for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sorted(spans), sampler


def row(label: str, target: ServiceGroup, pod: Path, container: Path, url: str,
        requests: int, workers: int) -> str:
    before = truth(pod, container)
    spans, sampler = timed(target, url, requests, workers)
    after = truth(pod, container)
    kernel_ms = (after[0] - before[0]) / 1e6
    timeline = sampler.samples
    views = level_timelines(timeline)
    periods = [level.limit.period_ns for level in target.levels]
    marks = attribute_levels(spans, views, periods)
    covered = attribute_levels(union(spans), views, periods)
    marks_ms = sum(m[0] for m in marks) / 1e6
    covered_ms = sum(m[0] for m in covered) / 1e6
    some_ms = (after[1] - before[1]) / 1e6
    full_ms = (after[2] - before[2]) / 1e6 if after[2] is not None and before[2] is not None \
        else float("nan")

    def pct(value: float) -> str:
        return f"{100 * value / kernel_ms:.0f} %" if kernel_ms else "-"

    timeline_ms = (timeline[-1].throttled_ns - timeline[0].throttled_ns) / 1e6
    seconds = (timeline[-1].t_ns - timeline[0].t_ns) / 1e9
    return (f"| {label} | {len(spans)} in {seconds:.1f} s | {kernel_ms:.0f} | "
            f"{timeline_ms:.0f} ({pct(timeline_ms)}) | {marks_ms:.0f} ({pct(marks_ms)}) | "
            f"{covered_ms:.0f} ({pct(covered_ms)}) | {sum(1 for m in marks if m[1])} | "
            f"{some_ms:.0f} ({pct(some_ms)}) | {full_ms:.0f} ({pct(full_ms)}) |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=float, default=0.2)
    parser.add_argument("--ms", type=float, default=5.0, help="CPU ms per request")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (it makes cgroups)")
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with pod_and_container(args.cpus) as (pod, container), burner_in(container) as burner:
        base, pid = burner.base_url, burner.pid
        target = resolve_cgroup(f"pid:{pid}")
        assert target.directory == container and [lv.directory for lv in target.levels] == [pod]
        print(f"pid:{pid} -> {target.group} (no cpu controller: "
              f"{not (container / 'cpu.max').exists()}); quota {args.cpus:g} CPU on "
              f"{target.levels[0].group}\n")
        url = f"{base}/burn?ms={args.ms:g}"
        httpx.get(url, timeout=120)
        print("| run | requests | pod throttled_usec ms | timeline ms | marks sum ms | "
              "covered ms | marked | PSI some ms | PSI full ms |")
        print("|---|---|---|---|---|---|---|---|---|")
        print(row(f"sequential, {args.ms:g} ms CPU each", target, pod, container, url,
                  args.requests, 1))
        print(row(f"concurrency {args.concurrency}", target, pod, container, url,
                  args.requests, args.concurrency))
    print("\n(%: of the pod's throttled_usec change over the run)")
    return 0


if __name__ == "__main__":
    run_main(main)
