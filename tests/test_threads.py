"""Who spent the quota: the CPU of a watched group's threads by name, in ``<name>.threads.csv``
and in ``report``. Names fold, ended threads are not lost, the throttled periods' shares follow
the timeline, and against the kernel the shares are the per-thread counters' own deltas."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from client.analysis.threads import (ThreadShare, ThreadsReport, outside_request_path,
                                     thread_shares, threads_report)
from client.data.files import Run
from client.data.threads import (ThreadReading, ThreadsFile, fold_name, read_run_threads,
                                 read_threads)
from client.data.timeline import CgroupSample
from client.render.text import format_threads
from client.run.thread_usage import ThreadUsage
from tests.support import ROOT, http_timing, require_kernel_quota

MS = 1_000_000
TICK_NS = 10 * MS   # USER_HZ 100: the fixture's process figures are in clock ticks


@pytest.mark.parametrize(("name", "folded"), [
    ("GC Thread#0", "GC Thread#N"), ("GC Thread#7", "GC Thread#N"),
    ("http-nio-8080-exec-12", "http-nio-8080-exec-N"), ("C2 CompilerThread0", "C2 CompilerThreadN"),
    ("python3", "python3"), ("python3.11", "python3.11"), ("burner-2", "burner-N"),
    ("pool-1-thread-3", "pool-1-thread-N"), ("8080", "8080"), ("spender", "spender"),
])
def test_numbered_names_fold_into_one(name: str, folded: str) -> None:
    assert fold_name(name) == folded


@pytest.mark.parametrize(("read", "folded"), [
    ("C2 CompilerThre", "C2 CompilerThre"),     # C2 CompilerThread0, 1, ...: one name as read
    ("http-nio-8080-e", "http-nio-8080-e"),     # http-nio-8080-exec-1 .. 200
    ("http-nio-127.0.", "http-nio-127.0."),     # http-nio-127.0.0.1-8080-exec-1 ..
    ("ajp-nio-0.0.0.0", "ajp-nio-0.0.0.0"),     # an address cut, not a counter
    ("pool-1-thread-1", "pool-1-thread-N"),     # pool-1-thread-12, cut through its counter
    ("qtp1234567890-1", "qtp1234567890-N"),     # Jetty's qtp1234567890-17
])
def test_names_the_kernel_cut_at_15_bytes_fold_sensibly(read: str, folded: str) -> None:
    assert len(read) == 15   # comm: 16 bytes with the NUL
    assert fold_name(read) == folded


def test_the_cut_compiler_name_reads_as_the_runtimes_own() -> None:
    shares = (ThreadShare("C2 CompilerThre", 31 * MS, 0.31, 15.0, 0.6),
              ThreadShare("http-nio-8080-e", 52 * MS, 0.52, 10.0, 0.4))
    assert [s.name for s in outside_request_path(shares)] == ["C2 CompilerThre"]


def task(proc: Path, pid: int, tid: int, comm: str, ns: int) -> None:
    where = proc / str(pid) / "task" / str(tid)
    where.mkdir(parents=True, exist_ok=True)
    (where / "comm").write_text(comm + "\n")
    (where / "schedstat").write_text(f"{ns} 0 0\n")


def process(proc: Path, pid: int, comm: str, total_ns: int) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "comm").write_text(comm + "\n")
    fields = ["S", 1, pid, pid, 0, -1, 0, 0, 0, 0, 0, total_ns // TICK_NS, 0, 0, 0]
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n")


def test_ended_threads_and_new_processes_are_not_lost(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import client.run.thread_usage as module
    monkeypatch.setattr(module.os, "sysconf", lambda name: 100)
    proc, group = tmp_path / "proc", tmp_path / "group"
    group.mkdir()
    (group / "cgroup.procs").write_text("10\n")
    process(proc, 10, "java", 100 * MS)
    task(proc, 10, 11, "GC Thread#0", 30 * MS)
    task(proc, 10, 12, "GC Thread#1", 20 * MS)
    task(proc, 10, 13, "exec-1", 50 * MS)
    threads = ThreadUsage([group], proc)
    assert threads.read().cpu_ns == {}   # the first reading is where the run starts
    # GC Thread#1 ends after 10 more ms; exec-1 runs 40; a new process (fork) has used 20
    task(proc, 10, 11, "GC Thread#0", 40 * MS)
    task(proc, 10, 13, "exec-1", 90 * MS)
    (proc / "10" / "task" / "12" / "comm").unlink()
    (proc / "10" / "task" / "12" / "schedstat").unlink()
    (proc / "10" / "task" / "12").rmdir()
    process(proc, 10, "java", 160 * MS)
    (group / "cgroup.procs").write_text("10\n20\n")
    process(proc, 20, "worker", 20 * MS)
    task(proc, 20, 20, "worker", 20 * MS)
    reading = threads.read(5)
    assert reading.cpu_ns == {"GC Thread#N": 10 * MS, "exec-N": 40 * MS,
                              "java (ended threads)": 10 * MS, "worker": 20 * MS}
    assert reading.total_ns == 80 * MS == sum(reading.cpu_ns.values())
    assert threads.problem is None
    threads.close()


def test_the_file_keeps_each_name_until_its_next_row(tmp_path: Path) -> None:
    path = tmp_path / "r.threads.csv"
    out = ThreadsFile(path)
    out.write(ThreadReading(0, 0, {}))
    out.write(ThreadReading(100, 30, {"a, b": 10, "c": 20}))
    out.write(ThreadReading(200, 35, {"a, b": 15, "c": 20}))
    out.not_seen(250, "no permission to read /proc/7/task")
    out.close()
    readings, problems = read_threads(path)
    assert [(r.t_ns, r.total_ns, r.cpu_ns) for r in readings] == [
        (0, 0, {}), (100, 30, {"a, b": 10, "c": 20}), (200, 35, {"a, b": 15, "c": 20})]
    assert problems == ["no permission to read /proc/7/task"]
    assert path.read_text().count(",c,") == 1   # written once, held after


def sample(t_ms: int, usage_ms: int, throttled: int) -> CgroupSample:
    return CgroupSample(t_ms * MS, usage_ms * MS, t_ms // 100, throttled, throttled * MS)


def test_the_throttled_periods_share_follows_the_timeline() -> None:
    """Two spans of 100 ms: in the first nothing was throttled and only the workers ran; in
    the second the group was throttled and the compiler spent 3 of its 4 parts."""
    timeline = [sample(0, 0, 0), sample(100, 40, 0), sample(200, 80, 1)]
    readings = [ThreadReading(0, 0, {}), ThreadReading(100 * MS, 40 * MS, {"exec-N": 40 * MS}),
                ThreadReading(200 * MS, 80 * MS, {"exec-N": 50 * MS, "C2 CompilerThreadN": 30 * MS})]
    shares = {s.name: s for s in thread_shares(readings, timeline)}
    assert shares["exec-N"].cpu_ns == 50 * MS and shares["exec-N"].share == pytest.approx(50 / 80)
    assert shares["exec-N"].share_throttled == pytest.approx(0.25)
    assert shares["C2 CompilerThreadN"].share_throttled == pytest.approx(0.75)


def test_the_report_names_the_runtimes_threads_when_they_spent_the_throttled_periods() -> None:
    shares = (ThreadShare("http-nio-8080-exec-N", 52 * MS, 0.52, 10.0, 0.4),
              ThreadShare("C2 CompilerThreadN", 31 * MS, 0.31, 15.0, 0.6))
    lines = format_threads(ThreadsReport(shares, 83 * MS, 90 * MS, "x.threads.csv"))
    assert lines[0] == ("cpu by thread: http-nio-8080-exec-N 52 % (40 % in the periods "
                        "throttled), C2 CompilerThreadN 31 % (60 % in the periods throttled)")
    assert lines[-1] == ("cpu by thread: threads outside the request path (the runtime's own) "
                         "spent 60 % of the CPU in the periods throttled: C2 CompilerThreadN 60 %")
    quiet = format_threads(ThreadsReport(shares[:1], 52 * MS, 90 * MS, "x.threads.csv"))
    assert not any("outside the request path" in line for line in quiet)


def test_a_run_without_a_threads_file_says_so_in_one_line(tmp_path: Path) -> None:
    run = Run(tmp_path / "old.csv", [], timeline=[sample(0, 0, 0), sample(100, 40, 0)],
              threads=read_run_threads(tmp_path / "old.csv"))
    report = threads_report(run)
    assert report is not None and report.unknown is not None
    assert format_threads(report) == [f"cpu by thread: not known ({report.unknown})"]
    assert str(tmp_path / "old.threads.csv") in report.unknown
    assert threads_report(replace(run, timeline=None)) is None   # no group watched: silent


def test_a_threads_file_that_cannot_be_read_is_one_line_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "bad.threads.csv").write_text("when,who,much\n1,a,2\n")
    threads = read_run_threads(tmp_path / "bad.csv")
    assert threads is not None and threads.readings == [] and threads.error is not None
    report = threads_report(Run(tmp_path / "bad.csv", [], timeline=[sample(0, 0, 0),
                                                                   sample(100, 40, 0)],
                                threads=threads))
    assert report is not None and report.unknown == threads.error
    assert format_threads(report) == [f"cpu by thread: not known ({threads.error})"]
    assert str(tmp_path / "bad.threads.csv") in threads.error and "\n" not in threads.error


def schedstat(pid: int) -> dict[str, int]:
    """CPU per folded name of the process's live threads now, read by the test itself."""
    out: dict[str, int] = {}
    for where in Path(f"/proc/{pid}/task").iterdir():
        name = fold_name((where / "comm").read_text().strip())
        out[name] = out.get(name, 0) + int((where / "schedstat").read_text().split()[0])
    return out


