"""Test support: real uvicorn servers (in a thread or a subprocess) and CI-aware skips."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from client.run.targets.service import free_port, stop_process

if TYPE_CHECKING:   # imported where a server is run: FastAPI is ~14 s of the v2 guest's
    from starlette.types import ASGIApp   # pytest start (TCG), where every test starts
    from service.config import Settings    # burn-service in a process of its own

__all__ = ["BIN", "GUEST_START_S", "HIERARCHIES", "ROOT", "check_split_by_quota", "free_port", "http_timing",
           "http_timing_here", "in_v2_guest", "require", "require_kernel_quota", "running_service",
           "service_process", "stop_by_pid", "wait_for_rows", "wait_healthy"]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv's bin: burn-service, http-timing, ...


def require(condition: bool, reason: str) -> None:
    """Skip with ``reason`` unless ``condition``; under CI (CI=true) fail instead of skipping."""
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true must run this test, but: {reason}")
    pytest.skip(reason)


def require_kernel_quota(version: int | None = None) -> None:
    """Skip (fail under CI) unless this is Linux, we are root and a cgroup cpu controller is
    mounted (on cgroup ``version`` if given): what ``burn-service --cpus`` and ``cpu-quota``
    need."""
    from cpuquota.cgroupfs import CgroupError, locate_cpu_controller

    require(sys.platform.startswith("linux"), "kernel CPU quotas need Linux cgroups")
    require(os.geteuid() == 0, "creating a cgroup needs root")
    try:
        controller = locate_cpu_controller()
    except CgroupError as exc:
        require(False, f"no cgroup cpu controller: {exc}")
    else:
        require(version is None or controller.version == version,
                f"the cpu controller is on cgroup v{controller.version}, not v{version}")


# A kernel test on both hierarchies: v1 on the host, v2 (marked cgroup2) in the guest that
# tests/test_guest_cgroup2.py boots. The test takes ``cgroup_version`` and passes it to
# ``require_kernel_quota``.
HIERARCHIES = pytest.mark.parametrize("cgroup_version", [
    pytest.param(1, id="v1"), pytest.param(2, id="v2", marks=pytest.mark.cgroup2)])


# A quota'd group's CPU weight in tests (v1 cpu.shares, default 1024; v2 cpu.weight, default
# 100): on a machine busy with other work the group's fair share can fall below its quota, and
# then the quota never bites. A weight is not a limit: the quota works the same at any weight.
TEST_GROUP_SHARES, TEST_GROUP_WEIGHT = 102400, 10000


def favour_group(group: Path) -> None:
    """Raise ``group``'s CPU weight so that its quota, not the machine's load, decides how
    much it runs. The group is the test's own (removed with its service)."""
    for name, value in (("cpu.shares", TEST_GROUP_SHARES), ("cpu.weight", TEST_GROUP_WEIGHT)):
        if (group / name).exists():
            (group / name).write_text(str(value))
            return
    raise AssertionError(f"{group}: neither cpu.shares nor cpu.weight (not a cpu group)")


def one_cpu(group: Path) -> None:
    """Pin every thread in ``group`` to one CPU (the lowest it may use; the threads it starts
    later inherit it). The kernel sums a group's throttled time over the CPUs it
    was throttled on: a service whose idle thread wakes on a second CPU while the quota is
    spent counts that CPU's wait too, more often on a busy machine. On one CPU the throttled
    time is the wall time the group sat throttled, what a one-thread test can judge."""
    cpu = min(os.sched_getaffinity(0))
    for name in ("tasks", "cgroup.threads"):   # v1, v2
        if (group / name).exists():
            for tid in (group / name).read_text().split():
                try:
                    os.sched_setaffinity(int(tid), {cpu})
                except ProcessLookupError:     # a thread that ended meanwhile
                    pass
            return
    raise AssertionError(f"{group}: neither tasks nor cgroup.threads (not a cgroup)")


