"""``http-timing plot FILE...``: draw saved runs (CSV, or the original script's text output)."""

from __future__ import annotations

import argparse
from pathlib import Path

from client.commands.common import EXIT_OK
from client.commands.options import CliError, OneLineParser
from client.data.files import read_run
from client.render.figures import plot_run

__all__ = ["build_plot_parser", "command_plot"]


def build_plot_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="http-timing plot",
                                     description="Draw saved runs (CSV, or the original script's "
                                     "text output) as dots of latency against time.")
    parser.add_argument("files", nargs="+", type=Path, help="run files (.csv, .json or text)")
    parser.add_argument("-o", "--output", type=Path, metavar="PICTURE",
                        help="picture path (one input only; default <pictures-dir>/<name>.png)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"), metavar="DIR",
                        help="where <name>.png goes (default ./pictures)")
    parser.add_argument("--title", help="picture title")
    return parser


def command_plot(argv: list[str]) -> int:
    opts = build_plot_parser().parse_args(argv)
    if opts.output and len(opts.files) > 1:
        raise CliError("-o/--output takes one input file; use --pictures-dir for several")
    runs = [read_run(f) for f in opts.files]  # read all first: a bad file fails before drawing
    for run in runs:
        out = opts.output or opts.pictures_dir / f"{run.path.stem}.png"
        print(plot_run(run, out, title=opts.title))
    return EXIT_OK
