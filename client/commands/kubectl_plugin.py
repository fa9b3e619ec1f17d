"""``kubectl throttle ...``: http-timing's commands as a kubectl plugin (an executable named
``kubectl-throttle`` on the PATH, installed with the client, as krew plugins are):
``kubectl throttle cluster -A`` runs ``http-timing cluster -A``, ``kubectl throttle advise
--k8s NS/deployment/NAME --passive --p99 50`` runs ``http-timing advise ...``. Its help and
usage lines name it as it is called: ``kubectl throttle``."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import client.commands as commands
from client.commands import main as http_timing
from client.commands.options import OneLineParser

__all__ = ["PLUGIN", "as_plugin", "main"]

PLUGIN = "kubectl throttle"


@contextmanager
def as_plugin() -> Iterator[None]:
    """While it lasts, the overview and every command's parser say ``kubectl throttle``
    where they say ``http-timing`` (``--version`` still names the program: http-timing)."""
    prog, init = commands.PROG, OneLineParser.__init__

    def renamed(self: OneLineParser, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if self.prog.startswith(prog):
            self.prog = PLUGIN + self.prog[len(prog):]

    commands.PROG = PLUGIN
    OneLineParser.__init__ = renamed  # type: ignore[method-assign]
    try:
        yield
    finally:
        commands.PROG = prog
        OneLineParser.__init__ = init  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["version"]):
        return http_timing(args)   # the program's version: http-timing X.Y.Z
    with as_plugin():
        return http_timing(args or ["--help"])


if __name__ == "__main__":
    sys.exit(main())
