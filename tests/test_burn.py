"""service.burn: the CPU burn loop, its calibration, its checkpoints and its numbers.

A burn is judged by what this process's own clocks counted around it, never by one machine's
speed; that T threads burn at once is judged by what each thread's own CPU clock counted,
which another busy process cannot break. What an iteration costs against the calibration's
promise is ``benchmarks/burn_calibration.py``; the speed-up in wall time, which needs idle
CPUs, is ``benchmarks/parallel_burn.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.burn import (CHECK_EVERY, DEFAULT_ITERATIONS, Calibration, Costs, burn,
                          burn_parallel, hash_burn, measure, measured)

# a made-up machine whose loop pass costs 0.4 us and a byte of SHA-256 0.5 ns
FAKE = Costs(loop_ns=400.0, byte_ns=0.5, cpu_ns=12_000_000, wall_ns=30_000_000)


def test_checkpoints_come_every_chunk_and_after_the_last() -> None:
    calls: list[int] = []
    result = burn(2 * CHECK_EVERY + 5, lambda: calls.append(1))
    assert result.iterations == 2 * CHECK_EVERY + 5
    assert len(calls) == 3  # two full chunks and the rest
    assert burn(0, lambda: calls.append(1)).iterations == 0 and len(calls) == 3


def test_cpu_and_wall_are_measured() -> None:
    result = burn(DEFAULT_ITERATIONS)
    assert result.cpu_ns > 0 and result.wall_ns > 0
    # a paused loop: wall time includes the pause, CPU time does not
    paused = burn(CHECK_EVERY, lambda: time.sleep(0.02))
    assert paused.wall_ns >= 20_000_000 > paused.cpu_ns


def test_negative_iterations_are_refused() -> None:
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        burn(-1)
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        hash_burn(-1)


def test_a_calibration_turns_iterations_into_passes_of_the_loop() -> None:
    one_us = Calibration(FAKE)
    assert one_us.calibrated and one_us.iteration_ns == 1000
    assert one_us.loops_per_iteration == 2.5 and one_us.loops(5000) == 12500
    assert one_us.bytes_per_iteration == 2000 and one_us.bytes_per_loop == 800
    assert Calibration(FAKE, 0.3).loops(5000) == 3750      # a fraction of a pass per iteration
    raw = Calibration(FAKE, None)
    assert not raw.calibrated and raw.loops(5000) == 5000 and raw.iteration_ns == 400
    assert raw.bytes_per_iteration == 800
    described = one_us.describe()
    assert described["loops_per_iteration"] == 2.5 and described["iteration_us"] == 1.0
    assert described["loop_us"] == 0.4 and described["calibrated"] is True
    line = one_us.startup_line()
    assert "one iteration = 1 us of CPU (2.5 passes of the loop at 0.4 us;" in line
    assert "the default burn of 5000 ~ 5 ms of CPU" in line
    assert "uncalibrated" in raw.startup_line()
    # the passes a burn makes: checkpoints count them (every CHECK_EVERY passes)
    calls: list[int] = []
    burn(2 * CHECK_EVERY, lambda: calls.append(1), calibration=Calibration(FAKE, 0.2))
    assert len(calls) == 1   # 512 iterations of half a pass: one chunk of 256 passes


@pytest.mark.parametrize("iteration_us", [0.3, 1.0, 3.0])
def test_a_calibrated_burn_counts_its_cpu_on_this_threads_clock(iteration_us: float) -> None:
    """2000 iterations at ``iteration_us``: as many passes as the calibration says, and the
    CPU each burn reports is this thread's clock read around it (more than nothing, no more
    than the clock counted). How close that CPU is to 2000 x iteration_us moves with the
    machine: ``benchmarks/burn_calibration.py``."""
    cal = Calibration(measure(), iteration_us)
    assert cal.loops(2000) == pytest.approx(2000 * iteration_us * 1000 / cal.costs.loop_ns,
                                            abs=1)
    for work in (burn, hash_burn):
        start = time.thread_time_ns()
        result = work(2000, calibration=cal)
        spent = time.thread_time_ns() - start
        assert result.iterations == 2000 and result.threads == 1
        assert 0 < result.cpu_ns <= spent, (work.__name__, result, spent)
        assert result.cpu_ns <= result.wall_ns + 1_000_000, result


def test_measuring_is_bounded_and_counts_cpu_time_not_wall_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    costs = measure()
    assert costs.loop_ns > 0 and costs.byte_ns > 0 and 0 < costs.cpu_ns
    # bounded: past max_seconds of wall time, the best of two rounds (after the warm-up pass);
    # counted by the real burn's calls, whatever a round costs on this machine
    import service.burn as burn_module

    calls: list[int] = []

    def counted(passes: int) -> object:
        calls.append(passes)
        return burn(passes)

    monkeypatch.setattr(burn_module, "burn", counted)
    quick = measure(rounds=1000, max_seconds=0.0)
    assert len(calls) == 1 + 2, calls
    calls.clear()
    measure(rounds=3, max_seconds=3600.0)
    assert len(calls) == 1 + 3, calls   # not past the deadline: every round
    monkeypatch.undo()
    # one thread: CPU within its wall time, to within the two clocks' own difference (the
    # scheduler's CPU clock and the monotonic clock are read apart; they were 9 ns apart once)
    assert 0 < quick.cpu_ns <= quick.wall_ns + 1_000_000, quick
    # paused (as under a quota or the throttle): the same cost per pass, more wall time
    stop = threading.Event()

    def hog_the_gil() -> None:   # takes this process's CPU away in slices (holds the GIL)
        while not stop.is_set():
            sum(range(200_000))
            time.sleep(0)

    hog = threading.Thread(target=hog_the_gil, daemon=True)
    hog.start()
    try:
        paused = measure()
    finally:
        stop.set()
        hog.join()
    # measured on this thread's CPU clock: the other thread's slices are wall time, not CPU
    # (what a pass costs paused against not, and what a bounded measurement costs:
    # benchmarks/burn_calibration.py)
    assert paused.wall_ns > paused.cpu_ns and paused.loop_ns > 0


def passes_of_a_python_thread_during(work: Callable[[], object]) -> int:
    """Run ``work`` on this thread while another thread counts passes of a Python loop, with a
    switch interval no call here outlasts: the GIL changes hands only where a thread lets it
    go (the other thread at each of its short waits, ``work`` only if it releases it). The
    other thread's passes while ``work`` ran."""
    stop, started = threading.Event(), threading.Event()
    passes = [0]

    def count() -> None:
        started.set()
        while not stop.is_set():
            passes[0] += 1
            stop.wait(0.0001)   # lets the GIL go: this thread never holds it long

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    other = threading.Thread(target=count, daemon=True)
    try:
        other.start()
        started.wait()
        before = passes[0]
        work()
        during = passes[0] - before
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
    return during


