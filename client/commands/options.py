"""Command-line pieces shared by the ``http-timing`` commands: the one-line usage error, a
parser whose own errors are one line, argument types that check a number's range or read a
duration or an instant, the ``--cpus`` list of limits, ``advise --passive``'s options and what
does not go with them.

Each type raises ``argparse.ArgumentTypeError`` with ``must be ... (got ...)``; argparse puts
the option's name in front (``argument --rate: must be a number > 0 (got 'fast')``).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from client import __version__
from client.data.folders import folder_problem
from client.data.naming import limit_text
from client.data.timefmt import iso_utc
from cpuquota.limit import Limit, LimitError, zero_limit

__all__ = ["HPA_FLAGS", "PASSIVE_FLAGS", "CliError", "OneLineParser", "add_passive_arguments",
           "check_folder", "cpu_limit_action", "cpus_number", "duration", "given", "instant",
           "int_at_least", "int_in", "iso_utc", "number_above", "number_at_least", "parse_counts",
           "parse_limits", "passive_problem"]

# what to give for no limit in a list of them (sweep's and predict's --cpus A,B,C)
NONE_IN_A_LIST = "write none for no limit (e.g. --cpus none,1,0.3)"


class CliError(Exception):
    """A problem to report in one line (exit code 2), never with a traceback."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``prog: message``), exit code 2, with a
    ``--version`` (``http-timing 0.1.0`` for every command)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version",
                          version=f"{self.prog.split()[0]} {__version__}",
                          help="print the program's version and exit")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def check_folder(flag: str, folder: Path | None) -> None:
    """``flag folder`` can hold files (None: not given): else a one-line ``CliError`` (a file
    there, no permission, a cgroup file system), before anything is made or sent."""
    if folder is not None and (problem := folder_problem(folder)) is not None:
        raise CliError(f"{flag} {folder}: cannot write in it: {problem}")


def int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {minimum} (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum} (got {value})")
        return value
    return parse


def int_in(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer in [{minimum}, {maximum}] (got {text!r})") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"must be an integer in [{minimum}, {maximum}] (got {value})")
        return value
    return parse


def _number(minimum: float, *, inclusive: bool) -> Callable[[str], float]:
    rule = f">= {minimum:g}" if inclusive else f"> {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {rule} (got {text!r})") from None
        if not math.isfinite(value) or value < minimum or (not inclusive and value == minimum):
            raise argparse.ArgumentTypeError(f"must be a number {rule} (got {text})")
        return value
    return parse


def number_above(minimum: float) -> Callable[[str], float]:
    """A finite number > ``minimum``."""
    return _number(minimum, inclusive=False)


def number_at_least(minimum: float) -> Callable[[str], float]:
    """A finite number >= ``minimum``."""
    return _number(minimum, inclusive=True)


