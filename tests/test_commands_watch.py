"""http-timing watch (client.commands.watch, client.render.watch): the live table under a real
pty, JSON lines when piped, Ctrl-C and a closed pipe end it cleanly, bad input is one line.
The watched group is real: the stdlib burner in a 0.1 CPU group (far below the share even a
busy machine leaves it, so the quota is what holds it back), kept busy meanwhile."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
from dataclasses import replace
from pathlib import Path
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from rich.console import Console

from client.analysis.cgroup import interval_stats
from client.analysis.threads import top_between
from client.commands.watch import command_watch
from client.render.watch import WatchRow, json_line, watch_table
from client.data.threads import ThreadReading
from client.data.timeline import CgroupSample
from cpuquota.cgroupfs import read_cpu_stat
from cpuquota.limit import Limit
from tests.cgroup_fixtures import BurningGroup, burner_in_group
from tests.support import (BIN, GUEST_START_S, HIERARCHIES, ROOT, http_timing, in_v2_guest,
                           require_kernel_quota, stop_by_pid)

WATCH = [str(BIN / "http-timing"), "watch"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# the runtime each CPU's queue may hold from a quota beyond the period's: one slice (ms)
CARRY_MS = (os.cpu_count() or 1) * int(
    Path("/proc/sys/kernel/sched_cfs_bandwidth_slice_us").read_text()) / 1000 \
    if Path("/proc/sys/kernel/sched_cfs_bandwidth_slice_us").exists() else 10.0
QUOTA_CPUS = 0.1
QUOTA_MS = 10   # per 100 ms period


@contextmanager
def busy_burner(cgroup_version: int | None = None) -> Iterator[BurningGroup]:
    """The burner in a 0.1 CPU group, sent 30 ms burns back to back until the end: each one
    is more than a period's quota."""
    require_kernel_quota(cgroup_version)
    with burner_in_group(QUOTA_CPUS) as burner:
        stop, answered = threading.Event(), threading.Event()

        def load() -> None:
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    client.get(f"{burner.base_url}/burn?ms=30")
                    answered.set()

        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        try:   # the load flows before the test watches (an httpx client takes seconds to
            # make in the v2 guest under TCG; a watch in the same process starts at once)
            assert answered.wait(GUEST_START_S if in_v2_guest() else 30), "no burn answered"
            yield burner
        finally:
            stop.set()
            thread.join(timeout=30)


# ---- rendering (pure) ------------------------------------------------------------------------

def test_table_and_json_line_show_the_interval() -> None:
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(10**9, 190_000_000, 10, 9, 720_000_000), Limit(0.2))
    row = WatchRow("12:00:01", 1.0, stats)
    console = Console(width=140, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/docker/abc", Limit(0.2), [row], stats))
    console.file.close()
    text = console.export_text()
    assert "CPU throttling of /docker/abc" in text and "0.2 CPU (20 ms per 100 ms" in text
    assert re.search(r"12:00:01 .*\b10\b.*\b9\b.*90 %.*720\.0.*0\.190.*95 %", text), text
    assert "since start (1.0 s): 9 of 10 periods throttled (90 %)" in text
    data = json.loads(json_line("/docker/abc", row))
    assert data["nr_throttled"] == 9 and data["quota_share"] == pytest.approx(0.95)
    assert data["group"] == "/docker/abc" and data["throttled_share"] == 0.9
    assert data["quota_group"] is None
    assert data["usage_counter"] is None and data["usage_unknown"] is None


def test_the_top_threads_are_the_names_that_spent_the_interval() -> None:
    before = ThreadReading(0, 50, {"GC Thread#N": 10, "http-nio-8080-exec-N": 40})
    after = ThreadReading(10**9, 150, {"GC Thread#N": 70, "http-nio-8080-exec-N": 70,
                                       "C2 CompilerThre": 10})
    top = top_between(before, after)
    assert top == [("GC Thread#N", 60, 0.6), ("http-nio-8080-exec-N", 30, 0.3),
                   ("C2 CompilerThre", 10, 0.1)]   # what each used in the interval alone
    assert top_between(after, after) == []   # no thread ran: no name
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(10**9, 190_000_000, 10, 9, 720_000_000), Limit(0.2))
    row = WatchRow("12:00:01", 1.0, stats, top_threads=tuple(top))
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/g", Limit(0.2), [row], stats))
    console.file.close()
    assert "GC Thread#N 60 %, http-nio-8080-exec-N 30 %, C2 CompilerThre 10 %" in \
        console.export_text()
    assert json.loads(json_line("/g", row))["top_threads"][0] == {
        "name": "GC Thread#N", "cpu_ms": 0.0, "share": 0.6}
    assert json.loads(json_line("/g", replace(row, top_threads=None)))["top_threads"] is None