def test_the_c_burn_lets_another_thread_run_python_while_it_burns() -> None:
    """The parallel burn's threads really burn at once: the C burn releases the GIL, so a
    Python thread beside one long hash runs while it hashes; a C call that keeps the GIL (the
    control) leaves it exactly nothing, by the GIL's own rule. The other thread is runnable
    all along the hash, which a busy machine slows as much as it delays the thread; how much
    CPU it gets beside the hash is ``benchmarks/parallel_burn.py``."""
    cal = Calibration(measured())
    iterations = 40_000   # 40 ms of CPU in one hashlib call (check_every: all of it at once)
    hashing = [passes_of_a_python_thread_during(
        lambda: hash_burn(iterations, check_every=10**9, calibration=cal)) for _ in range(3)]
    held = [passes_of_a_python_thread_during(lambda: sum(range(2_000_000))) for _ in range(3)]
    assert held == [0, 0, 0], (hashing, held)
    assert max(hashing) > 0, (hashing, held)


def test_a_parallel_burn_burns_its_iterations_on_each_of_its_threads() -> None:
    """``threads=T``: this thread and T-1 tasks of the pool, each hashing the iterations'
    bytes (as many chunks as a one-thread burn) on its own clock, and the sum is the burn's
    ``cpu_ns``: no less than what the threads' own clocks counted from their first chunk to
    their last. Which pool thread runs which task is the pool's (on a busy machine one worker
    may take both before the second has started). What three burns' CPU is against one's
    moves with the machine (two vCPUs that are siblings of a host core each pay more a byte):
    not asserted."""
    from concurrent.futures import ThreadPoolExecutor

    cal = Calibration(measured())
    chunks: dict[int, int] = {}   # thread -> checkpoints it called (one per chunk hashed)
    clocks: dict[int, list[int]] = {}   # thread -> its CPU clock at each checkpoint
    lock = threading.Lock()

    def note() -> None:
        cpu = time.thread_time_ns()
        with lock:
            chunks[threading.get_ident()] = chunks.get(threading.get_ident(), 0) + 1
            clocks.setdefault(threading.get_ident(), []).append(cpu)

    with ThreadPoolExecutor(max_workers=3) as pool:
        one = burn_parallel(20000, 1, pool.submit, note, calibration=cal)
        alone = dict(chunks)
        chunks.clear()
        clocks.clear()
        three = burn_parallel(20000, 3, pool.submit, note, note, calibration=cal)
        with pytest.raises(ValueError, match="threads must be >= 1"):
            burn_parallel(1, 0, pool.submit)
    assert one.threads == 1 and three.threads == 3 and three.iterations == 20000
    main = threading.get_ident()
    assert list(alone) == [main] and alone[main] > 1
    # this thread one burn's chunks, the pool's threads two more between them
    per_burn = alone[main]
    assert chunks[main] == per_burn, (chunks, alone)
    assert sum(chunks.values()) == 3 * per_burn, (chunks, alone)
    assert all(n % per_burn == 0 for n in chunks.values()) and 2 <= len(chunks) <= 3, chunks
    # the threads' own clocks, first chunk to last, are inside the burn's CPU
    counted = sum(ticks[-1] - ticks[0] for ticks in clocks.values())
    assert 0 < counted <= three.cpu_ns, (counted, three)
    assert one.cpu_ns > 0


