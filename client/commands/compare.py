"""``http-timing compare A B C... [-o PICTURE]``: runs side by side, a picture and a table."""

from __future__ import annotations

from pathlib import Path

from client.commands.common import EXIT_OK
from client.commands.options import CliError, OneLineParser
from client.data.files import read_run
from client.data.naming import compare_stem
from client.render.compare import save_comparison
from client.render.tables import format_table

__all__ = ["build_compare_parser", "command_compare", "free_picture"]


def build_compare_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="http-timing compare",
        description="Several runs stacked, each on its own time axis, plus one latency CDF, "
        "and a table (limit, p50, p90, p99, max, delayed by throttling) printed and saved as "
        "Markdown next to the picture.")
    parser.add_argument("files", nargs="+", type=Path, help="run files (.csv, .json or text)")
    parser.add_argument("-o", "--output", type=Path, metavar="PICTURE",
                        help="the picture (default pictures/compare-<the runs' names>.png, "
                        "never one that exists: -2, -3... then); the table goes next to it "
                        "as .md")
    parser.add_argument("--title", help="picture title")
    return parser


def command_compare(argv: list[str]) -> int:
    opts = build_compare_parser().parse_args(argv)
    if opts.output is not None and opts.output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise CliError(f"-o must end in .png, .svg or .pdf (got {opts.output})")
    runs = [read_run(f) for f in opts.files]  # read all first: a bad file fails before drawing
    if opts.output is None:
        opts.output = free_picture(Path("pictures"), compare_stem([r.path.stem for r in runs]))
    try:
        picture, markdown, rows = save_comparison(runs, opts.output, opts.title)
    except OSError as exc:
        raise CliError(f"cannot write {opts.output}: {exc.strerror or exc}") from None
    print(format_table(rows))
    print(f"picture: {picture}, table: {markdown}")
    return EXIT_OK


def free_picture(folder: Path, stem: str) -> Path:
    """``<folder>/<stem>.png``, or ``<stem>-2.png``, ``-3``...: the first whose picture and
    table (``.md``) are both new, so a default name never overwrites an earlier comparison."""
    candidate, n = folder / f"{stem}.png", 1
    while candidate.exists() or candidate.with_suffix(".md").exists():
        n += 1
        candidate = folder / f"{stem}-{n}.png"
    return candidate
