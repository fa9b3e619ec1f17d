"""``burn-service``: run the burn service on uvicorn.

Each option is also read from ``BURN_SERVICE_<OPTION>`` (see ``service.config``). The settings
reach uvicorn's worker processes through those same variables. Without the ``service`` extra
(``pip install .`` alone) it prints one line saying what to install and exits 1.

Ctrl-C (SIGINT) or SIGTERM stops it at any moment, start-up and shutdown included, without a
traceback (``service.stop``): a request still running after uvicorn's 5 s of graceful
shutdown is answered 503 and its burn stopped; under ``--cpus`` the quota group is removed.
It then exits 130 (SIGINT) or 143 (SIGTERM), ``128 + N`` as a shell reports signal N, and 0
when it stops by itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from service import __version__
from service.config import Settings, SettingsError, env_name, field_type, option_fields
from service.stop import until_stopped

__all__ = ["build_parser", "main", "metavar", "parse_settings"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="burn-service",
        description="A CPU-burn service (FastAPI on uvicorn) to see what CPU limits do to "
        "latency. Every option can also be set as BURN_SERVICE_<OPTION>, e.g. "
        "BURN_SERVICE_PORT=7801.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    for f in option_fields():
        if not f.metadata.get("cli", True):
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = field_type(f)
        default = "none" if f.metadata["limit"] else f.default  # a limit's 0: no limit
        help_text = f"{f.metadata['help']} (env {env_name(f.name)}; default {default})"
        if kind is bool:
            parser.add_argument(flag, dest=f.name, default=None,
                                action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None,
                                choices=f.metadata["choices"], metavar=metavar(f.name, kind),
                                help=help_text)
    return parser


def metavar(name: str, kind: type) -> str:
    """An option's placeholder: N for a count, else its unit or its last word (MS, PCT, HOST)."""
    if kind is int and name != "port":
        return "N"
    word = name.rpartition("_")[2]
    units = {"ms": "MS", "us": "US", "cycle": "MS", "cpus": "X", "limit": "PCT"}
    return units.get(word, word.upper())


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    """Settings from the command line over the environment; exits with a one-line error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return Settings.from_env(**vars(args))
    except SettingsError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def main(argv: Sequence[str] | None = None) -> int:
    return until_stopped(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    from service.extra import install_hint, missing_requirements  # importlib.metadata: ~20 ms

    build_parser().parse_args(argv)  # --help and --version answer even without the extra
    missing = missing_requirements()
    if missing:  # `pip install .` without the service extra: say so, no traceback
        print(install_hint(missing), file=sys.stderr)
        return 1
    settings = parse_settings(argv)
    if settings.cpus:
        from service.cpu_quota import is_supervised, serve_under_quota
        from cpuquota.limit import kernel_limit

        if not is_supervised():  # run again inside a new quota group, supervised from outside
            quota = kernel_limit(settings.cpus, settings.period_ms, settings.burst_ms)
            return serve_under_quota(sys.argv[1:] if argv is None else argv, quota)
    return serve(settings)


def serve(settings: Settings) -> int:
    import uvicorn

    from service.accesslog import lean_records, log_config

    os.environ.update(settings.to_env())  # the app (and every worker) rebuilds them from here
    lean_records()  # the access line of every request is CPU the quota charges: keep it short
    try:
        uvicorn.run(
            "service.app:app",
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            log_config=log_config(),
            timeout_graceful_shutdown=5,
        )
    except KeyboardInterrupt:  # serve() without main()'s handler: Python's own Ctrl-C
        return 128 + signal.SIGINT
    except OSError as exc:  # e.g. the port is taken
        print(f"burn-service: cannot serve on {settings.host}:{settings.port}: {exc}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
