"""A real cgroup v2 kernel for the tests: boot Debian's kernel under qemu (virtme-ng's ``vng``)
and run the tests marked ``cgroup2`` inside, with this checkout and its venv.

The guest sees the host's file system read-only (writable overlays on /tmp, /var, ...) and
mounts cgroup2 at /sys/fs/cgroup with the root's ``cgroup.subtree_control`` empty. One host
directory is shared read-write (``vng --rwdir``): pytest's junit XML, its output and its exit
status come back through it. KVM does not work nested here, so the guest runs under TCG
(~15x slower): the tests inside judge counters and ratios, never milliseconds.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import BIN, ROOT

__all__ = ["ALONE_NICE", "EARLY", "EARLY_NICE", "START_NICE", "STARTED_ENV", "LATE", "SUMMARY", "FILES_ENV", "boot_early", "cpu_times", "spare_cpus", "GUEST_ENV", "SELECT_ENV", "GUEST_TEST", "GuestRun", "GuestSession", "guest_kernel",
           "guest_test_files", "missing_for_guest", "precompile", "run_guest_pytest", "start_early",
           "stop_early", "summary_lines"]

GUEST_ENV = "THROTTLE_LAB_GUEST"   # tests/conftest.py: "cgroup2" selects the marked tests
GUEST_TEST = "test_cgroup2_tests_pass_in_a_v2_guest"   # tests/test_guest_cgroup2.py
# The guest's priority once it has the machine (the host's tests are done, or it runs alone):
# its tests time things inside a quota on two vCPUs emulated by TCG, and another process on the
# machine (a build, a busy loop) can take the vCPUs' CPU away mid-request, so that a burn the
# guest's kernel never throttled still waits. The guest is the test's own machine: like
# tests.support.shield_from_neighbours for a group on the host, it gets a higher weight
# (nice -10: 9548 against nice 0's 1024; not the quotas inside it, which are the kernel's).
ALONE_NICE = -10
# the guest started at collection time, niced, to run beside the host's tests (start_early)
EARLY: pytest.StashKey[GuestSession] = pytest.StashKey()
# The early guest's priority while it boots and its pytest starts (imports and collection at
# TCG's speed, no test of its own timing anything yet), and once its tests run. At nice 19 from
# the boot, its start would share the busiest part of the host's run at a weight of 15 against
# 1024, and its tests would begin late; at nice 0 its boot, pytest's start and collection take
# under a minute (docs/benchmarks.md, "The cgroup v2 guest").
START_NICE = 0
EARLY_NICE = 19
# written by the guest's pytest (tests/conftest.py) once its tests are collected: the host then
# renices the guest to EARLY_NICE
STARTED_ENV = "THROTTLE_LAB_GUEST_STARTED"
# from its boot: beside a busy machine the niced guest gets little CPU until the host's tests
# are done (then it runs at ALONE_NICE), so the host test waits for it up to this deadline
EARLY_TIMEOUT_S = float(os.environ.get("THROTTLE_LAB_GUEST_EARLY_TIMEOUT", "3600"))
# only these test files in the guest (space-separated, relative to the checkout): one file's
# guest tests take minutes instead of the whole ~20 (docs/developing.md)
FILES_ENV = "THROTTLE_LAB_GUEST_FILES"
# pytest's -k in the guest (THROTTLE_LAB_GUEST_K="usage and request")
SELECT_ENV = "THROTTLE_LAB_GUEST_K"
# a test running this long in the guest gets every thread's stack written into its output (and
# goes on): pytest's faulthandler_timeout. Off (0) unless asked for: it reads the other threads'
# frames while they run, and it can crash the guest's pytest (SIGSEGV) when the test's own
# thread is inside C code (matplotlib drawing a picture). A test that hangs still says where:
# pytest-timeout (--timeout, the signal method) prints its stack.
STACKS_AFTER_S = int(os.environ.get("THROTTLE_LAB_GUEST_STACKS_AFTER", "0"))
MARK = re.compile(r"pytest\.mark\.cgroup2\b|^@HIERARCHIES\b", re.M)   # tests/support.py


def guest_kernel(boot: Path = Path("/boot")) -> Path | None:
    """The newest ``vmlinuz-<version>`` in /boot (linux-image-amd64's), or None."""
    def version(path: Path) -> list[int]:
        return [int(n) for n in re.findall(r"\d+", path.name)]
    kernels = sorted(boot.glob("vmlinuz-*"), key=version)
    return kernels[-1] if kernels else None


def missing_for_guest() -> str | None:
    """Why a guest cannot boot here (None: it can): vng, qemu, a kernel, root."""
    if not (BIN / "vng").exists():
        return "virtme-ng (vng) is not installed in the venv (pip install -e '.[test]')"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (scripts/install-system-deps.sh)"
    if shutil.which("busybox") is None:
        return "busybox is not installed (scripts/install-system-deps.sh: busybox-static)"
    kernel = guest_kernel()
    if kernel is None:
        return "no kernel in /boot (scripts/install-system-deps.sh: linux-image-amd64)"
    if not os.access(kernel, os.R_OK):
        return f"{kernel} is not readable (the guest needs root here)"
    return None


def guest_test_files(tests: Path = ROOT / "tests", chosen: str | None = None) -> list[Path]:
    """The test files with a ``cgroup2`` mark (or ``HIERARCHIES``, whose v2 half has it): only
    they are collected in the guest (imports are ~15x slower there). ``chosen`` (default: the
    environment's ``THROTTLE_LAB_GUEST_FILES``): only those of them, e.g.
    ``tests/test_usage_any_shape.py``; a named file that is not there or has no ``cgroup2``
    test is an error that says so."""
    marked = sorted(p for p in tests.glob("test_*.py") if MARK.search(p.read_text()))
    chosen = os.environ.get(FILES_ENV, "") if chosen is None else chosen
    if not chosen.strip():
        return marked
    picked: list[Path] = []
    for name in chosen.split():
        path = (ROOT / name).resolve() if not Path(name).is_absolute() else Path(name)
        if path not in marked:
            raise ValueError(f"{FILES_ENV}: {name} is not a test file with a cgroup2 test "
                             f"(those are: {' '.join(str(p.relative_to(ROOT)) for p in marked)})")
        picked.append(path)
    return picked


# the checkout's packages whose bytecode the guest reads (precompile)
PACKAGES = ("cpuquota", "service", "client", "tests")


def precompile(files: list[Path]) -> None:
    """Write the checkout's bytecode before the guest boots. The guest sees the tree read-only,
    so without it each of its Python processes (pytest, every burn-service and http-timing a
    test starts) compiles every project module again, and pytest rewrites each test module
    again, at TCG's speed; the venv's packages have theirs from pip already. The bytecode goes
    where Python itself puts it (``__pycache__``, ignored by git), also where the environment
    says not to write it (``PYTHONDONTWRITEBYTECODE``): Python checks each file's source
    against its bytecode when it reads it, so stale bytecode is never used."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": False}
    subprocess.run([str(BIN / "python"), "-m", "compileall", "-q",
                    *[str(ROOT / name) for name in PACKAGES]], env=env, timeout=300, **quiet)  # type: ignore[call-overload]
    # pytest's own bytecode of the test modules it rewrites (assertions), as the guest collects them
    subprocess.run([str(BIN / "python"), "-m", "pytest", "--collect-only", "-q",
                    "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-m", "cgroup2",
                    *[str(f) for f in files]], cwd=ROOT, env={**env, GUEST_ENV: "cgroup2"},
                   timeout=300, **quiet)  # type: ignore[call-overload]


@dataclass
class GuestRun:
    """What came back from one boot: vng's exit status and output, and pytest's results."""
    exit_code: int | None              # None: killed after the time limit
    seconds: float
    output: str                        # vng's stdout + stderr (boot messages, errors)
    pytest_status: int | None          # None: pytest never finished in the guest
    pytest_output: str
    failed: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    tests_began: float | None = None   # seconds from the boot to its first test (collected)


def _guest_command(share: Path, files: list[Path], ci: str, select: str = "") -> str:
    pytest = [str(BIN / "python"), "-m", "pytest", "-p", "no:cacheprovider",
              "-p", "no:hypothesispytest", "-m", "cgroup2",   # read-only tree: no caches
              "-v", "-rA", "--durations=25", "--timeout=900",   # slow beside the host's tests
              "-o", f"faulthandler_timeout={STACKS_AFTER_S}",    # where a slow test is
              f"--junitxml={share / 'junit.xml'}",
              *(["-k", select] if select else []),
              *[str(f.relative_to(ROOT)) for f in files]]
    # unbuffered: what pytest wrote is in the share also when the guest is killed at the limit
    return (f"cd {shlex.quote(str(ROOT))} && export {GUEST_ENV}=cgroup2 CI={shlex.quote(ci)} "
            f"{STARTED_ENV}={shlex.quote(str(share / 'started'))} "
            f"PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/mpl PATH={shlex.quote(str(BIN))}:$PATH; "
            f"{shlex.join(pytest)} > {share / 'pytest.txt'} 2>&1; "
            f"echo $? > {share / 'status'}")


def _results(junit: Path) -> tuple[list[str], list[str], list[str]]:
    failed: list[str] = []
    passed: list[str] = []
    skipped: list[str] = []
    if not junit.exists():
        return failed, passed, skipped
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped.append(name)
        else:
            passed.append(name)
    return failed, passed, skipped


class GuestSession:
    """One guest booting and running ``pytest -m cgroup2 FILES`` in the background (vng and
    its qemu in a session of their own, at ``nice`` so that the host's own tests, which time
    things, keep the CPUs when they want them); :meth:`wait` collects the results."""

    def __init__(self, share: Path, files: list[Path], timeout: float = 480.0, cpus: int = 2,
                 memory: str = "2G", nice: int = 0) -> None:
        kernel = guest_kernel()
        assert kernel is not None
        precompile(files)
        self.share, self.timeout = share, timeout
        share.mkdir(parents=True, exist_ok=True)
        command = _guest_command(share, files, os.environ.get("CI", ""),
                                 os.environ.get(SELECT_ENV, ""))
        argv = [str(BIN / "vng"), "--run", str(kernel), "--force-9p", "--disable-kvm",
                "--cpus", str(cpus), "--memory", memory, "--user", "root",
                f"--rwdir={share}", "--exec", command]
        if nice:
            argv = ["nice", "-n", str(nice), *argv]
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self.start, self.start_wall = time.monotonic(), time.time()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", start_new_session=True)
        if nice:   # a new session is a new autogroup, whose weight nice alone does not lower
            _nice_autogroup(self.proc.pid, nice)
        self._alone = threading.Event()
        self._renicing = threading.Lock()   # unnice's renice is the last one

    def nice_when_started(self, nice: int) -> None:
        """Wait for the guest's pytest to say its tests begin (``share/started``), then renice
        the guest to ``nice`` (unless the host's tests are done by then: :meth:`unnice`)."""
        while self.proc.poll() is None and not self._alone.is_set():
            if (self.share / "started").exists():
                with self._renicing:
                    if not self._alone.is_set():
                        _renice_session(self.proc.pid, nice)
                return
            time.sleep(0.5)

    def unnice(self) -> None:
        """To ``ALONE_NICE``, every thread of the guest's session (qemu's vCPU threads
        included) and its autogroup: the host's tests are done, and a niced guest would now
        lose the CPUs to any other work on the machine."""
        with self._renicing:
            self._alone.set()
            _renice_session(self.proc.pid, ALONE_NICE)

    def wait(self) -> GuestRun:
        """Until the guest is done or ``timeout`` seconds after it started (then killed)."""
        proc = self.proc
        try:
            left = max(1.0, self.timeout - (time.monotonic() - self.start))
            output, _ = proc.communicate(timeout=left)
            exit_code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # vng, virtme-run and qemu: the session we made
            output, _ = proc.communicate()
            exit_code = None
        finally:
            self.stop()
        seconds = time.monotonic() - self.start
        share = self.share
        status_file = share / "status"
        status = status_file.read_text().strip() if status_file.exists() else ""
        pytest_file = share / "pytest.txt"
        failed, passed, skipped = _results(share / "junit.xml")
        marker = share / "started"   # written on the host's clock (the share's 9p server)
        began = marker.stat().st_mtime - self.start_wall if marker.exists() else None
        return GuestRun(exit_code, seconds, output,
                        int(status) if status.isdigit() else None,
                        pytest_file.read_text(errors="replace") if pytest_file.exists() else "",
                        failed, passed, skipped, began)

    def stop(self) -> None:
        """Kill the guest's session if it still runs (interrupted: no qemu is left)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _nice_autogroup(pid: int, nice: int) -> None:
    """With ``sched_autogroup`` on, the scheduler shares the CPUs between sessions first, so a
    niced process in a session of its own still gets its full share: nice its autogroup."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError:   # no autogroup in this kernel, or not ours to change
        pass


def _renice_session(sid: int, nice: int) -> None:
    """``nice`` for every thread of every process in session ``sid`` and its autogroup; a
    process or thread that ends meanwhile is passed over."""
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            if os.getsid(int(proc_dir.name)) != sid:
                continue
            threads = [int(t.name) for t in (proc_dir / "task").iterdir()]
        except OSError:   # gone, or not ours to look at
            continue
        for tid in threads:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except OSError:
                pass
    _nice_autogroup(sid, nice)


def run_guest_pytest(share: Path, files: list[Path], timeout: float = 480.0,
                     cpus: int = 2, memory: str = "2G") -> GuestRun:
    """Boot one guest, run ``pytest -m cgroup2 FILES`` inside and collect the results."""
    return GuestSession(share, files, timeout, cpus, memory, nice=ALONE_NICE).wait()


# booted late (after the host's tests): why, for the guest test to say and to wait longer
LATE: pytest.StashKey[str] = pytest.StashKey()
# the guest's own time and slowest tests, for the session's summary (tests/conftest.py)
SUMMARY: pytest.StashKey[list[str]] = pytest.StashKey()


def summary_lines(run: GuestRun) -> list[str]:
    """How long the guest took and its pytest's ``slowest durations`` lines (where the
    time of a CI run goes: the guest ends about when the host's tests do)."""
    began = ("" if run.tests_began is None else
             f" (its tests began {run.tests_began:.0f} s after the boot)")
    lines = [f"the cgroup v2 guest: {run.seconds:.0f} s from its boot{began}, "
             f"{len(run.passed)} passed, {len(run.failed)} failed, {len(run.skipped)} skipped"]
    text = run.pytest_output
    if "slowest" in text:
        block = text[text.index("slowest"):].splitlines()[1:]
        lines += [line for line in block if re.match(r"\s*[0-9.]+s (call|setup|teardown) ", line)]
    return lines


def cpu_times(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """(all, idle) clock ticks of all CPUs so far, from /proc/stat's ``cpu`` line (idle counts
    ``idle`` and ``iowait``)."""
    fields = [int(v) for v in stat.read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]   # user..steal; guest time is within user


def spare_cpus(seconds: float = 1.0, stat: Path = Path("/proc/stat")) -> float:
    """How many CPUs the rest of the machine left idle over ``seconds`` while this process
    slept."""
    all_before, idle_before = cpu_times(stat)
    time.sleep(seconds)
    all_after, idle_after = cpu_times(stat)
    cpus = os.cpu_count() or 1
    return cpus * (idle_after - idle_before) / max(all_after - all_before, 1)


def boot_early(spare: float, cpus: int) -> bool:
    """Whether to boot the guest beside the host's tests: only when nothing else holds a CPU
    (all but half a CPU idle). Beside another busy process the niced guest gets next to nothing
    while the host's tests run, and its tests' bounded waits (a service's start, half a run)
    run out in wall-clock time it never had. After the host's tests, at ALONE_NICE, the same
    tests have the time they need even with the other process still running."""
    return spare >= cpus - 0.5


def start_early(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a run of the whole suite (the guest test and others): put the guest test last and
    boot the guest now, at nice 19, so it runs its tests on the CPU the host's tests leave
    idle (they mostly wait on services and sockets) instead of after them; the guest test
    then only collects the results. Alone, or where the guest cannot boot, nothing is done
    here (the test boots it itself, or says why it cannot); beside another busy process
    (:func:`boot_early`) the test boots it after the host's tests, with the same deadline."""
    guest = [item for item in items if item.name == GUEST_TEST]
    if not guest or len(items) == len(guest) or missing_for_guest() is not None \
            or os.geteuid() != 0:
        return
    try:
        files = guest_test_files()
    except ValueError:   # a wrong THROTTLE_LAB_GUEST_FILES: the guest test says so itself
        return
    items[:] = [item for item in items if item.name != GUEST_TEST] + guest
    cpus = os.cpu_count() or 1
    spare = spare_cpus()
    if not boot_early(spare, cpus):
        config.stash[LATE] = (f"booted after the host's tests: {spare:.1f} of {cpus} CPUs "
                              "were idle at the start (another process is busy)")
        return
    share = Path(tempfile.mkdtemp(prefix="throttle-lab-guest-"))
    session = GuestSession(share, files, EARLY_TIMEOUT_S, nice=START_NICE)
    threading.Thread(target=session.nice_when_started, args=(EARLY_NICE,), daemon=True,
                     name="guest-nice").start()
    config.stash[EARLY] = session


def stop_early(config: pytest.Config) -> None:
    """At the session's end: the early guest killed if it still runs, its share removed."""
    session = config.stash.get(EARLY, None)
    if session is not None:
        session.stop()
        shutil.rmtree(session.share, ignore_errors=True)