def test_the_threads_of_a_parallel_burn_are_busy_at_the_same_time() -> None:
    """``threads=2``: the helper's work is not queued behind this thread's: each thread's
    first and last chunk bound its busy span (wall clock, read at each checkpoint), the two
    spans overlap, each thread hashed the same chunks and its own CPU clock counted its part.
    How much faster that is in wall time needs two idle CPUs (``benchmarks/parallel_burn.py``)."""
    from concurrent.futures import ThreadPoolExecutor

    cal = Calibration(measured())
    spans: dict[int, list[int]] = {}   # thread -> [first, last checkpoint ns, chunks, cpu ns]
    lock = threading.Lock()

    def note() -> None:
        now, cpu = time.perf_counter_ns(), time.thread_time_ns()
        with lock:
            span = spans.setdefault(threading.get_ident(), [now, now, 0, cpu])
            span[1], span[2] = now, span[2] + 1
            span.append(cpu)

    with ThreadPoolExecutor(max_workers=1) as pool:
        result = burn_parallel(100_000, 2, pool.submit, note, note, calibration=cal)
    assert len(spans) == 2, spans.keys()
    (first0, last0, chunks0, *cpu0), (first1, last1, chunks1, *cpu1) = spans.values()
    assert min(last0, last1) - max(first0, first1) > 0   # both busy at once
    assert chunks0 == chunks1 > 2
    own = [cpu0[-1] - cpu0[0], cpu1[-1] - cpu1[0]]   # first checkpoint to last, per thread
    assert all(0 < ns <= result.cpu_ns for ns in own), (own, result)


# -- the service: its flags, environment, /limits, /metrics and startup line -------------------

