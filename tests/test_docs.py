"""The documentation: every link and picture of README.md and docs/ found where a code host
(GitHub) finds it, relative to the file; the reference pages committed as the code generates
them; the site `mkdocs build --strict` makes of them (mkdocs.yml, docs/, README.md as its home
page), resolving the same links, with a reference that lists every option of every console
script and every column of the file formats; the built pages rendered with their pictures in
a real Chromium.

The options are read from what each program prints for ``--help`` (its real parser, called
in-process), not from the generator the site uses, so a generator that missed one fails here.
"""

from __future__ import annotations

import dataclasses
import html
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from client.commands import COMMANDS
from client.commands import main as http_timing_main
from client.data.metadata import RunMetadata
from client.data.record import COLUMNS
from client.data.timeline import PRESSURE_COLUMNS, TIMELINE_COLUMNS
from service.cli import main as burn_service_main
from service.cpu_quota import main as cpu_quota_main
from scripts.mkdocs_hooks import REFERENCE, generated, site_link
from tests.support import ROOT
from tests.test_browser import browser, page  # noqa: F401  (the browser tests' fixtures)

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)")  # the target of [text](target) and ![alt](target)
MKDOCS_ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
PROGRAMS = {"http-timing": http_timing_main, "burn-service": burn_service_main,
            "cpu-quota": cpu_quota_main}
# kubectl's plugin (kubectl throttle COMMAND): http-timing's commands under kubectl's name,
# documented on http-timing's page
ALIASES = {"kubectl-throttle": "http-timing"}


def github_anchors(markdown: str) -> set[str]:
    """The anchors a code host gives a Markdown file's headings: the heading's text, lower
    case, without punctuation, a hyphen for each space, ``-1``, ``-2`` after repeats."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for match in re.finditer(r"^#{1,6}[ \t]+(.*?)[ \t#]*$", FENCE.sub("", markdown), re.MULTILINE):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", re.sub(r"<[^>]+>", "", match.group(1)))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def relative_links(document: Path) -> Iterator[str]:
    """Every link and image target of a Markdown file that is not a URL (code blocks skipped)."""
    for match in LINK.finditer(FENCE.sub("", document.read_text())):
        if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", match.group(1)):
            yield match.group(1)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_link_and_picture_is_found_as_a_code_host_reads_it(document: Path) -> None:
    for link in relative_links(document):
        path, _, anchor = link.partition("#")
        target = (document.parent / path).resolve() if path else document
        assert target.exists(), f"{document.relative_to(ROOT)}: {link} is no file"
        if anchor and target.suffix == ".md":
            assert anchor in github_anchors(target.read_text()), \
                f"{document.relative_to(ROOT)}: {link} names no heading"


def test_anchors_are_a_code_hosts() -> None:
    assert github_anchors("# Watching a run live: `--live`\n## The home page's picture\n"
                          "## A\n## A\n```\n# not a heading\n```\n") == {
        "watching-a-run-live---live", "the-home-pages-picture", "a", "a-1"}


@pytest.mark.parametrize("target, source, site_page, site", [
    ("docs/limits.md#burst", "README.md", "index.md", "limits.md#burst"),
    ("pictures/a.png", "README.md", "index.md", "pictures/a.png"),
    ("../pictures/a.png", "docs/limits.md", "limits.md", "pictures/a.png"),
    ("../../pictures/a.png", "docs/reference/http-api.md", "reference/http-api.md",
     "../pictures/a.png"),
    ("../README.md#two-commands", "docs/timing.md", "timing.md", "index.md#two-commands"),
    ("../limits.md", "docs/reference/cpu-quota.md", "reference/cpu-quota.md", "../limits.md"),
    ("#the-model", "docs/explaining.md", "explaining.md", "#the-model"),
    ("https://example.org/x.md", "README.md", "index.md", "https://example.org/x.md"),
])
def test_the_site_resolves_a_link_as_the_repository_does(target: str, source: str,
                                                         site_page: str, site: str) -> None:
    assert site_link(target, source, site_page) == site


@pytest.mark.parametrize("reference", sorted(REFERENCE.glob("*.md")), ids=lambda p: p.name)
def test_reference_pages_are_committed_as_the_code_generates_them(reference: Path) -> None:
    text = reference.read_text()
    if "<!-- generated:" in text:
        assert "<!-- end generated -->" in text, f"{reference.name}: a generated part has no end"
    assert generated(text) == text, \
        f"{reference.relative_to(ROOT)} is out of date: run make reference"


def test_a_stale_reference_is_rewritten_whole() -> None:
    """An option that is gone, or a marker written without its end: the page is rewritten."""
    written = (REFERENCE / "cpu-quota.md").read_text()
    stale = written.replace("| `--cpus` |", "| `--gone` | | an option that is gone |\n| `--cpus` |")
    assert generated(stale) == written
    bare = written[:written.index("<!-- generated:")] + "<!-- generated: options cpu-quota -->\n"
    assert generated(bare) == written


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(config), "--site-dir", str(site)],
                          cwd=config.parent, env=MKDOCS_ENV, capture_output=True, text=True,
                          timeout=240)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    built = mkdocs_build(ROOT / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return site


def page_text(site: Path, path: str) -> str:
    """A built page's text: tags removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", (site / f"{path}.html").read_text()))


