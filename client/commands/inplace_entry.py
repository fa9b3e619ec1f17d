"""``advise`` and ``sweep`` as the command table runs them: on a running service
(``--cgroup TARGET`` or ``--k8s NS/deployment/NAME``: ``client.commands.advise_live``, ``client.commands.sweep_live``) or on
burn-service started by the command itself (``client.commands.advise``,
``client.commands.sweep``). The options are parsed once here to choose, and again by the
command chosen."""

from __future__ import annotations

from client.commands.advise import build_advise_parser, command_advise, target_from
from client.commands.advise_live import command_advise_live
from client.commands.options import CliError
from client.commands.sweep import build_sweep_parser, command_sweep
from client.commands.sweep_live import command_sweep_live

__all__ = ["advise_entry", "sweep_entry"]


def advise_entry(argv: list[str]) -> int:
    opts = build_advise_parser().parse_args(argv)
    if opts.passive:
        from client.commands.advise_passive import command_advise_passive
        return command_advise_passive(opts, argv, target_from(opts))
    if opts.timeline is not None or opts.requests_from is not None:
        raise CliError("--timeline and --requests-from go with --passive")
    live = opts.cgroup is not None or opts.k8s is not None
    return command_advise_live(opts, argv) if live else command_advise(argv)


def sweep_entry(argv: list[str]) -> int:
    opts = build_sweep_parser().parse_args(argv)
    live = opts.cgroup is not None or opts.k8s is not None
    return command_sweep_live(opts, argv) if live else command_sweep(argv)
