"""The exit statuses every command shares, and what a command does when its reader goes away;
light enough for ``client.commands.main`` to import before it knows the command."""

from __future__ import annotations

import os
import sys

__all__ = ["EXIT_FAILED_REQUESTS", "EXIT_INTERRUPTED", "EXIT_NOT_MET", "EXIT_OK", "EXIT_USAGE",
           "silence_stdout"]

EXIT_OK, EXIT_FAILED_REQUESTS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_NOT_MET = 3   # no recommendation: no limit met the target, or nothing could be said


def silence_stdout() -> None:
    """Point stdout at /dev/null so later prints (and Python's exit flush) do not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