def cpus_number(text: str) -> float:
    """A CPU limit's number (argparse type): finite, >= 0; 0 is left to
    :func:`cpu_limit_action`, which says in one line what to give instead."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0 (got {text!r})") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0 (got {text})")
    return value


def cpu_limit_action(instead: str) -> type[argparse.Action]:
    """The action of a ``--cpus X`` (type :func:`cpus_number`): 0 is no limit's spelling
    nowhere, so ``--cpus 0`` is the one line of ``zero_limit`` with ``instead``."""

    class CpuLimit(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: Any, option_string: str | None = None) -> None:
            if values == 0:
                parser.error(zero_limit(f"{option_string or self.dest} 0", instead))
            setattr(namespace, self.dest, values)

    return CpuLimit


def parse_limits(text: str, *, period_ms: float = 100.0, burst_ms: float = 0.0
                 ) -> tuple[Limit | None, ...]:
    """``1,0.3,0.1`` -> those limits (each with the period and burst given); ``none`` or
    ``unlimited`` is no limit (None), 0 is refused (``zero_limit``). ``CliError`` naming the
    bad item, one line."""
    limits: list[Limit | None] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise CliError(f"--cpus takes numbers separated by commas, like 1,0.3,0.1 "
                           f"(got {text!r})")
        limit: Limit | None = None
        if item.lower() not in ("none", "unlimited"):
            try:
                cpus = float(item)
            except ValueError:
                raise CliError(f"--cpus: {item!r} is not a number of CPUs "
                               "(like 0.3, or none for no limit)") from None
            if not math.isfinite(cpus) or cpus < 0:
                raise CliError(f"--cpus: {item!r} must be a number > 0 (or none: no limit)")
            if cpus == 0:
                raise CliError(zero_limit(f"--cpus {item}", NONE_IN_A_LIST))
            try:
                limit = Limit(cpus, period_ms, burst_ms)
            except LimitError as exc:
                raise CliError(f"--cpus {item}: {exc}") from None
        if limit in limits:
            raise CliError(f"--cpus: {limit_text(limit)} is given twice")
        limits.append(limit)
    return tuple(limits)


def parse_counts(text: str, *, flag: str = "--replicas") -> tuple[int, ...]:
    """``1,4,16`` -> (1, 4, 16): distinct integers >= 1; ``CliError`` naming the bad item."""
    counts: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        try:
            count = int(item)
        except ValueError:
            raise CliError(f"{flag} takes whole numbers >= 1 separated by commas, like 1,4 "
                           f"(got {text!r})") from None
        if count < 1:
            raise CliError(f"{flag}: {count} must be >= 1")
        if count in counts:
            raise CliError(f"{flag}: {count} is given twice")
        counts.append(count)
    return tuple(counts)


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?"
                       r"(?:(\d+(?:\.\d+)?)s?)?$")


def duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h``, ``1h30m``, ``7d`` -> seconds (argparse type)."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 90s, 10m, 1h, "
                                         "7d")
    d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
    seconds = 86400 * d + 3600 * h + 60 * m + s
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the duration must be > 0")
    return seconds


def instant(text: str) -> float:
    """Unix seconds, or an ISO 8601 time with its zone (``2026-11-28T14:00:00Z``) -> unix
    seconds (argparse type)."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds) and seconds > 0:
            return seconds
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected unix seconds or an ISO 8601 time "
                                         "with its zone, such as 2026-11-28T14:00:00Z")
    return moment.timestamp()


LOAD_OPTIONS = ("url", "requests", "concurrency", "rate", "max_throttled")  # not with --passive


def passive_problem(opts: argparse.Namespace) -> str | None:
    """What is wrong with ``--passive``'s options, in one line (None: nothing)."""
    given = [f"--{name.replace('_', '-')}" for name in LOAD_OPTIONS
             if getattr(opts, name, None) not in (None, False)]
    if given:
        return (f"{', '.join(given)}: not with --passive (it sends no load and answers from a "
                "recorded window by its requests' latency or its added delay)")
    if len([s for s in (opts.timeline, opts.cgroup, opts.k8s) if s is not None]) != 1:
        return ("--passive needs one of --timeline FILE (a recorded window), --cgroup TARGET "
                "--duration S (record it now) or --k8s NS/KIND/NAME (what the node agent "
                "recorded)")
    for flag, value in (("--since", opts.since), ("--until", opts.until)):
        if value is not None and opts.k8s is None:
            return f"{flag} goes with --passive --k8s NS/KIND/NAME (the node agent's window)"
    if opts.k8s is not None and opts.duration is not None:
        return "--duration goes with --passive --cgroup (--k8s reads what was recorded: --since)"
    if opts.cgroup is not None and opts.duration is None:
        return "--passive --cgroup needs --duration S: how long to record the group"
    if opts.timeline is not None and opts.duration is not None:
        return "--duration goes with --passive --cgroup (--timeline is already recorded)"
    for flag, value in (("--start", getattr(opts, "start", None)),
                        ("--no-align", getattr(opts, "no_align", False) or None)):
        if value is not None and opts.requests_from is None:
            return (f"{flag} goes with --requests-from FILE (a load tool's file of relative "
                    "times: hey's, oha's)")
    return None


