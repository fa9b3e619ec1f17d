"""``kubectl throttle ...``: http-timing's commands as a kubectl plugin (an executable named
``kubectl-throttle`` on the PATH, installed with the client, as krew plugins are):
``kubectl throttle cluster -A`` runs ``http-timing cluster -A``, ``kubectl throttle advise
--k8s NS/deployment/NAME --passive --p99 50`` runs ``http-timing advise ...``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from client.commands import main as http_timing

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return http_timing(args or ["--help"])


if __name__ == "__main__":
    sys.exit(main())
