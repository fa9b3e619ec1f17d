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

Run, raw data file, report/plot: each step usable alone (the shape of vegeta's run/report/plot).
Each command is a module with ``command_<name>(argv) -> exit code``: parse, call the layers
below (data, run, analysis, render), print. A new command is one module and one line in
``COMMANDS``; only the command that runs is imported.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from client.commands.exits import EXIT_OK, EXIT_USAGE, silence_stdout
from client.commands.options import CliError
from client.data.record import RawDataError

__all__ = ["COMMANDS", "command", "main"]

# each command's ``module:function``, imported only when it runs: ``watch`` or ``record`` does
# not import what ``sweep`` or ``advise`` need (numpy, matplotlib, httpx, the backends)
COMMANDS: dict[str, str] = {
    "run": "client.commands.run:command_run",
    "plot": "client.commands.plot:command_plot",
    "report": "client.commands.report:command_report",
    "predict": "client.commands.predict:command_predict",
    "compare": "client.commands.compare:command_compare",
    "sweep": "client.commands.inplace_entry:sweep_entry",
    "watch": "client.commands.watch:command_watch",
    "advise": "client.commands.inplace_entry:advise_entry",
    "record": "client.commands.record:command_record",
    "import": "client.commands.import_:command_import",
}


def command(name: str) -> Callable[[list[str]], int]:
    """The function of command ``name`` (a key of ``COMMANDS``)."""
    module, _, function = COMMANDS[name].partition(":")
    found: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in COMMANDS:
            return command(args[0])(args[1:])
        return command("run")(args)  # no command: the original's, ``run``
    except (CliError, RawDataError) as exc:
        print(f"http-timing: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader of our output went away (`... | head`)
        silence_stdout()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