def add_passive_arguments(parser: argparse.ArgumentParser) -> None:
    """``advise``'s ``--passive`` options and the HPA replay's (:data:`PASSIVE_FLAGS`)."""
    from client.analysis.spread import SEED, SPREADS   # not for every command's --help

    passive = parser.add_argument_group(
        "without touching the service (--passive: no resize, no load)")
    passive.add_argument("--passive", action="store_true",
                         help="answer from the replay of a recorded window "
                         "(client.analysis.replay): --timeline FILE, or --cgroup TARGET "
                         "--duration S to record it first")
    passive.add_argument("--timeline", type=Path, metavar="NAME.cgroup.csv",
                         help="with --passive: the recorded window (http-timing record's, a "
                         "--cgroup run's, the node agent's)")
    passive.add_argument("--requests-from", type=Path, metavar="FILE",
                         help="with --passive: the window's requests (a run's CSV, a load "
                         "tool's file or an access log, as import reads them); without, the "
                         "added delay of a random arrival is judged")
    passive.add_argument("--start", type=instant, metavar="EPOCH",
                         help="with --passive --requests-from a file of relative times (hey, "
                         "oha): the tool's start, Unix seconds (date +%%s.%%N just before it "
                         "ran); the requests are then lined up with the throttling, as "
                         "import lines them up")
    passive.add_argument("--no-align", action="store_true",
                         help="with --start: keep the stated clock (do not apply the shift that "
                         "lines the slow requests up with the throttling)")
    passive.add_argument("--since", type=duration, metavar="DURATION",
                         help="with --passive --k8s NS/KIND/NAME: the window the node agent "
                         "recorded, the last DURATION (90s, 10m, 1h; default 10m)")
    passive.add_argument("--until", type=instant, metavar="TIME",
                         help="with --passive --k8s NS/KIND/NAME: the window ends at TIME "
                         "(unix seconds, or ISO 8601 with its zone: 2026-11-28T14:00:00Z) "
                         "instead of now")
    passive.add_argument("--replicas", metavar="N,N,...",
                         help="with --passive: for each replica count, the smallest limit "
                         "each that meets the target with the recorded load spread over them, "
                         "and the least total (e.g. 1,2,3,4)")
    passive.add_argument("--spread", choices=SPREADS, default=None,
                         help="with --replicas: how the Service spreads the connections: "
                         "random (default; kube-proxy's iptables mode) or round-robin (IPVS rr)")
    passive.add_argument("--seed", type=int_at_least(0), default=None, metavar="N",
                         help=f"with --spread random: the picks' seed (default {SEED})")
    hpa = parser.add_argument_group(
        "the HPA over the window (--passive: the replicas its rule runs, the p99 they give)")
    hpa.add_argument("--hpa-target", type=int_at_least(1), metavar="PCT",
                     help="replay an HPA with this CPU utilization target (%% of the request)")
    hpa.add_argument("--hpa", action="store_true",
                     help="with --k8s NS/KIND/NAME: replay the workload's own HPA "
                     "(autoscaling/v2, a CPU utilization target)")
    hpa.add_argument("--min", type=int_at_least(1), metavar="N",
                     help="the HPA's minReplicas (default 1, or the cluster HPA's)")
    hpa.add_argument("--max", type=int_at_least(1), metavar="N",
                     help="the HPA's maxReplicas (default 10, or the cluster HPA's)")
    hpa.add_argument("--hpa-limit", type=number_above(0), metavar="CPUS",
                     help="each replica's CPU limit (default: the record's)")
    hpa.add_argument("--hpa-request", type=number_above(0), metavar="CPUS",
                     help="each replica's CPU request, what the utilization is of (default: "
                     "the workload's)")
    hpa.add_argument("--ready-after", type=number_at_least(0), default=None, metavar="S",
                     help="a new replica serves S seconds after the HPA makes it (default 30)")


HPA_FLAGS = (("--hpa-target", "hpa_target"), ("--hpa", "hpa"), ("--min", "min"),
             ("--max", "max"), ("--hpa-limit", "hpa_limit"), ("--hpa-request", "hpa_request"),
             ("--ready-after", "ready_after"))
PASSIVE_FLAGS = (("--timeline", "timeline"), ("--requests-from", "requests_from"),
                 ("--start", "start"), ("--no-align", "no_align"), ("--since", "since"),
                 ("--until", "until"), ("--replicas", "replicas"), ("--spread", "spread"),
                 ("--seed", "seed"), *HPA_FLAGS)


def given(opts: argparse.Namespace, flags: tuple[tuple[str, str], ...]) -> list[str]:
    """The ``flags`` the command line gave (a switch: set)."""
    return [flag for flag, name in flags
            if (value := getattr(opts, name)) is not None and value is not False]