def test_strict_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """The check has teeth: the same site with one link to a missing page does not build."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "pictures").symlink_to(ROOT / "pictures")
    with (tmp_path / "docs" / "limits.md").open("a") as f:
        f.write("\nSee [the missing page](missing.md).\n")
    built = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "missing.md" in built.stderr


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    for name in ("index", "getting-started", "limits", "timing", "explaining", "own-service",
                 "choosing-a-limit", "kubernetes", "benchmarks", "developing",
                 "reference/http-timing", "reference/burn-service", "reference/cpu-quota",
                 "reference/http-api", "reference/file-formats"):
        assert (site / f"{name}.html").is_file(), name
    # the home page is the README, whose links into docs/ point into the site
    home = (site / "index.html").read_text()
    assert "Is throttling hurting my service?" in home and 'href="docs/' not in home
    assert 'src="pictures/calibrated-kernel-sweep.png"' in home
    assert 'href="getting-started.html"' in home  # pages are files: the site opens from disk


def test_the_site_keeps_option_names_whole_and_the_home_picture_wide(site: Path) -> None:
    """The reference's option tables carry the class the site's CSS keeps unbroken, and the
    home page gives its picture the table of contents' width too (README.md is untouched)."""
    css = (site / "stylesheets" / "extra.css").read_text()
    assert ".options td:first-child code" in css and "white-space: nowrap" in css
    reference = (site / "reference" / "http-timing.html").read_text()
    assert 'stylesheets/extra.css' in reference
    assert reference.count('<div class="options">') == 1 + len(COMMANDS) - 1  # run is shown once
    assert 'data-md-type="toc" hidden' in (site / "index.html").read_text()
    assert 'data-md-type="toc" hidden' not in reference
    assert not (ROOT / "README.md").read_text().startswith("---")


def help_options(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> set[str]:
    """Every option string a program's ``--help`` lists (the lines of its options sections)."""
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    options: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"^  (-.*?)(?:\s{2,}|$)", line)
        if match:
            options.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", match.group(1)))
    return options


def console_scripts() -> set[str]:
    return {ep.name for ep in entry_points(group="console_scripts")
            if ep.dist is not None and ep.dist.name == "throttle-lab"}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_reference_lists_every_option(site: Path, program: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert console_scripts() == set(PROGRAMS) | set(ALIASES)  # a new one needs its page
    reference = (site / "reference" / f"{program}.html").read_text()
    text = page_text(site, f"reference/{program}")
    commands: list[list[str]] = [[]]
    if program == "http-timing":
        commands += [[name] for name in COMMANDS]
    checked = 0
    for argv in commands:
        line = " ".join([program, *argv])
        heading = next((h for h in (line, f"{program} [{argv[0]}]" if argv else None)
                        if h and h in text), None)
        assert heading, f"no section for {line}"
        section = text[text.index(heading):]
        options = help_options(PROGRAMS[program], argv, capsys)
        assert "--help" in options and len(options) >= 3, (line, options)
        for option in options:
            assert f"<code>{option}</code>" in reference, f"{line}: {option} not in the reference"
            assert option in section, f"{line}: {option} not in its section"
        checked += len(options)
    assert checked >= (100 if program == "http-timing" else 5)


def test_reference_lists_every_column_and_endpoint(site: Path) -> None:
    formats = (site / "reference" / "file-formats.html").read_text()
    for column in (*COLUMNS, *TIMELINE_COLUMNS, *PRESSURE_COLUMNS):
        assert f"<code>{column}</code>" in formats, f"column {column}"
    bookkeeping = {"extra", "absent", "present"}  # RunMetadata's fields about the file, not in it
    for key in {f.name for f in dataclasses.fields(RunMetadata)} - bookkeeping:
        assert f"<code>{key}</code>" in formats, f"metadata key {key}"
    from service.app import app

    api = page_text(site, "reference/http-api")
    for path, methods in app.openapi()["paths"].items():
        for method in methods:
            assert f"{method.upper()} {path}" in api, (method, path)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site on a loopback port, as a static web server would serve it."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: QuietHandler(*a, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.browser
@pytest.mark.parametrize("via, path, heading, pictures", [
    ("http", "/", "throttle-lab", {"calibrated-kernel-sweep.png"}),
    ("http", "/reference/http-api.html", "burn-service's HTTP API",
     {"pi-page.png", "landing-page.png"}),
    ("file", "/index.html", "throttle-lab", {"calibrated-kernel-sweep.png"}),  # site/index.html from disk
])
def test_pages_render_with_their_pictures(page: Any, served: str, site: Path,  # noqa: F811
                                          tmp_path: Path, via: str, path: str, heading: str,
                                          pictures: set[str]) -> None:
    base = served if via == "http" else site.as_uri()
    elsewhere: list[str] = []  # a page that fetches from anywhere else fails, and is not let out

    def only_the_site(route: Any) -> None:
        url = route.request.url
        if url.startswith((base, "data:", "blob:")):
            route.continue_()
        else:
            elsewhere.append(url)
            route.abort()

    page.route("**/*", only_the_site)
    response = page.goto(base + path, wait_until="load", timeout=60_000)
    assert response is not None and response.ok
    assert page.locator("article h1").first.inner_text().rstrip("¶ \n") == heading
    assert page.locator("nav").first.is_visible()  # Material's navigation rendered
    images = page.evaluate("Array.from(document.images).map(i => "
                           "[new URL(i.src).pathname, i.complete, i.naturalWidth])")
    loaded = {src.rsplit("/", 1)[-1] for src, complete, width in images if complete and width > 0}
    assert pictures <= loaded, images
    assert all(width > 0 for _src, _complete, width in images), images
    assert elsewhere == []
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert (tmp_path / "page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