@pytest.mark.root
def test_the_shares_are_the_kernels_per_thread_counters(tmp_path: Path) -> None:
    """A service with named threads in a group of 0.1 CPU: two pool threads burn each request,
    a thread outside the request path burns while one is in flight; the CPU the report gives
    each name is what the threads' schedstat counters, read here before and after, say."""
    require_kernel_quota(1)
    from benchmarks.support import serve_in_group

    server = [sys.executable, str(ROOT / "tests" / "named_threads_server.py")]
    with serve_in_group(server, 0.1) as s:
        before = schedstat(s.pid)
        result = http_timing("--url", s.base_url + "/burn?ms=8", "--iterations", "0",
                             "--requests", "60", "--concurrency", "2", "--cgroup", str(s.group),
                             "--name", "t", "--quiet", "--no-plot", cwd=tmp_path)
        after = schedstat(s.pid)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "raw-data" / "t.threads.csv").exists()
    data = json.loads(http_timing("report", "raw-data/t.csv", "--json", cwd=tmp_path).stdout)
    by_name = {entry["name"]: entry for entry in data["cpu_by_thread"]}
    spent = {name: after[name] - before.get(name, 0) for name in after}
    assert {"burner-N", "spender"} <= by_name.keys()
    for name in ("burner-N", "spender"):   # within one reading's last chunk of work
        assert by_name[name]["cpu_ns"] == pytest.approx(spent[name], abs=3 * MS), name
    total = sum(entry["cpu_ns"] for entry in data["cpu_by_thread"])
    assert sum(by_name[n]["share"] for n in by_name) == pytest.approx(1.0)
    assert by_name["spender"]["share"] == pytest.approx(spent["spender"] / total, abs=0.01)
    assert data["cgroup"]["nr_throttled"] > 0
    assert all(entry["share_throttled"] is not None for entry in data["cpu_by_thread"])
    text = http_timing("report", "raw-data/t.csv", cwd=tmp_path).stdout
    assert "cpu by thread: burner-N " in text or "cpu by thread: spender " in text


