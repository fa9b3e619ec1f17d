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
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.agent_support import CACHE_HOME, agent_binary, go_tool
from tests.support import BIN, ROOT

__all__ = ["FILES_ENV", "GUEST_ENV", "GUEST_TEST", "GuestRun", "GuestSession", "SELECT_ENV",
           "STARTED_ENV", "SUMMARY", "guest_kernel", "guest_test_files", "missing_for_guest",
           "precompile", "run_guest_pytest", "summary_lines"]

GUEST_ENV = "THROTTLE_LAB_GUEST"   # tests/conftest.py: "cgroup2" selects the marked tests
GUEST_TEST = "test_cgroup2_tests_pass_in_a_v2_guest"   # tests/test_guest_cgroup2.py
# written by the guest's pytest (tests/conftest.py) once its tests are collected: when the
# guest's tests began, for the summary
STARTED_ENV = "THROTTLE_LAB_GUEST_STARTED"
# only these test files in the guest (space-separated, relative to the checkout): one file's
# guest tests take minutes instead of the whole run (docs/developing.md)
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
    against its bytecode when it reads it, so stale bytecode is never used. The node agent's
    binary (Go) is built here too, into the cache the guest reads (``XDG_CACHE_HOME``): built
    inside, under TCG, it would take many minutes, and the guest cannot write the cache."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": False}
    if go_tool() is not None:   # the node agent, built where the guest's tests look for it
        agent_binary()
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


# installed pytest plugins (their entry points) no test marked cgroup2 uses
GUEST_UNUSED_PLUGINS = ("locust", "xdist", "xdist.looponfail", "platformdirs", "anyio")


def _guest_command(share: Path, files: list[Path], ci: str, select: str = "") -> str:
    pytest = [str(BIN / "python"), "-m", "pytest", "-p", "no:cacheprovider",
              "-p", "no:hypothesispytest", "-m", "cgroup2",   # read-only tree: no caches
              # plugins the guest's tests do not use: each is imports at TCG's speed
              *[arg for plugin in GUEST_UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")],
              "-v", "-rA", "--durations=25", "--timeout=900",   # slow beside the host's tests
              "-o", f"faulthandler_timeout={STACKS_AFTER_S}",    # where a slow test is
              f"--junitxml={share / 'junit.xml'}",
              *(["-k", select] if select else []),
              *[str(f.relative_to(ROOT)) for f in files]]
    # unbuffered: what pytest wrote is in the share also when the guest is killed at the limit
    return (f"cd {shlex.quote(str(ROOT))} && export {GUEST_ENV}=cgroup2 CI={shlex.quote(ci)} "
            f"XDG_CACHE_HOME={shlex.quote(str(CACHE_HOME))} "
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
    its qemu in a session of their own); :meth:`wait` collects the results."""

    def __init__(self, share: Path, files: list[Path], timeout: float = 900.0, cpus: int = 2,
                 memory: str = "2G") -> None:
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
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self.start, self.start_wall = time.monotonic(), time.time()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", start_new_session=True)

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


def run_guest_pytest(share: Path, files: list[Path], timeout: float = 480.0,
                     cpus: int = 2, memory: str = "2G") -> GuestRun:
    """Boot one guest, run ``pytest -m cgroup2 FILES`` inside and collect the results."""
    return GuestSession(share, files, timeout, cpus, memory).wait()


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
