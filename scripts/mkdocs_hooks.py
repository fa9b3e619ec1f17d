"""MkDocs hooks for the documentation site (``mkdocs.yml``: ``hooks:``), and the writer of the
reference pages' generated parts: ``make docs`` runs both, ``make reference`` the writer alone.

- Links are written as a code host reads them, relative to the file in the repository; the
  site resolves the same paths. The home page is ``README.md`` itself (its ``docs/x.md`` is the
  site's ``x.md``), and every image in ``pictures/`` is added to the site as ``pictures/<name>``
  (a page in ``docs/`` links ``../pictures/x.png``, as the README links ``pictures/x.png``).
- The reference is generated from the code and committed, so it reads on a code host too:
  between ``<!-- generated: options PROGRAM -->`` and ``<!-- end generated -->`` stand the
  options of that console script, taken from the very argparse parser its ``main`` builds (for
  ``http-timing``, that of every command in ``client.commands.COMMANDS``); between
  ``<!-- generated: openapi -->`` and its end, burn-service's HTTP API from
  ``service.app.app.openapi()``. ``python -m scripts.mkdocs_hooks`` writes them
  (``--check``: exit 1 when a page is out of date).
"""

from __future__ import annotations

import argparse
import html
import importlib
import json
import os
import posixpath
import re
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from unittest import mock

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

__all__ = ["REFERENCE", "capture_parser", "console_scripts", "generated", "main", "on_files",
           "on_page_markdown", "openapi_markdown", "options_markdown", "program_parsers",
           "site_link"]

ROOT = Path(__file__).resolve().parent.parent
PICTURES = ROOT / "pictures"
IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif"}
REFERENCE = ROOT / "docs" / "reference"
GENERATED = re.compile(r"^<!-- generated: (options|openapi)[ ]*(\S*) -->$", re.MULTILINE)
END_GENERATED = "<!-- end generated -->"
HELP_WIDTH = "80"  # argparse lays usage out to $COLUMNS: one width wherever it runs, one the
# site's code blocks show whole at a laptop's width
LINK = re.compile(r"(\]\()([^)\s]+)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


# --- the files: README as the home page, pictures/ as the site's pictures -------------------

def on_files(files: Files, config: MkDocsConfig) -> Files:
    home = files.get_file_from_path("index.md")
    if home is not None:
        files.remove(home)
    files.append(File.generated(config, "index.md", content=(ROOT / "README.md").read_text()))
    for picture in sorted(PICTURES.iterdir()):
        if picture.suffix.lower() in IMAGE_SUFFIXES:
            files.append(File(f"pictures/{picture.name}", src_dir=str(ROOT),
                              dest_dir=config.site_dir,
                              use_directory_urls=config.use_directory_urls))
    return files


# --- links: as the repository has them, made the site's ------------------------------------

def _site_path(repo_path: str) -> str | None:
    """Where a file of the repository is in the site, or None for one the site does not have."""
    if repo_path == "README.md":
        return "index.md"
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    if repo_path.startswith("pictures/"):
        return repo_path
    return None


def site_link(target: str, source: str, page: str) -> str:
    """A link as written in the repository's file ``source`` (relative to it, as a code host
    reads it), made relative to the site's page ``page``; anything else is left as it is."""
    path, hash_, anchor = target.partition("#")
    if not path or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^/", path):
        return target
    site = _site_path(posixpath.normpath(posixpath.join(posixpath.dirname(source), path)))
    if site is None:
        return target
    return posixpath.relpath(site, posixpath.dirname(page) or ".") + hash_ + anchor


def site_links(markdown: str, source: str, page: str) -> str:
    """Every Markdown link and image of a page, outside code blocks, made the site's."""

    def links(text: str) -> str:
        return LINK.sub(lambda m: m.group(1) + site_link(m.group(2), source, page), text)

    out, start = [], 0
    for fence in FENCE.finditer(markdown):
        out += [links(markdown[start:fence.start()]), fence.group(0)]
        start = fence.end()
    return "".join([*out, links(markdown[start:])])


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    uri = page.file.src_uri
    if uri == "index.md":  # the home page's picture gets the table of contents' width too
        page.meta.setdefault("hide", ["toc"])
    source = "README.md" if uri == "index.md" else f"docs/{uri}"
    return site_links(markdown, source, uri)


# --- options, from the parsers the console scripts build ------------------------------------

class _Captured(BaseException):
    """Raised instead of parsing: carries the parser a ``main`` built (a BaseException, so no
    ``except Exception`` in a command can swallow it)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def capture_parser(main: Callable[[list[str]], Any], argv: list[str]) -> argparse.ArgumentParser:
    """The argparse parser ``main(argv)`` parses its arguments with, taken at the moment it
    parses them (nothing runs after that)."""

    def parse_known_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", parse_known_args):
        try:
            main(argv)
        except _Captured as captured:
            return captured.parser
    raise RuntimeError(f"{main.__module__}.{main.__name__}({argv}) parsed no arguments")


def console_scripts() -> dict[str, str]:
    """This project's console scripts: name -> ``module:function`` (from its installed
    metadata, i.e. ``[project.scripts]``)."""
    return {ep.name: ep.value for ep in entry_points(group="console_scripts")
            if ep.dist is not None and ep.dist.name == "throttle-lab"}


def program_parsers(program: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command line, parser) for a console script and, when its module has a ``COMMANDS``
    registry (http-timing), for each of its commands."""
    module_name, _, function = console_scripts()[program].partition(":")
    module = importlib.import_module(module_name)
    main = getattr(module, function)
    bare = capture_parser(main, [])
    commands = {command: capture_parser(main, [command])
                for command in getattr(module, "COMMANDS", {})}
    # the command the program runs when given none (http-timing's `run`) is shown once
    default = next((c for c, p in commands.items() if p.format_help() == bare.format_help()), None)
    yield (f"{program} [{default}]" if default else program), bare
    for command, parser in commands.items():
        if command != default:
            yield f"{program} {command}", parser