def test_the_calibration_options_come_from_flags_and_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from service.cli import parse_settings

    assert (parse_settings([]).iteration_us, parse_settings([]).calibrate) == (1.0, True)
    assert parse_settings(["--iteration-us", "3"]).iteration_us == 3
    assert parse_settings(["--no-calibrate"]).calibrate is False
    monkeypatch.setenv("BURN_SERVICE_ITERATION_US", "0.5")
    assert parse_settings([]).iteration_us == 0.5
    monkeypatch.setenv("BURN_SERVICE_ITERATION_US", "")
    monkeypatch.setenv("BURN_SERVICE_CALIBRATE", "false")
    assert parse_settings([]).calibrate is False
    assert parse_settings(["--calibrate"]).calibrate is True   # the flag wins


@pytest.mark.parametrize(("argv", "message"), [
    (["--iteration-us", "0"], "--iteration-us must be in [0.01, 1000]"),
    (["--iteration-us", "fast"], "invalid float value"),
    (["--iteration-us", "nan"], "--iteration-us must be a finite number"),
    (["--no-calibrate", "--iteration-us", "2"], "--iteration-us 2 needs the calibration"),
])
def test_bad_calibration_options_give_one_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import parse_settings

    with pytest.raises(SystemExit) as exit_info:
        parse_settings(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert message in err.strip().splitlines()[-1]


@pytest.mark.parametrize("flags", [["--iteration-us", "3"], ["--no-calibrate"]])
def test_the_running_service_says_what_an_iteration_costs_and_burns_that(
        flags: list[str]) -> None:
    """A real burn-service: the startup line, ``/limits``, ``/metrics``, and five burns of 5000
    iterations, each with its CPU in Server-Timing, which the kernel's count of the process's
    CPU over the five holds. How close a burn's CPU is to the promise moves with the machine
    (``benchmarks/burn_calibration.py``, ``benchmarks/kernel_quota.py``'s burn CPU column)."""
    import re

    from tests.support import service_process

    with service_process(["--log-level", "info", *flags]) as (base, proc):
        said, metrics, burns_s, process_s, log = _burn_five_times(base, proc)
    gauge = re.search(r"^throttle_lab_burn_iteration_cpu_seconds (\S+)$", metrics, re.M)
    loops = re.search(r"^throttle_lab_burn_loops_per_iteration (\S+)$", metrics, re.M)
    assert gauge is not None and loops is not None
    assert float(gauge.group(1)) * 1e6 == pytest.approx(said["iteration_us"], rel=1e-3)
    assert float(loops.group(1)) == pytest.approx(said["loops_per_iteration"], rel=1e-3)
    line = next(line for line in log.splitlines() if "burn: one iteration = " in line)
    if "--no-calibrate" in flags:
        assert said["calibrated"] is False and said["loops_per_iteration"] == 1
        assert "uncalibrated (--no-calibrate)" in line
    else:
        assert said["calibrated"] is True and said["iteration_us"] == 3
        assert "one iteration = 3 us of CPU" in line
    # each burn said its CPU; the kernel counted at least that for the process (in clock ticks)
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    assert len(burns_s) == 5 and all(b > 0 for b in burns_s), burns_s
    assert sum(burns_s) <= process_s + 2 * tick_s, (burns_s, process_s)


def process_cpu_s(pid: int) -> float:
    """The kernel's count of a process's CPU (utime + stime of /proc/PID/stat), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _burn_five_times(base: str, proc: subprocess.Popen[bytes]
                     ) -> tuple[dict[str, Any], str, list[float], float, str]:
    """/limits' burn section, /metrics, the CPU each of five burns of 5000 iterations said
    (Server-Timing), the process's CPU over the five as the kernel counted it, and the
    service's log after a SIGTERM."""
    import re
    import signal

    import httpx

    said = httpx.get(base + "/limits").json()["burn"]
    metrics = httpx.get(base + "/metrics").text
    burns_s = []
    with httpx.Client(base_url=base) as client:
        before = process_cpu_s(proc.pid)
        for _ in range(5):
            timing = client.get("/cpuBurnFlow", params={"iterations": 5000}).headers
            found = re.search(r"cpu;dur=([\d.]+)", timing["server-timing"])
            assert found is not None
            burns_s.append(float(found.group(1)) / 1000)
        process_s = process_cpu_s(proc.pid) - before
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)
    assert proc.stderr is not None
    return said, metrics, burns_s, process_s, proc.stderr.read().decode()