def stop_by_pid(proc: subprocess.Popen[Any], first: int = signal.SIGTERM,
                grace: float = 20.0) -> None:
    """Stop ``proc`` by its own pid if it still runs, also when a test failed or timed out
    while it ran: ``first`` (SIGTERM: http-timing stops the services it started, as on
    Ctrl-C, and unlike SIGINT it is never ignored by a job started in the background), up to
    ``grace`` s, then SIGKILL; reaped and its pipes closed, so no "subprocess ... is still
    running" (or an unclosed pipe) turns up in a later test."""
    try:
        if proc.poll() is None:
            proc.send_signal(first)
            try:
                proc.communicate(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def wait_healthy(base_url: str, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"service exited with {proc.returncode} before it was healthy")
        try:
            if httpx.get(base_url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{base_url} not healthy after {timeout}s")


def wait_for_rows(path: Path, n: int, timeout: float = 30.0) -> None:
    """Wait until the CSV at ``path`` (a run being written) has more than ``n`` lines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) > n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {n} rows")


@contextmanager
def running_service(settings: Settings | None = None, *, app: ASGIApp | None = None,
                    **overrides: object) -> Iterator[str]:
    """A real uvicorn server in a thread of this process; yields its base URL. It serves
    ``app`` if given (e.g. one built by ``create_app`` with an extra route), else a new app."""
    import uvicorn

    from service.app import create_app
    from service.config import Settings

    port = free_port()
    settings = settings or Settings(port=port, log_level="warning", **overrides)  # type: ignore[arg-type]
    config = uvicorn.Config(app if app is not None else create_app(settings), host="127.0.0.1",
                            port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def service_process(args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                    timeout: float = 30.0) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``burn-service ARGS`` as a real subprocess on a free port; stopped by its pid at the end
    (SIGTERM, then SIGKILL after as long as a start may take, at least 15 s: a service that
    stops under its quota on a slow machine, the v2 guest's TCG, needs it)."""
    port = free_port()
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen([str(BIN / "burn-service"), "--port", str(port),
                             "--log-level", "warning", *args],
                            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, timeout=timeout, proc=proc)
        yield base, proc
    finally:
        stop_process(proc, timeout=max(15.0, timeout))
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def gone(pid: int) -> bool:
    """Whether no process has this pid any more (it was stopped and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def interrupted_after_rows(argv: Sequence[str], cwd: Path, csv_path: Path, rows: int,
                           timeout: float = 60.0) -> tuple[int, str, str]:
    """Run ``argv``, Ctrl-C it once ``csv_path`` has ``rows`` rows; (exit code, out, err).
    The process is stopped by its pid if it does not end."""
    proc = subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_rows(csv_path, rows, timeout=timeout)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop_by_pid(proc)
    return proc.returncode, out, err


def exit_code_and_errors(argv: Sequence[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``http-timing ARGV`` through the console script's ``main`` in this process (a
    subprocess each would take seconds): its exit code and what it wrote on stderr."""
    from client.commands import main

    monkeypatch.chdir(cwd)
    try:
        code: object = main(list(argv))
    except SystemExit as exc:  # argparse's own errors, as the console script would exit
        code = exc.code
    return int(code or 0), capsys.readouterr().err  # type: ignore[call-overload]


def usage_error(argv: Sequence[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> str:
    """``http-timing ARGV`` as a user who made a mistake sees it: exit code 2 and one line on
    stderr, no traceback. Returns that line."""
    code, err = exit_code_and_errors(argv, cwd, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (list(argv), code, err)
    return lines[0]


# How long a test in the v2 guest waits for burn-service (or a new http-timing) to answer
# (seconds). Their imports take 20-60 s of CPU under TCG, and beside other work (a busy CI
# machine) the guest gets half a CPU or less: a start can take minutes. A fixed minute or two
# is one machine's idleness; what the tests judge comes after the start.
GUEST_START_S = 600.0


def in_v2_guest() -> bool:
    """Whether this runs in the cgroup v2 guest (tests/guest.py sets ``THROTTLE_LAB_GUEST``)."""
    return os.environ.get("THROTTLE_LAB_GUEST") == "cgroup2"


def http_timing(*args: str, cwd: Path, timeout: float = 180,
                prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """The ``http-timing`` console script, as a user runs it, in ``cwd`` (after ``prefix``, a
    command that runs it). Past ``timeout`` (or when the test is stopped meanwhile) it gets
    SIGTERM, so the services it started are stopped by their pids too, then SIGKILL
    (``stop_by_pid``); then ``TimeoutExpired``. In the v2 guest it runs in this process
    (:func:`http_timing_here`)."""
    if in_v2_guest():
        return http_timing_here(*args, cwd=cwd)
    argv = [*prefix, str(BIN / "http-timing"), *args]
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop_by_pid(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def http_timing_here(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``http-timing ARGS`` through the console script's own ``main`` in this process, in
    ``cwd``, its output captured: the same code, exit status and output as the script (which
    is ``sys.exit(main())``). For the v2 guest, where every new Python process imports numpy,
    httpx and the client again at TCG's speed (20-50 s each); the
    service it times still runs in its own group, in its own process."""
    from client.commands import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code: object = main(list(args))
            except SystemExit as exc:   # argparse's own errors, as the script would exit
                code = exc.code
    finally:
        os.chdir(before)
    status = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(["http-timing", *args], status, out.getvalue(),
                                       err.getvalue())


def _within_quota(part: dict, cpus: float) -> bool:  # type: ignore[type-arg]
    """Whether a stretch of a run (a ``quotas`` part) used no more than the kernel lets a group
    at ``cpus`` use: a quota at the stretch's start (a change of quota refills it at once) and
    one per period its counters counted (``nr_periods``: every refill is counted), with 15 % for
    what a period may overrun before it is stopped (a tick, the CPUs' local slices; the next
    period pays it back). On a long stretch that is about the quota; on a short one, more."""
    used_ms = part["usage_cpus"] * part["cgroup_duration_s"] * 1e3
    period_ms = part["period_us"] / 1e3
    return bool(used_ms <= cpus * period_ms * (part["cgroup_nr_periods"] + 1) * 1.15)


def check_split_by_quota(parts: list[dict], tight_cpus: float, loose_cpus: float) -> None:  # type: ignore[type-arg]
    """A run that spans a change from ``tight_cpus`` to ``loose_cpus`` (``report --json``'s
    ``quotas``), judged by what the kernel counted in each part's stretch: each part used at most
    its quota allows (:func:`_within_quota`); under the looser one the group either was
    throttled in a smaller share of the periods (a fast machine: the requests fit) or used more
    than the tighter quota allows (a slow one, e.g. the v2 guest, where the requests outgrow both
    and every period is throttled)."""
    tight, loose = parts
    assert _within_quota(tight, tight_cpus) and tight["cgroup_nr_throttled"] > 0, parts
    assert _within_quota(loose, loose_cpus), parts
    assert (loose["cgroup_nr_throttled"] / max(1, loose["cgroup_nr_periods"]) <
            tight["cgroup_nr_throttled"] / tight["cgroup_nr_periods"] or
            loose["usage_cpus"] > tight_cpus * 1.15), parts