def test_a_usage_that_cannot_be_known_is_left_out_with_the_reason() -> None:
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(10**9, 190_000_000, 10, 9, 720_000_000), Limit(0.2))
    why = "process(es) 10 ignore SIGCHLD: a child of theirs ... is counted by no one"
    row = WatchRow("12:00:01", 1.0, replace(stats, usage_cpus=float("nan"), quota_share=None),
                   usage_counter="the CPU clocks of the processes in /g", usage_unknown=why)
    console = Console(width=300, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/g", Limit(0.2), [row], row.stats))
    console.file.close()
    text = " ".join(console.export_text().split())   # the caption wraps at the table's width
    assert f"CPUs used: not known ({why})" in text and "0.190" not in text
    data = json.loads(json_line("/g", row))
    assert data["usage_cpus"] is None and data["usage_unknown"] == why


def test_a_share_of_the_quota_a_short_interval_cannot_support_is_left_out() -> None:
    # 50 ms of CPU in 40 ms: within one 100 ms period the group may spend its whole 20 ms
    # quota and more of the period's, so "125 % of the quota" would be no figure at all
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(40_000_000, 50_000_000, 0, 0, 0), Limit(0.2))
    console = Console(width=300, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/g", Limit(0.2), [WatchRow("12:00:01", 0.04, stats)], stats))
    console.print(watch_table("/g", None, [WatchRow("12:00:01", 1.0, stats)], stats))
    console.file.close()
    text = " ".join(console.export_text().split())
    assert "125 %" not in text and "1.250 │ - │" in text   # the row's CPUs, then no share
    assert "share of the quota: not known, 0.04 s is shorter than one 100 ms period" in text
    assert "(no quota)" in text and "of the quota)" not in text


def test_watch_names_the_ancestor_whose_quota_is_shown() -> None:
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(10**9, 190_000_000, 10, 9, 720_000_000), Limit(0.2))
    row = WatchRow("12:00:01", 1.0, stats)
    console = Console(width=160, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/kubepods/pod1/ctr", Limit(0.2), [row], stats, "/kubepods/pod1"))
    console.file.close()
    text = console.export_text()
    assert "0.2 CPU (20 ms per 100 ms" in text and "on /kubepods/pod1  (Ctrl-C" in text
    data = json.loads(json_line("/kubepods/pod1/ctr", row, "/kubepods/pod1"))
    assert data["quota_group"] == "/kubepods/pod1"


def test_the_quota_in_force_is_read_at_each_interval(tmp_path) -> None:
    """An in-place resize: the sample's quotas say the quota now; the row is judged by it and
    the table says what changed."""
    from client.commands.watch import limit_now
    from client.run.service_group import resolve_cgroup
    from tests.cgroup_fixtures import fake_proc, mount_line, v1_group

    proc = fake_proc(tmp_path / "proc", [mount_line(32, "/", tmp_path / "cpu", "cgroup",
                                                    "rw,cpu,cpuacct")])
    target = resolve_cgroup(str(v1_group(tmp_path / "cpu" / "g", quota_us=20000,
                                         cpuacct_usage=0)), proc=proc)
    before = CgroupSample(0, 0, 0, 0, 0, quotas=((20000, 100000),))
    after = CgroupSample(10**9, 190_000_000, 10, 0, 0, quotas=((50000, 100000),))
    assert limit_now(before, target) == target.limit and target.limit.cpus == 0.2
    now = limit_now(after, target)
    assert now is not None and now.cpus == 0.5 and now.period_ms == 100
    assert limit_now(CgroupSample(0, 0, 0, 0, 0, quotas=((None, 100000),)), target) is None
    assert limit_now(CgroupSample(0, 0, 0, 0, 0), target) == target.limit   # not read
    row = WatchRow("12:00:01", 1.0, interval_stats(before, after, now), now)
    assert json.loads(json_line("/g", row))["quota_cpus"] == 0.5
    console = Console(width=160, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/g", now, [row], row.stats, None,
                              "quota changed at 12:00:01: 0.2 CPU -> 0.5 CPU"))
    console.file.close()
    text = console.export_text()
    assert "0.5 CPU (50 ms per 100 ms" in text and "quota changed at 12:00:01" in text


