"""client.run.cgroup_sampler: readings from fixture files (v1 with cpuacct or its processes, v2),
the sampler thread and its CSV, read_timeline's errors; then the real kernel: the stdlib
burner service in a group with a 0.1 CPU quota, timed sequentially while the sampler runs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import pytest

from client.data.attribution import MIN_OVERLAP_NS, attribute
from client.data.timeline import (TIMELINE_COLUMNS, CgroupSample, TimelineError, open_timeline,
                                  timeline_row,
                                  level_timelines, read_timeline, timeline_columns,
                                  timeline_path)
from client.run.cgroup_sampler import CgroupReader, CgroupSampler, read_sample
from client.run.service_group import ServiceGroup, ServiceGroupError, resolve_cgroup
from cpuquota.cgroupfs import read_cpu_stat
from tests.cgroup_fixtures import (V1_STAT, V2_STAT, ProcFigures, burner_in_group, fake_proc,
                                   mount_line, v1_group, v2_group)
from tests.support import require_kernel_quota


def v1_target(tmp_path: Path, *, cpuacct: bool, pids: dict[int, ProcFigures] | None = None
              ) -> tuple[ServiceGroup, Path, Path]:
    """A v1 group (``cpuacct``: co-mounted, else usage from the processes ``pids``)."""
    cpu = tmp_path / "cpu"
    options = "rw,cpu,cpuacct" if cpuacct else "rw,cpu"
    proc = fake_proc(tmp_path / "proc", [mount_line(32, "/", cpu, "cgroup", options)],
                     stats=pids or {})
    group = v1_group(cpu / "g", procs=sorted(pids or {}),
                     cpuacct_usage=5_000_000 if cpuacct else None)
    return resolve_cgroup(str(group), proc=proc), group, proc


def test_v1_reading_with_cpuacct_follows_the_files(tmp_path: Path) -> None:
    target, group, _proc = v1_target(tmp_path, cpuacct=True)
    with CgroupReader(target) as reader:
        first = reader.read()
        assert (first.usage_ns, first.nr_periods, first.nr_throttled, first.throttled_ns) == \
            (5_000_000, 31, 30, 2_071_000_000)
        (group / "cpu.stat").write_text(V1_STAT.replace("31", "32").replace("2071", "2150"))
        (group / "cpuacct.usage").write_text("7000000\n")
        second = reader.read(since_ns=first.t_ns)
    assert (second.usage_ns, second.nr_periods, second.throttled_ns) == \
        (7_000_000, 32, 2_150_000_000)
    assert second.t_ns < first.t_ns   # since_ns moved the origin forward


def test_v2_usage_and_throttled_usec_in_ns(tmp_path: Path) -> None:
    top = tmp_path / "cg2"
    proc = fake_proc(tmp_path / "proc", [mount_line(29, "/", top, "cgroup2", "rw")])
    group = v2_group(top / "app")
    sample = read_sample(resolve_cgroup(str(group), proc=proc))
    assert (sample.usage_ns, sample.nr_periods, sample.nr_throttled, sample.throttled_ns) == \
        (900_000_000, 31, 30, 2_071_000_000)


def reap(proc: Path, pid: int) -> None:
    """A reaped process: its open stat file reads nothing (the kernel's says ESRCH)."""
    (proc / str(pid) / "stat").write_text("")


def test_usage_without_a_group_counter_comes_from_the_processes(tmp_path: Path) -> None:
    """No cpuacct for the group: each process's own CPU (its thread group's, ended threads
    included) and its reaped children's, in a group and its descendants."""
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    target, group, proc = v1_target(tmp_path, cpuacct=False, pids={10: ProcFigures(100),
                                                                   11: ProcFigures(50, 7)})
    child = v1_group(group / "child", procs=[12])        # descendants count too
    fake_proc(proc, stats={12: ProcFigures(3)})
    assert target.usage_source.kind == "proc"
    with CgroupReader(target) as reader:
        assert reader.read().usage_ns == 160 * tick
        fake_proc(proc, stats={10: ProcFigures(300), 11: ProcFigures(50, 9)})
        (child / "cgroup.procs").write_text("12\n13\n")   # a new process
        fake_proc(proc, stats={13: ProcFigures(5, ppid=11)})
        assert reader.read().usage_ns == (300 + 59 + 3 + 5) * tick
        # 13 ends and 11 reaps it: its CPU moves to 11's children, counted once
        (child / "cgroup.procs").write_text("12\n")
        reap(proc, 13)
        fake_proc(proc, stats={11: ProcFigures(50, 9 + 6)})
        assert reader.read().usage_ns == (300 + 65 + 3) * tick
        # 12 ends, reaped by a parent outside the group: its last reading stays, it is lost
        (child / "cgroup.procs").write_text("")
        reap(proc, 12)
        assert reader.read().usage_ns == (300 + 65 + 3) * tick
        account = reader.processes.account if reader.processes else None
    assert account is not None and account.lost == 1 and account.children_ns == 8 * tick


def test_a_process_that_ignores_sigchld_is_said(tmp_path: Path) -> None:
    target, _group, proc = v1_target(tmp_path, cpuacct=False,
                                     pids={10: ProcFigures(100, ignores_sigchld=True)})
    with CgroupSampler(target, None, interval=0.005) as sampler:
        sampler.start()
    assert "10 ignore SIGCHLD" in str(sampler.usage["unknown"])
    assert sampler.usage["source"] == "proc"


def test_v2_quota_levels_and_pressure_in_each_sample_and_the_csv(tmp_path: Path) -> None:
    """A container's group without the cpu controller (usage, cpu.pressure) below a pod with
    a 0.2 CPU quota below a slice with 0.5: both levels' counters, the pod's first."""
    top = tmp_path / "cg2"
    proc = fake_proc(tmp_path / "proc", [mount_line(29, "/", top, "cgroup2", "rw")])
    slice_ = v2_group(top / "kubepods.slice", "50000 100000", stat=V2_STAT.replace(
        "nr_throttled 30", "nr_throttled 2").replace("throttled_usec 2071000", "throttled_usec 9"))
    pod = v2_group(slice_ / "pod.slice", "20000 100000")
    ctr = v2_group(pod / "ctr.scope", cpu_max=None)
    (ctr / "cpu.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=3000\n"
                                      "full avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n")
    target = resolve_cgroup(str(ctr), proc=proc)
    sample = read_sample(target)
    assert (sample.usage_ns, sample.nr_throttled, sample.throttled_ns) == \
        (5000, 30, 2_071_000_000)          # usage from the container, counters from the pod
    assert (sample.pressure_some_ns, sample.pressure_full_ns) == (3_000_000, 1_000_000)
    assert sample.levels == ((31, 2, 9000),)
    assert sample.quotas == ((20000, 100000), (50000, 100000))   # each level's, the pod's first
    assert sample.at_level(1).throttled_ns == 9000
    assert sample.at_level(1).quotas == ((50000, 100000),)
    csv_path = tmp_path / "run.cgroup.csv"
    with CgroupSampler(target, csv_path, interval=0.005) as sampler:
        sampler.start()
        time.sleep(0.05)
    assert csv_path.read_text().splitlines()[0] == ",".join(timeline_columns(True, 1, True)) == (
        "t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns,pressure_some_ns,pressure_full_ns,"
        "level1_nr_periods,level1_nr_throttled,level1_throttled_ns,quota_us,period_us,"
        "level1_quota_us,level1_period_us")
    assert read_timeline(csv_path) == sampler.samples
    pod_view, slice_view = level_timelines(sampler.samples)
    assert pod_view[0].throttled_ns == 2_071_000_000 and slice_view[0].throttled_ns == 9000


def test_a_quota_changed_mid_run_is_in_the_samples(tmp_path: Path) -> None:
    """The quota files are read with each sample: a resize (v1 cpu.cfs_quota_us written) shows
    in the next sample and in the timeline file; -1 (no quota) reads as None. (The files
    here are written between reads: a reader thread could see one half-written.)"""
    target, group, _proc = v1_target(tmp_path, cpuacct=True)
    with CgroupReader(target) as reader:
        assert reader.reads_quota
        samples = [reader.read()]
        (group / "cpu.cfs_quota_us").write_text("50000\n")
        samples.append(reader.read())
        (group / "cpu.cfs_quota_us").write_text("-1\n")
        samples.append(reader.read())
    assert [s.quotas for s in samples] == [((30000, 100000),), ((50000, 100000),),
                                           ((None, 100000),)]
    csv_path = tmp_path / "run.cgroup.csv"
    with open_timeline(csv_path, timeline_columns(False, 0, True)) as out:
        out.writelines(timeline_row(s) for s in samples)
    assert read_timeline(csv_path) == samples


def test_v2_max_reads_as_no_quota(tmp_path: Path) -> None:
    top = tmp_path / "cg2"
    proc = fake_proc(tmp_path / "proc", [mount_line(29, "/", top, "cgroup2", "rw")])
    group = v2_group(top / "svc", "30000 100000")
    target = resolve_cgroup(str(group), proc=proc)
    with CgroupReader(target) as reader:
        assert reader.read().quotas == ((30000, 100000),)
        (group / "cpu.max").write_text("max 100000\n")
        assert reader.read().quotas == ((None, 100000),)


def test_timelines_without_pressure_or_levels_still_read(tmp_path: Path) -> None:
    old = tmp_path / "old.cgroup.csv"
    old.write_text("t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n1,2,3,4,5\n")
    assert read_timeline(old) == [CgroupSample(1, 2, 3, 4, 5)]
    v1 = tmp_path / "v1.cgroup.csv"       # v1 with an ancestor's quota: no pressure columns
    v1.write_text(",".join(timeline_columns(False, 1)) + "\n1,2,3,4,5,6,7,8\n")
    assert read_timeline(v1) == [CgroupSample(1, 2, 3, 4, 5, levels=((6, 7, 8),))]
    no_full = tmp_path / "nofull.cgroup.csv"
    no_full.write_text(",".join(timeline_columns(True)) + "\n1,2,3,4,5,6,\n")
    assert read_timeline(no_full)[0].pressure_full_ns is None


def test_sampler_writes_a_flushed_csv_and_stops_its_thread(tmp_path: Path) -> None:
    target, group, _proc = v1_target(tmp_path, cpuacct=True)
    csv_path = timeline_path(tmp_path / "raw" / "run-1.csv")
    assert csv_path.name == "run-1.cgroup.csv"
    before = {t.name for t in threading.enumerate()}
    sampler = CgroupSampler(target, csv_path, interval=0.005)
    with sampler:
        sampler.start(time.perf_counter_ns())
        assert sampler.running
        deadline = time.monotonic() + 20
        while len(csv_path.read_text().splitlines()) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        on_disk = read_timeline(csv_path)          # readable while the run goes on
        assert len(on_disk) >= 5
    assert not sampler.running and "cgroup-sampler" not in before
    assert all(t.name != "cgroup-sampler" for t in threading.enumerate())
    samples = sampler.samples
    assert read_timeline(csv_path) == samples
    assert csv_path.read_text().splitlines()[0] == ",".join(TIMELINE_COLUMNS + (
        "quota_us", "period_us"))
    times = [s.t_ns for s in samples]
    assert times == sorted(times) and times[0] >= 0
    assert sampler.stop() == samples          # a second stop is harmless


def test_sampler_keeps_its_samples_when_the_group_goes_away(tmp_path: Path) -> None:
    target, group, _proc = v1_target(tmp_path, cpuacct=True)
    sampler = CgroupSampler(target, None, interval=0.002).start()
    time.sleep(0.05)
    (group / "cpu.stat").write_text("garbage\n")    # what a reader sees of a vanished group
    deadline = time.monotonic() + 10
    while sampler.running and time.monotonic() < deadline:
        time.sleep(0.01)
    kept = sampler.stop()
    assert sampler.error is not None and "stopped sampling" in sampler.error
    assert kept and all(isinstance(s, CgroupSample) for s in kept)


def test_sampler_rejects_a_bad_interval_and_a_vanished_group(tmp_path: Path) -> None:
    target, group, _proc = v1_target(tmp_path, cpuacct=True)
    with pytest.raises(ValueError, match="--cgroup-interval must be > 0"):
        CgroupSampler(target, None, interval=0)
    (group / "cpu.stat").unlink()
    with pytest.raises(ServiceGroupError, match="cannot open .*cpu.stat: No such file"):
        CgroupSampler(target, tmp_path / "x.cgroup.csv").start()
    assert not (tmp_path / "x.cgroup.csv").exists()


@pytest.mark.parametrize("content, expected", [
    (None, "no such file"),
    ("", "not a cgroup timeline"),
    ("seq,latency_ns\n1,2\n", "not a cgroup timeline"),
    ("t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n1,2,3,4\n", "line 2: 4 fields"),
    ("t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n1,2,3,4,x\n", "line 2: invalid"),
    ("t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns,level1_nr_periods\n1,2,3,4,5,6\n",
     "not a cgroup timeline"),
])
def test_read_timeline_errors_are_one_line(tmp_path: Path, content: str | None,
                                           expected: str) -> None:
    path = tmp_path / "x.cgroup.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TimelineError, match=expected) as info:
        read_timeline(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(TimelineError, match="is a directory"):
        read_timeline(tmp_path)
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TimelineError, match="not a text file"):
        read_timeline(path)


# ---- the real kernel -------------------------------------------------------------------------

@pytest.mark.root
def test_real_group_sampled_while_requests_are_timed(tmp_path: Path) -> None:
    """The burner in a 0.1 CPU group (10 ms per 100 ms period, far below the share even a busy
    machine leaves it): requests of 25 ms CPU cannot finish within one period's quota, 1 ms
    requests can. The timeline brackets the requests and is monotonic; its counters lie within
    the group's own cpu.stat read before and after, and hold the exact readings taken around
    each request; attribution gives out no more throttled time than the timeline counted, and
    a throttle the sampler saw end inside a request is in that request."""
    require_kernel_quota()
    with burner_in_group(0.1) as burner:
        by_path = resolve_cgroup(str(burner.group))
        assert resolve_cgroup(f"pid:{burner.pid}").directory == by_path.directory
        burns = [25, 1, 1, 1] * 12
        with httpx.Client(timeout=60) as client:
            client.get(f"{burner.base_url}/healthz")
            requests = [client.build_request("GET", f"{burner.base_url}/burn?ms={ms}")
                        for ms in burns]
            before = read_cpu_stat(by_path.directory, by_path.version)
            run_start = time.perf_counter_ns()
            intervals, exact = [], []
            with CgroupSampler(by_path, tmp_path / "run.cgroup.csv") as sampler:
                sampler.start(run_start)
                for request in requests:
                    first = read_sample(by_path, run_start)
                    start = time.perf_counter_ns()
                    assert client.send(request).status_code == 200
                    end = time.perf_counter_ns()
                    last = read_sample(by_path, run_start)
                    exact.append((last.throttled_ns - first.throttled_ns,
                                  last.nr_throttled - first.nr_throttled))
                    intervals.append((start - run_start, end - run_start))
            after = read_cpu_stat(by_path.directory, by_path.version)
    timeline = sampler.samples
    assert sampler.error is None and read_timeline(tmp_path / "run.cgroup.csv") == timeline
    # the first sample is taken before the first request, the last after the last one
    assert timeline[0].t_ns <= intervals[0][0] and timeline[-1].t_ns >= intervals[-1][1]
    for field in ("t_ns", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns"):
        values = [getattr(s, field) for s in timeline]
        assert values == sorted(values), field
    assert before is not None and after is not None
    kernel = after - before
    assert kernel.nr_throttled > 0 and kernel.throttled_ns > 0, kernel   # the quota bit
    for field in ("nr_periods", "nr_throttled", "throttled_ns"):   # read within the same run
        assert getattr(before, field) <= getattr(timeline[0], field), field
        assert getattr(timeline[-1], field) <= getattr(after, field), field
    # each burn is the burner's own thread CPU: the group's usage holds all of them
    assert timeline[-1].usage_ns - timeline[0].usage_ns >= sum(burns) * 1_000_000
    counted = timeline[-1].throttled_ns - timeline[0].throttled_ns
    # the readings around each request do not overlap and lie within the timeline
    assert sum(ns for ns, _nr in exact) <= counted
    assert sum(nr for _ns, nr in exact) <= timeline[-1].nr_throttled - timeline[0].nr_throttled
    assert any(ns > 0 for ns, _nr in exact), exact
    assert by_path.limit is not None
    marks = attribute(intervals, timeline, period_ns=by_path.limit.period_ns)
    assert len(marks) == len(intervals)
    # attribution shares out the throttled time the timeline counted, and invents none
    assert sum(ns for ns, _nr in marks) <= counted + len(marks)   # + each request's rounding
    # a throttle the sampler saw end between two samples inside a request (the first one past
    # the estimate's noise, MIN_OVERLAP_NS, from its start) is in that request: its end, at
    # least, is put there
    seen = [i for a, b in zip(timeline, timeline[1:]) if b.throttled_ns > a.throttled_ns
            for i, (start, end) in enumerate(intervals)
            if start + MIN_OVERLAP_NS <= a.t_ns and b.t_ns <= end]
    assert seen, "no throttle ended between two samples inside a request"
    for i in seen:
        assert marks[i][0] > 0, (burns[i], exact[i], marks[i])
