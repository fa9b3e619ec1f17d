"""The documentation site: `mkdocs build --strict` (mkdocs.yml, docs/, README.md as its home
page), a reference that lists every option of every console script and every column of the
file formats, and the built pages rendered with their pictures in a real Chromium.

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
from tests.support import ROOT
from tests.test_browser import browser, page  # noqa: F401  (the browser tests' fixtures)

MKDOCS_ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
PROGRAMS = {"http-timing": http_timing_main, "burn-service": burn_service_main,
            "cpu-quota": cpu_quota_main}


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
    assert "Three ways to use it" in home and 'href="docs/' not in home
    assert 'href="getting-started.html"' in home  # pages are files: the site opens from disk


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
    assert console_scripts() == set(PROGRAMS)  # a new console script needs its reference page
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