@pytest.mark.parametrize("width", [80, 100, 120, 200])
@pytest.mark.parametrize("threads", [True, False])
def test_the_table_fits_the_terminal_it_is_in(width: int, threads: bool) -> None:
    """Issue 55: at 80 columns the header wrapped over six lines and the time read 19:17:…"""
    stats = interval_stats(CgroupSample(0, 0, 0, 0, 0),
                           CgroupSample(10**9, 190_000_000, 10, 9, 720_000_000), Limit(0.2))
    top = (("GC Thread#N", 6, 0.6), ("http-nio-8080-exec-N", 3, 0.3),
           ("C2 CompilerThre", 1, 0.1))
    rows = [WatchRow(f"19:17:{second:02d}", 1.0, stats, Limit(0.2),
                     top_threads=top if threads else None) for second in range(40, 43)]
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(watch_table("/sys/fs/cgroup/cpu/throttle-lab/some-group", Limit(0.2), rows,
                              stats, None, "quota changed at 19:17:40: 0.5 CPU -> 0.2 CPU"))
    console.file.close()
    lines = console.export_text().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), "\n".join(lines)
    top_edge = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    under = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    assert under - top_edge - 1 <= 2, "\n".join(lines[top_edge:under + 1])   # the header
    text = "\n".join(lines)
    assert "…" not in text, text   # no word cut short
    for second in range(40, 43):
        assert re.search(rf"^│ 19:17:{second} ", text, re.MULTILINE), text   # whole times
    assert "periods" in text and "throttled" in text and "quota" in text
    # the caption's figures keep their units on their line (it wrapped "2824 / ms")
    caption = " ".join(text[text.rindex("┘") + 1:].split("\n"))
    assert "throttled time 720 ms," in caption and "0.190 CPUs on average" in caption, caption
    if threads:   # every name whole, its share with it (on its line or the next)
        flat = " ".join(text.replace("│", " ").split())
        for name, _ns, share in top:
            assert f"{name} {100 * share:.0f} %" in flat, text


# ---- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["/no/such/group"], "http-timing watch: no such cgroup directory: /no/such/group"),
    (["pid:nope"], "http-timing watch: pid:nope: pid: needs a process id"),
    (["/sys", "--interval", "0"], "argument --interval: must be a number > 0 (got 0)"),
    (["/sys", "--count", "0"], "argument --count: must be an integer >= 1"),
    ([], "the following arguments are required: TARGET"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], expected: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = command_watch(argv)
    except SystemExit as exc:   # argparse's own errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


# ---- the real thing --------------------------------------------------------------------------