def test_the_usage_panel_stacks_the_top_thread_names_and_the_rest_as_other() -> None:
    """Five names over 0.4 s at 0.2 CPU: the panel stacks the four that spent most, then the
    fifth as "other", and each period's stack is what the threads used in it."""
    from client.render.cgroup_plot import draw_usage_panel
    from client.render.figures import pyplot
    from cpuquota.limit import Limit

    spend = {"C2 CompilerThre": 8, "http-nio-8080-e": 6, "GC Thread#N": 3, "VM Thread": 2,
             "Catalina-utilit": 1}   # ms per 100 ms, in that order
    timeline = [sample(t, t // 5, 0) for t in range(0, 401, 10)]
    readings = [ThreadReading(t * MS, t // 5 * MS, {name: t // 100 * ms * MS
                                                     for name, ms in spend.items()})
                for t in range(0, 401, 100)]
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        draw_usage_panel(ax, timeline, Limit(0.2, source="cgroup"), threads=readings)
        stacks = [c.get_label() for c in ax.containers]
        assert stacks == ["by thread (schedstat): C2 CompilerThre", "http-nio-8080-e",
                          "GC Thread#N", "VM Thread", "other"]
        heights = [[bar.get_height() for bar in c] for c in ax.containers]
        assert heights and all(sum(period) == pytest.approx(20.0) for period in zip(*heights))
    finally:
        plt.close(fig)
    plain, ax2 = plt.subplots()
    try:
        draw_usage_panel(ax2, timeline, Limit(0.2, source="cgroup"))   # no threads read: one bar
        assert len(ax2.containers) == 1
    finally:
        plt.close(plain)


# ---- threads the kernel cannot name (issue 55: "python3 100 %") --------------------------------

BURNERS = """
import ctypes, sys, threading, time
named = sys.argv[1] == "named"

def work(k):
    if named:   # the OS name, as pthread_setname_np does for the calling thread
        ctypes.CDLL(None, use_errno=True).prctl(15, f"worker-{k}".encode(), 0, 0, 0)
    while True:   # about a third of a CPU each
        end = time.thread_time() + 0.003
        while time.thread_time() < end:
            pass
        time.sleep(0.006)

for k in range(3):
    threading.Thread(target=work, args=(k,), name=f"worker-{k}", daemon=True).start()
time.sleep(0.1)
print("ready", flush=True)
sys.stdin.read()
"""


def _threads_of_burners(tmp_path: Path, named: bool) -> tuple[ThreadsReport, str]:
    """Three threads of a real Python process burn CPU, named only in Python (threading's
    ``name=``) or at the OS level too; their threads are read six times over 0.5 s into a
    threads file, as a run's are, and judged against the process's own CPU clock. Returns
    the report and the process's name (its ``comm``)."""
    import subprocess
    import time

    from client.analysis.threads import threads_report
    from client.data.threads import read_run_threads, threads_path
    from client.run.process_usage import process_cpu_clock
    from tests.support import stop_by_pid

    proc = subprocess.Popen([sys.executable, "-c", BURNERS, "named" if named else "unnamed"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
        group = tmp_path / "group"   # a stand-in listing the one process, as cgroup.procs does
        group.mkdir()
        (group / "cgroup.procs").write_text(f"{proc.pid}\n")
        usage, out = ThreadUsage([group]), ThreadsFile(threads_path(tmp_path / "r.csv"))
        origin, timeline = time.perf_counter_ns(), []
        for _ in range(6):
            t_ns = time.perf_counter_ns() - origin
            cpu = time.clock_gettime_ns(process_cpu_clock(proc.pid))
            out.write(usage.read(t_ns))
            timeline.append(CgroupSample(t_ns, cpu, 0, 0, 0))
            time.sleep(0.1)
        usage.close()
        out.close()
    finally:
        stop_by_pid(proc)
    run = Run(tmp_path / "r.csv", [], timeline=timeline,
              threads=read_run_threads(tmp_path / "r.csv"))
    report = threads_report(run)
    assert report is not None and report.unknown is None, report
    return report, comm


def test_threads_named_only_in_python_all_read_as_the_process(tmp_path: Path) -> None:
    report, comm = _threads_of_burners(tmp_path, named=False)
    top = report.shares[0]
    assert top.share >= 0.8 and "worker" not in " ".join(s.name for s in report.shares)
    assert report.unnamed is not None and report.unnamed.name == top.name
    assert report.unnamed.threads >= 4   # the main thread and the three workers
    assert top.name == fold_name(comm), (top.name, comm)
    line = format_threads(report)[-1]
    assert line.startswith(f"cpu by thread: {100 * top.share:.0f} % is under {top.name}, the "
                           "process's own name, borne by ")
    assert "prctl(PR_SET_NAME) or pthread_setname_np" in line


def test_threads_named_at_the_os_level_get_no_hint(tmp_path: Path) -> None:
    report, _comm = _threads_of_burners(tmp_path, named=True)
    assert report.shares[0].name == "worker-N" and report.shares[0].share >= 0.8
    assert report.unnamed is None
    assert not any("process's own name" in line for line in format_threads(report))
