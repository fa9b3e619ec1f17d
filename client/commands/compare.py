"""``http-timing compare A B C... [-o PICTURE]``: runs side by side, a picture and a table."""

from __future__ import annotations

from pathlib import Path

from client.commands.common import EXIT_OK
from client.commands.options import CliError, OneLineParser
from client.data.files import read_run
from client.render.compare import save_comparison
from client.render.tables import format_table

__all__ = ["build_compare_parser", "command_compare"]


def build_compare_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="http-timing compare",
        description="Several runs stacked on one time axis plus one latency CDF, and a table "
        "(limit, p50, p90, p99, max, throttled %) printed and saved as Markdown next to the "
        "picture.")
    parser.add_argument("files", nargs="+", type=Path, help="run files (.csv, .json or text)")
    parser.add_argument("-o", "--output", type=Path, default=Path("pictures/compare.png"),
                        metavar="PICTURE", help="the picture (default pictures/compare.png); "
                        "the table goes next to it as .md")
    parser.add_argument("--title", help="picture title")
    return parser


def command_compare(argv: list[str]) -> int:
    opts = build_compare_parser().parse_args(argv)
    if opts.output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise CliError(f"-o must end in .png, .svg or .pdf (got {opts.output})")
    runs = [read_run(f) for f in opts.files]  # read all first: a bad file fails before drawing
    try:
        picture, markdown, rows = save_comparison(runs, opts.output, opts.title)
    except OSError as exc:
        raise CliError(f"cannot write {opts.output}: {exc.strerror or exc}") from None
    print(format_table(rows))
    print(f"picture: {picture}, table: {markdown}")
    return EXIT_OK