@pytest.mark.root
@HIERARCHIES
def test_piped_output_is_one_json_object_per_interval(cgroup_version: int) -> None:
    # the console script on the host; in the v2 guest its main() in this process (a new
    # http-timing process imports for a minute or more there under TCG beside the host's tests)
    with busy_burner(cgroup_version) as burner:
        before = read_cpu_stat(burner.group, cgroup_version)
        started = time.perf_counter()
        out = http_timing("watch", str(burner.group), "--interval", "0.3", "--count", "5",
                          cwd=ROOT, timeout=60)
        took_s = time.perf_counter() - started
        after = read_cpu_stat(burner.group, cgroup_version)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 5
    assert all(line["quota_cpus"] == QUOTA_CPUS and line["group"].endswith(burner.group.name)
               for line in lines)
    # the intervals follow one another on the 0.3 s grid, each read at or after its tick, all
    # within the command's run
    for k, line in enumerate(lines):
        assert line["elapsed_s"] >= 0.3 * (k + 1) - 0.001, line
        if k:
            assert line["interval_s"] == pytest.approx(
                line["elapsed_s"] - lines[k - 1]["elapsed_s"], abs=0.002), (lines[k - 1], line)
    assert lines[-1]["elapsed_s"] <= took_s + 0.001, (lines[-1], took_s)   # + its rounding
    # what it printed is what the kernel counted: within the group's cpu.stat read around it
    assert before is not None and after is not None
    kernel = after - before
    assert 0 < sum(line["nr_throttled"] for line in lines) <= kernel.nr_throttled, lines
    assert sum(line["nr_periods"] for line in lines) <= kernel.nr_periods, lines
    assert 0 < sum(line["throttled_ms"] for line in lines) <= kernel.throttled_ns / 1e6 + 1e-6
    assert all(line["usage_counter"] and line["usage_unknown"] is None for line in lines)
    assert any(line["top_threads"] for line in lines), lines   # who spent it, by name
    for line in lines:   # the biggest spender first, each a share of the threads' CPU then
        # (none in an interval no thread ran in: a tick read late on a busy machine leaves the
        # next one due at once, a millisecond later)
        shares = [top["share"] for top in line["top_threads"]]
        assert shares == sorted(shares, reverse=True) and sum(shares) <= 1.0001, line
        assert all(share > 0 for share in shares), line
    for line in lines:   # each line's shares are its own counters' (what the kernel counted)
        assert line["interval_s"] > 0 and line["usage_cpus"] >= 0, line
        assert line["quota_share"] == pytest.approx(line["usage_cpus"] / QUOTA_CPUS), line
        if line["nr_periods"]:
            assert line["throttled_share"] == pytest.approx(line["nr_throttled"]
                                                            / line["nr_periods"]), line
        else:   # the group did not run in it: no share to give (on a busy machine the load
            # may send nothing for one 0.3 s interval)
            assert line["throttled_share"] is None and line["nr_throttled"] == 0, line
        # the quota holds, by the kernel's own accounting: no more CPU in an interval than 10 ms
        # for each period the kernel counted in it, one period begun before it, and a slice of
        # runtime each CPU may carry. Not asserted in the v2 guest, whose TCG vCPUs beside the
        # host's tests let the group run past its quota
        if not in_v2_guest():
            used_ms = line["usage_cpus"] * line["interval_s"] * 1000
            assert used_ms <= QUOTA_MS * (line["nr_periods"] + 1) + CARRY_MS, line


