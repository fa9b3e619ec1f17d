"""``cpu-quota``: run a command under a real kernel CPU quota, the way ``docker run --cpus`` does.

    cpu-quota --cpus 0.3 [--period-ms 100] [--burst-ms 0] -- python job.py

A supervisor that stays *outside* the quota creates a cgroup ``throttle-lab-<pid>-<random>``,
writes the quota, starts the command inside it (the child moves itself in before ``exec``,
so everything it starts is inside too), forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to it, waits,
stops whatever the command left running in the group (like a container whose main process
ended), prints the group's ``cpu.stat`` to stderr and removes the group. It exits with the
command's status (128 + N when signal N ended it). So the group is removed after a normal exit,
a signal, a crash or a SIGKILL of the command; only a SIGKILL of the supervisor itself can leave
an (empty) group behind, and then the command is killed with it (``PR_SET_PDEATHSIG``).
A SIGINT or SIGTERM before the command starts (``service.stop``) ends ``cpu-quota`` with
``128 + N`` and no group left; once the group is made, it is the command's to answer.

``burn-service --cpus X`` uses the same supervisor to re-run itself (see ``serve_under_quota``),
with one difference: the group gets its quota once the service has started and before it
listens (:func:`quota_at_ready`, called from the app's start-up). Python's imports and the
calibration cost ~0.7 s of CPU, which at 0.1 CPU are ~7 s of waiting before the first request
while nothing is measured; every request the service answers runs under the quota all the
same. ``cpu-quota`` keeps the quota from the start, as ``docker run --cpus`` does.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cpuquota.cgroupfs import CgroupError, locate_cpu_controller, read_cpu_stat
from service import __version__
from service.cgroup import create_group, empty_group, lift_quota, remove_group, set_quota
from cpuquota.limit import Limit, kernel_limit, zero_limit
from cpuquota.account import CpuStat
from service.stop import STOP_SIGNALS, until_stopped

__all__ = ["EXIT_SETUP_FAILED", "FORWARDED_SIGNALS", "QUOTA_AT_READY_ENV", "SUPERVISED_ENV",
           "QuotaRun", "build_parser",
           "describe_run", "is_supervised", "main", "quota_at_ready", "run_under_quota",
           "serve_under_quota", "setup_error_message"]

# The child of ``burn-service --cpus`` finds here the group its supervisor made for it, so it
# serves instead of re-running itself once more.
SUPERVISED_ENV = "THROTTLE_LAB_CGROUP"
# ... and here the limit (``cpus period_ms burst_ms``) it writes into that group once it has
# started, before it listens (``quota_at_ready``)
QUOTA_AT_READY_ENV = "THROTTLE_LAB_QUOTA_AT_READY"
FORWARDED_SIGNALS = tuple(getattr(signal, name)   # SIGHUP and SIGQUIT are POSIX only
                          for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
                          if hasattr(signal, name))
# like env(1) and timeout(1): 125 our failure, 126 not executable, 127 not found
EXIT_SETUP_FAILED = 125
# what is left in the group after the command ends dies within this (unthrottled: it can be
# slow to exit only when the machine is)
REMOVE_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1
SI_KERNEL = 0x80


@dataclass(frozen=True)
class QuotaRun:
    """How a supervised command ended and what the kernel did to it."""

    returncode: int                 # the command's exit status; 128 + N when signal N ended it
    limit: Limit
    group: str                      # the cgroup's directory (gone when ``removed``)
    stat: CpuStat | None            # the group's counters when the command ended
    removed: bool
    leftovers: list[int] = field(default_factory=list)  # pids we stopped after the command ended


def describe_run(run: QuotaRun) -> str:
    """One line for stderr: the quota and what the kernel counted."""
    text = f"{run.limit.describe_kernel()}"
    if run.stat is not None:
        s = run.stat
        share = f" ({100 * s.nr_throttled / s.nr_periods:.0f} %)" if s.nr_periods else ""
        text += (f": {s.nr_throttled} of {s.nr_periods} periods throttled{share}, "
                 f"throttled time {s.throttled_ns / 1e9:.3f} s")
    if run.leftovers:
        text += f"; stopped {len(run.leftovers)} leftover process(es)"
    text += f"; cgroup {run.group} removed" if run.removed else f"; could NOT remove {run.group}"
    return text


def _load_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def _enter_group(directory: Path, mask: set[int | signal.Signals],
                 supervisor: int) -> Callable[[], None]:
    """What the child runs between fork and exec: die with the supervisor, move itself into
    the group (so nothing it starts escapes), and take the signal mask ``mask``."""
    procs = os.fsencode(directory / "cgroup.procs")
    prctl = _load_prctl()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != supervisor:   # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return preexec


def _sent_by_a_process(info: signal.struct_siginfo) -> bool:
    """A terminal's Ctrl-C (si_code SI_KERNEL) reaches the whole foreground process group, the
    command included: forward only what ``kill`` (SI_USER, SI_QUEUE, SI_TKILL <= 0) sent us."""
    return info.si_code <= 0


def _wait_forwarding(proc: subprocess.Popen[bytes], waited: set[signal.Signals]) -> int:
    while True:
        info = signal.sigtimedwait(waited, 0.25)
        if info is not None and info.si_signo != signal.SIGCHLD and _sent_by_a_process(info):
            try:
                proc.send_signal(info.si_signo)
            except ProcessLookupError:
                pass
        if proc.poll() is not None:
            return proc.returncode


def _drain(waited: set[signal.Signals]) -> None:
    """Signals that arrived for a command that has ended: drop them before unblocking."""
    while signal.sigtimedwait(waited, 0) is not None:
        pass


def run_under_quota(command: Sequence[str], limit: Limit, *,
                    env: Mapping[str, str] | None = None, mark_child: bool = False) -> QuotaRun:
    """Run ``command`` in a new cgroup with ``limit``; remove the group when it ends. With
    ``mark_child`` the command is told its group (``SUPERVISED_ENV``) and the limit, which it
    writes itself once it is ready (``QUOTA_AT_READY_ENV``, :func:`quota_at_ready`).

    Raises ``CgroupError`` (with the reason) when the group cannot be made or entered, and
    ``OSError`` when the command cannot be started (after removing the group)."""
    controller = locate_cpu_controller()
    waited = {*FORWARDED_SIGNALS, signal.SIGCHLD}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        directory = create_group(None if mark_child else limit, controller)
        stat: CpuStat | None = None
        leftovers: list[int] = []
        try:
            child_env = dict(os.environ if env is None else env)
            if mark_child:
                child_env[SUPERVISED_ENV] = str(directory)
                child_env[QUOTA_AT_READY_ENV] = f"{limit.cpus!r} {limit.period_ms!r} " \
                                                f"{limit.burst_ms!r}"
            # burn-service's own child starts with SIGINT and SIGTERM blocked, until its
            # handler is in (service.stop): one forwarded now waits for it
            child_mask = mask | set(STOP_SIGNALS) if mark_child else mask
            try:
                proc = subprocess.Popen(list(command), env=child_env,
                                        preexec_fn=_enter_group(directory, child_mask,
                                                                os.getpid()))
            except subprocess.SubprocessError:
                raise CgroupError(f"cannot move the command into {directory}") from None
            returncode = _wait_forwarding(proc, waited)
        finally:
            try:
                stat = read_cpu_stat(directory, controller.version)
            except (OSError, ValueError):
                stat = None
            lift_quota(directory, controller.version)   # read: nothing dying is throttled
            leftovers = empty_group(directory)
            removed = remove_group(directory, timeout=REMOVE_TIMEOUT_S)
            _drain(waited)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    code = 128 - returncode if returncode < 0 else returncode
    return QuotaRun(code, limit, str(directory), stat, removed, leftovers)


def setup_error_message(prog: str, reason: str, cpus: float) -> str:
    """The one line printed when no quota group can be made: why, and what to use instead."""
    percent = min(cpus * 100, 100)
    return (f"{prog}: {reason}; without cgroups use `burn-service --cpu-limit {percent:g}` "
            f"(an in-process throttle, % of one CPU) or `docker run --cpus {cpus:g}`")


def _run_cli(prog: str, command: Sequence[str], limit: Limit, *, quiet: bool,
             mark_child: bool = False) -> int:
    try:
        run = run_under_quota(command, limit, mark_child=mark_child)
    except CgroupError as exc:
        print(setup_error_message(prog, str(exc), limit.cpus), file=sys.stderr)
        return EXIT_SETUP_FAILED
    except FileNotFoundError:
        print(f"{prog}: {command[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"{prog}: {command[0]}: permission denied", file=sys.stderr)
        return 126
    if not quiet or not run.removed:
        print(f"{prog}: {describe_run(run)}", file=sys.stderr)
    return run.returncode


def is_supervised() -> bool:
    """True in the command that ``serve_under_quota`` started, inside the group made for it."""
    marked = os.environ.get(SUPERVISED_ENV)
    if not marked:
        return False
    try:
        return locate_cpu_controller().directory == Path(marked)
    except CgroupError:
        return False


def serve_under_quota(argv: Sequence[str], limit: Limit) -> int:
    """``burn-service --cpus X``: run ``burn-service ARGV`` again inside a new quota group,
    supervised from outside it; the child sees ``SUPERVISED_ENV`` and serves."""
    command = [sys.executable, "-m", "service.cli", *argv]
    return _run_cli("burn-service", command, limit, quiet=False, mark_child=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpu-quota",
        usage="%(prog)s --cpus CPUS [--period-ms MS] [--burst-ms MS] [--quiet] "
              "-- COMMAND [ARGS...]",
        description="Run a command under a real kernel CPU quota (CFS bandwidth control in a "
        "new cgroup, exactly what `docker run --cpus` sets), then remove the cgroup. Needs "
        "Linux and root (or a delegated cgroup). Exits with the command's status.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the program's version and exit")
    parser.add_argument("--cpus", type=float, required=True, metavar="CPUS",
                        help="CPUs the command may use, e.g. 0.3 = 30 ms of every 100 ms period")
    parser.add_argument("--period-ms", type=float, default=100.0, metavar="MS",
                        help="the quota's period in ms, 1-1000 (default 100, as Docker)")
    parser.add_argument("--burst-ms", type=float, default=0.0, metavar="MS",
                        help="unused quota that may be saved for later periods, in ms, at most "
                        "the quota (default 0; Linux 5.14+)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="do not print the cgroup's cpu.stat summary at the end")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="the command and its arguments (after --)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return until_stopped(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("give the command to run after --, e.g. cpu-quota --cpus 0.3 -- python job.py")
    if args.cpus == 0:  # no limit's spelling nowhere (cpuquota.limit)
        parser.error(zero_limit("--cpus 0", "run the command without cpu-quota for no limit"))
    try:
        limit = kernel_limit(args.cpus, args.period_ms, args.burst_ms)
    except ValueError as exc:
        parser.error(str(exc))
    return _run_cli("cpu-quota", command, limit, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())


def quota_at_ready() -> Limit | None:
    """In the service that ``serve_under_quota`` started, once it is ready to listen: write the
    limit its supervisor passed into its own group (every worker process writes the same) and
    return it; None when there is none to write. ``CgroupError`` when it cannot be written
    (the service then stops: it must not answer without its quota)."""
    wanted = os.environ.get(QUOTA_AT_READY_ENV)
    if not wanted or not is_supervised():
        return None
    try:
        cpus, period_ms, burst_ms = (float(word) for word in wanted.split())
        limit = kernel_limit(cpus, period_ms, burst_ms)
    except ValueError as exc:   # a float that is not one, or a limit the kernel refuses
        raise CgroupError(f"{QUOTA_AT_READY_ENV}={wanted!r} is not a limit to write "
                          f"('cpus period_ms burst_ms'): {exc}") from None
    controller = locate_cpu_controller()
    set_quota(controller.directory, controller.version, limit)
    return limit