def _text(text: str) -> str:
    """Plain text (a help or a description) as Markdown that shows it as it is: one line,
    HTML and Markdown's own characters escaped."""
    text = html.escape(" ".join(text.split()), quote=False)
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


def _cell(text: str) -> str:
    return _text(text)


def _expand_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = parser.prog
    for key in ("choices",):
        if params.get(key) is not None:
            params[key] = ", ".join(map(str, params[key]))
    try:
        return action.help % params
    except (KeyError, TypeError, ValueError):
        return action.help


def _arguments(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None:
        return " \\| ".join(f"`{c}`" for c in action.choices)
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    text = f"`{metavar}`"
    if action.nargs in ("*", "+", argparse.REMAINDER):
        text += " ..."
    return text


def options_markdown(program: str) -> str:
    """Markdown: for each parser of ``program``, its usage and a table of every argument."""
    out: list[str] = []
    for line, parser in program_parsers(program):
        out += [f"## `{line}`", "", "```text", parser.format_usage().strip(), "```", ""]
        if parser.description:
            out += [_text(parser.description), ""]
        # in a block of class "options": the site's CSS keeps option names whole
        out += ['<div class="options" markdown>', "",
                "| option | value | what it does |", "|---|---|---|"]
        for action in parser._actions:  # argparse has no public list of its arguments
            if action.help == argparse.SUPPRESS:
                continue
            names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
            out.append(f"| {names} | {_arguments(action)} | "
                       f"{_cell(_expand_help(parser, action))} |")
        out += ["", "</div>", ""]
        if parser.epilog:  # as --help prints it (it may be laid out by hand)
            out += ["```text", parser.epilog.strip("\n"), "```", ""]
    return "\n".join(out)


# --- burn-service's HTTP API, from its OpenAPI ----------------------------------------------

def _schema_type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    kind = str(schema.get("type", schema.get("$ref", "").rpartition("/")[2] or "any"))
    bounds = [f"{word} {schema[key]}" for key, word in
              (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
               ("exclusiveMaximum", "<")) if key in schema]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def openapi_markdown() -> str:
    """Markdown: every path and method of burn-service's OpenAPI, its parameters and answers."""
    from service.app import app  # the service extra: part of the docs' venv via `test`

    spec = app.openapi()
    out: list[str] = [f"OpenAPI {spec['openapi']}, `{spec['info']['title']}` "
                      f"{spec['info']['version']} (served at `/openapi.json`, `/docs`).", ""]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            out += [f"### `{method.upper()} {path}`", ""]
            text = operation.get("description") or operation.get("summary") or ""
            if text:
                out += [_text(text), ""]
            params = operation.get("parameters", [])
            if params:
                out += ["| parameter | in | type | default | required |", "|---|---|---|---|---|"]
                for p in params:
                    schema = p.get("schema", {})
                    default = json.dumps(schema["default"]) if "default" in schema else ""
                    out.append(f"| `{p['name']}` | {p['in']} | {_cell(_schema_type(schema))} | "
                               f"{_cell(default)} | {'yes' if p.get('required') else 'no'} |")
                out.append("")
            answers = ", ".join(f"`{code}` {_cell(r.get('description', ''))}"
                                for code, r in operation.get("responses", {}).items())
            if answers:
                out += [f"Answers: {answers}.", ""]
    return "\n".join(out)


# --- the reference pages: their generated parts written ------------------------------------

def generated(text: str) -> str:
    """A reference page with each generated part as the code makes it now (a marker without its
    end gets one)."""
    out, start = [], 0
    for match in GENERATED.finditer(text):
        end = text.find(END_GENERATED, match.end())
        following = GENERATED.search(text, match.end())
        if end < 0 or (following is not None and following.start() < end):
            end, skip = match.end(), 0
        else:
            skip = len(END_GENERATED)
        kind, argument = match.group(1), match.group(2)
        previous = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = HELP_WIDTH
        try:
            body = options_markdown(argument) if kind == "options" else openapi_markdown()
        finally:
            if previous is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = previous
        out += [text[start:match.end()], "\n\n", body.strip("\n"), "\n\n", END_GENERATED]
        start = end + skip
    return "".join([*out, text[start:]])


def main(argv: list[str] | None = None) -> int:
    """Write every reference page's generated parts; ``--check`` only says which are stale."""
    check = (argv if argv is not None else sys.argv[1:]) == ["--check"]
    stale = []
    for page in sorted(REFERENCE.glob("*.md")):
        text = page.read_text()
        now = generated(text)
        if now != text:
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(now)
    for page in stale:
        print(f"{page}: {'out of date: run make reference' if check else 'written'}",
              file=sys.stderr if check else sys.stdout)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
