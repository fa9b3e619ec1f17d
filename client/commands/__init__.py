"""``http-timing``: a drop-in for the original ``http-timing.py``, and the commands around it.

    http-timing [run] [--url URL] [--iterations N] [--requests N] ...   time requests, save raw data
                [--concurrency C | --rate R --duration D]               closed / open loop
    http-timing plot FILE...                                            redraw pictures
    http-timing report FILE [--json] [--predict]                        statistics, throttling
    http-timing predict --service-ms S --cpus X                         the quota model
    http-timing compare A B C... [-o PICTURE]                           runs side by side
    http-timing sweep --cpus 1,0.3,0.1 --backend kernel|inprocess|docker start, time, compare
    http-timing [run] ... --cgroup TARGET                               + the service's own cgroup
    http-timing watch TARGET                                            the top of throttling
    http-timing advise --p99 MS [--p90 MS] [--backend ...]              the smallest limit
    http-timing advise|sweep ... --cgroup TARGET --url URL              ... on a running service
    http-timing record TARGET [--duration S] [--max-size BYTES]         a cgroup's timeline alone
    http-timing import FILE --timeline NAME.cgroup.csv [--format F]     another tool's requests
    http-timing cluster [-n NS | -A] [--since DURATION]                 every recorded workload

    http-timing help [COMMAND]                                          every command, or one's options
    http-timing version                                                 the version (as --version)

Run, raw data file, report/plot: each step usable alone (the shape of vegeta's run/report/plot).
Each command is a module with ``command_<name>(argv) -> exit code``: parse, call the layers
below (data, run, analysis, render), print. A new command is one module, one line in
``COMMANDS`` and one in ``TASKS`` (its line in ``http-timing --help``); only the command that
runs is imported, and ``--help``, ``--version`` (``version``) or a mistyped command import
none but ``run``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from client import __version__
from client.commands.exits import EXIT_OK, EXIT_USAGE, silence_stdout
from client.commands.options import CliError
from client.data.record import RawDataError

__all__ = ["COMMANDS", "TASKS", "command", "main", "overview", "unknown_command"]

# each command's ``module:function``, imported only when it runs: ``watch`` or ``record`` does
# not import what ``sweep`` or ``advise`` need (numpy, matplotlib, httpx, the backends)
COMMANDS: dict[str, str] = {
    "run": "client.commands.run:command_run",
    "plot": "client.commands.plot:command_plot",
    "report": "client.commands.report:command_report",
    "predict": "client.commands.predict:command_predict",
    "compare": "client.commands.compare:command_compare",
    "sweep": "client.commands.sweep:command_sweep",
    "watch": "client.commands.watch:command_watch",
    "advise": "client.commands.advise:command_advise",
    "record": "client.commands.record:command_record",
    "import": "client.commands.import_:command_import",
    "cluster": "client.commands.cluster:command_cluster",
}


# each command's line in `http-timing --help`, the question it answers, grouped by task (here,
# not in the commands' modules, so that the help imports none of them); each command once
TASKS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("See what a limit does", (
        ("run", "how long does each request take? time them and keep every one"),
        ("sweep", "what do 1, 0.3 and 0.1 CPU do? burn-service under each, compared"),
        ("predict", "what would a quota do to requests of S ms of CPU? the model alone"),
    )),
    ("Your own service (run, sweep and advise take --cgroup TARGET too)", (
        ("watch", "is it being throttled now? its cgroup's counters, interval by interval"),
        ("record", "what did the kernel count while another tool sent the load?"),
    )),
    ("Choose a limit", (
        ("advise", "what is the smallest limit that meets a p99 (p90) target? real runs "
                   "(--passive: a replay)"),
        ("cluster", "which workloads does throttling cost most, and what limit instead?"),
    )),
    ("Read and explain saved runs", (
        ("report", "which percentiles, and which requests were delayed by throttling?"),
        ("plot", "when was each request slow? its latency against time, redrawn"),
        ("compare", "how do these runs differ? side by side, with one table"),
    )),
    ("Other tools' data", (
        ("import", "which requests of a load tool or access log were delayed by throttling?"),
    )),
)
PROG = "http-timing"


def command(name: str) -> Callable[[list[str]], int]:
    """The function of command ``name`` (a key of ``COMMANDS``)."""
    module, _, function = COMMANDS[name].partition(":")
    found: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return found


def overview() -> str:
    """The top of ``http-timing --help``: how it is called and every command, by task."""
    lines = [f"usage: {PROG} COMMAND [OPTION...]",
             f"       {PROG} [run] [OPTION...]   (no command: run, as the original "
             "http-timing.py)",
             f"       {PROG} help [COMMAND]",
             f"       {PROG} version",
             "",
             "Time HTTP requests, keep every one, and see what CPU limits (the kernel's CFS "
             "quota)",
             "do to them. The commands, by task:"]
    for task, rows in TASKS:
        lines += ["", f"{task}:"]
        lines += [f"  {name:<9} {question}" for name, question in rows]
    lines += ["", f"A command's options: {PROG} help COMMAND (or {PROG} COMMAND --help).",
              "", "The options of run:", ""]
    return "\n".join(lines)


def show_help() -> NoReturn:
    """``http-timing --help``: every command, then the options of ``run`` (exits 0)."""
    print(overview(), flush=True)
    parser: argparse.ArgumentParser = (
        importlib.import_module("client.commands.run").build_run_parser(PROG))
    parser.description = None  # the overview said it
    parser.print_help()
    parser.exit()


def unknown_command(word: str) -> str | None:
    """Why ``word`` given as a command is a mistyped one (a did-you-mean), or None when it is
    not close to any (then it is no command at all: ``run``'s parser says what it is)."""
    close = difflib.get_close_matches(word, [*COMMANDS, "help", "version"], n=1)
    if not close:
        return None
    return f"{word!r} is not a command; did you mean {close[0]!r}? (see {PROG} --help)"


def help_of(args: list[str]) -> int:
    """``http-timing help [COMMAND]``: every command, or that command's ``--help``."""
    if not args or args[0] == "help":
        show_help()
    if args[0] == "version":
        print(f"usage: {PROG} version\n\nPrint {PROG}'s version and exit (as {PROG} --version).")
        return EXIT_OK
    if args[0] not in COMMANDS:
        raise CliError(unknown_command(args[0])
                       or f"{args[0]!r} is not a command; the commands are "
                       f"{', '.join(COMMANDS)} (see {PROG} --help)")
    return command(args[0])(["--help"])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in COMMANDS:
            return command(args[0])(args[1:])
        if args[:1] == ["help"]:
            return help_of(args[1:])
        if args[:1] in (["-h"], ["--help"]):
            show_help()
        if args == ["--version"] or args[:1] == ["version"]:
            if args[1:]:
                raise CliError(f"version takes no arguments, not {' '.join(args[1:])!r} "
                               f"(see {PROG} --help)")
            print(f"{PROG} {__version__}")
            return EXIT_OK
        if args and not args[0].startswith("-") and (typo := unknown_command(args[0])):
            raise CliError(typo)
        return command("run")(args)  # no command: the original's, ``run``
    except (CliError, RawDataError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader of our output went away (`... | head`)
        silence_stdout()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