@pytest.mark.root
def test_a_group_with_no_quota_gets_no_throttling_claim_from_watch_record_or_advise(
        tmp_path: Path) -> None:
    """A real v1 group with no quota on it or above (as exclusive CPUs under the static CPU
    manager), burning CPU: watch, record and advise --passive on the recording each say "no
    CPU quota: throttling cannot happen here" and give no figure of throttling (null, not 0),
    while the CPU used is there."""
    from tests.agent_support import quota_groups

    with quota_groups("watch-free", 1, quota_us=-1) as (free,):
        burner = subprocess.Popen(free.join_command("sh -c 'while :; do :; done'"))
        try:
            watched = http_timing("watch", str(free.cpu), "--interval", "0.3", "--count", "3",
                                  cwd=tmp_path, timeout=60)
            recorded = http_timing("record", str(free.cpu), "--duration", "1.5", "--name", "t",
                                   "--interval", "0.05", cwd=tmp_path, timeout=60)
        finally:
            burner.kill()
            burner.wait()
        assert free.cpu_stat()["nr_periods"] == 0   # the kernel counted nothing either
    said = "no CPU quota: throttling cannot happen here"
    assert watched.returncode == 0 and said in watched.stderr, watched.stderr
    assert len(watched.stderr.strip().splitlines()) == 1
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert line["quota_cpus"] is None and line["quota_group"] is None, line
        assert (line["nr_periods"], line["nr_throttled"], line["throttled_ms"],
                line["throttled_share"]) == (None, None, None, None), line
    assert sum(line["usage_cpus"] for line in lines) > 0   # the burner ran
    assert recorded.returncode == 0 and said in recorded.stderr, recorded.stderr
    timeline = next(tmp_path.rglob("t.cgroup.csv"))
    advised = http_timing("advise", "--passive", "--timeline", str(timeline), "--p99", "10",
                          cwd=tmp_path, timeout=120)
    assert advised.returncode == 0, advised.stderr
    (head,) = [line for line in advised.stdout.splitlines() if line.startswith("recorded:")]
    assert head.startswith(f"recorded: {said}") and "throttled" not in head
    answer = json.loads(http_timing("advise", "--passive", "--timeline", str(timeline),
                                    "--p99", "10", "--json", cwd=tmp_path, timeout=120).stdout)
    assert (answer["recorded"]["periods_throttled"], answer["recorded"]["throttled_ms"]) == \
        (None, None)


@pytest.mark.root
def test_ctrl_c_and_a_closed_pipe_end_it_cleanly() -> None:
    with busy_burner() as burner:
        proc = subprocess.Popen([*WATCH, f"pid:{burner.pid}", "--interval", "0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            first = json.loads(proc.stdout.readline())
            proc.send_signal(signal.SIGINT)
            rest, err = proc.communicate(timeout=30)
        finally:
            stop_by_pid(proc)
        assert proc.returncode == 0 and "Traceback" not in err and err == "", err
        assert all(json.loads(line) for line in rest.splitlines())
        assert first["quota_cpus"] == QUOTA_CPUS
        closed = subprocess.Popen([*WATCH, str(burner.group), "--interval", "0.05"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        try:
            assert closed.stdout is not None and closed.stderr is not None
            closed.stdout.readline()
            closed.stdout.close()             # like `| head -1`
            code = closed.wait(timeout=30)
            err = closed.stderr.read().decode()
        finally:
            stop_by_pid(closed)
    assert code == 0 and err == "", err


def _read_until(fd: int, pattern: re.Pattern[str], timeout: float) -> str:
    """Read the pty until ``pattern`` is in its text (ANSI escapes removed) or ``timeout``."""
    chunks: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:   # EIO: the other side is closed
                break
            if not data:
                break
            chunks.append(data.decode(errors="replace"))
            if pattern.search(ANSI.sub("", "".join(chunks))):
                break
    return ANSI.sub("", "".join(chunks))


@pytest.mark.root
def test_terminal_shows_a_live_table_and_ctrl_c_exits_0() -> None:
    with busy_burner() as burner:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        proc = subprocess.Popen([*WATCH, str(burner.group), "--interval", "0.25"],
                                stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                                env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "140"})
        os.close(slave)
        try:
            # the fourth refresh (or a later one) shows the totals over a second or more
            screen = _read_until(master, re.compile(r"since start \([1-9][0-9]*\.[0-9] s\)"),
                                 timeout=30)
            proc.send_signal(signal.SIGINT)
            screen += _read_until(master, re.compile(r"(?!)"), timeout=5)
            code = proc.wait(timeout=30)
        finally:
            stop_by_pid(proc)
            os.close(master)
    assert code == 0, screen
    assert "Traceback" not in screen and "KeyboardInterrupt" not in screen
    assert f"CPU throttling of /{burner.group.name}" in screen
    assert "quota 0.1 CPU (10 ms per 100 ms period)" in screen
    for header in ("periods", "periods throttled", "throttled time ms", "CPUs used",
                   "% of quota"):
        assert header in screen
    rows = re.findall(r"\d\d:\d\d:\d\d\s+│?\s*(\d+)\s+│?\s*(\d+)", screen)
    assert rows and sum(int(throttled) for _periods, throttled in rows) > 0, screen
