"""The pages in a real browser: Debian's Chromium driven by Playwright, against a real server.

Playwright cannot download its own browsers here, so it launches ``/usr/bin/chromium``
(``apt-get install chromium``; scripts/install-system-deps.sh does it for CI). The pi page is
loaded from a ``burn-service`` subprocess with the in-process throttle at 10% CPU, so the loop
is paused every period and the page must show (and highlight) those pauses. The live page
(``http-timing --live``) is watched while a throttled run goes, then at its end. Screenshots are
taken every run (a page that cannot render fails); they replace the docs' pictures in
``pictures/`` only with ``THROTTLE_LAB_UPDATE_PICTURES=1``, so `make test` leaves the tree clean.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, require, running_service, service_process

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
# Debian's Chromium, headless, as root, offline (see shared notes: machine.md)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
UPDATE_PICTURES = os.environ.get("THROTTLE_LAB_UPDATE_PICTURES") == "1"


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    folder = ROOT / "pictures" if UPDATE_PICTURES else tmp_path
    folder.mkdir(exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)
    assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require(CHROMIUM.exists(), f"needs Debian's Chromium at {CHROMIUM} "
            "(apt-get install chromium; Playwright's own download is not used)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


def only_own_requests(page: Any, base: str) -> list[str]:
    """Record every URL the page fetches (a CDN or external asset would show up here)."""
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    return urls


def test_pi_page_shows_throttle_pauses_highlighted(page: Any, tmp_path: Path) -> None:
    with service_process(["--cpu-limit", "5"]) as (base, _proc):
        urls = only_own_requests(page, base)
        # 300000 terms: tens of ms of CPU on a current x86 core, more elsewhere: always several
        # 5 ms budgets, so a pause whatever the phase of the cycle it starts in; 5 % is below
        # the share even a busy machine leaves the service
        response = page.goto(base + "/pi?counter=300000", timeout=60_000)
        assert response is not None and response.status == 200

        summary = page.locator("#pause-summary").inner_text()
        match = re.fullmatch(r"(\d+) pauses?, ([\d.,]+) ms of ([\d.,]+) ms", summary.strip())
        assert match, summary
        pauses = int(match.group(1))
        assert pauses >= 1  # 5 % CPU: the work is paused ~95 ms in every 100 ms period

        rows = page.locator("#gaps tbody tr")
        assert rows.count() >= 2
        highlighted = page.locator("#gaps tbody tr.pause")
        assert highlighted.count() >= 1
        gaps = [int(t.replace(",", "")) for t in
                page.locator("#gaps tbody tr td:first-child").all_inner_texts()]
        assert gaps == sorted(gaps)
        hot = [int(t.replace(",", "")) for t in
               page.locator("#gaps tbody tr.pause td:first-child").all_inner_texts()]
        assert hot == [g for g in gaps if g >= 1000]
        assert max(hot) >= 20_000  # a throttle pause, not scheduling noise
        counts = page.locator("#gaps tbody tr.pause td:nth-child(2)").all_inner_texts()
        assert sum(int(c.replace(",", "")) for c in counts) == pauses
        total = page.locator("#gaps tfoot th.num").inner_text()
        assert total.replace(",", "") == "300000"

        # the highlight is visible: a pause row is painted differently from a plain row
        plain_bg = rows.first.locator("td").first.evaluate(
            "el => getComputedStyle(el).backgroundColor")
        hot_bg = highlighted.first.locator("td").first.evaluate(
            "el => getComputedStyle(el).backgroundColor")
        assert hot_bg != plain_bg
        assert page.locator("#gap-chart circle.pause").count() >= 1
        headline = page.locator("#limit-headline").inner_text()
        assert "in-process throttle: 5% of one CPU per 100 ms cycle (cfs mode)" in headline

        screenshot(page, "pi-page.png", tmp_path)
    assert urls and all(u.startswith(base + "/") for u in urls), urls


def test_landing_page_form_leads_to_the_pi_page(page: Any, tmp_path: Path) -> None:
    with running_service(max_counter=1_000_000) as base:
        urls = only_own_requests(page, base)
        page.goto(base + "/")
        assert page.locator("h1").inner_text().startswith("throttle-lab")
        for link in ("/docs", "/metrics", "/limits"):
            assert page.locator(f'a[href="{link}"]').count() >= 1
        assert page.locator("#limit-headline").inner_text().strip()
        assert "max_counter" not in page.locator("#limits").inner_text()  # folded away
        page.click("#limits summary")
        assert "max_counter\n1000000" in page.locator("#limits dl").inner_text()
        screenshot(page, "landing-page.png", tmp_path)

        page.fill('input[name="counter"]', "3000")
        with page.expect_navigation():
            page.click('form[action="/pi"] button')
        assert page.url == base + "/pi?counter=3000"
        assert page.locator("#gaps tfoot th.num").inner_text().replace(",", "") == "3000"
    assert urls and all(u.startswith(base + "/") for u in urls), urls


def test_bad_counter_shows_a_readable_422_page(page: Any) -> None:
    with running_service(max_counter=5000) as base:
        response = page.goto(base + "/pi?counter=%3Cb%3Ebold%3C%2Fb%3E")
        assert response is not None and response.status == 422
        text = page.locator("main").inner_text()
        assert "counter must be an integer in [0, 5000]" in text
        assert "bold" not in page.content()
        assert page.locator("main b").count() == 0


THROTTLED_PIXELS = """() => {
  const c = document.getElementById("dots");
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;   // the throttled colour, #ff7f0e
  for (let i = 0; i < d.length; i += 4)
    if (d[i + 3] > 100 && d[i] > 235 && Math.abs(d[i + 1] - 127) < 25 && d[i + 2] < 60) n++;
  return n;
}"""


def live_run(page: Any, argv: list[str], total: int, cwd: Path, *,
             cgroup: bool) -> list[str]:
    """``http-timing ARGV --live PORT`` watched in the browser: mid-run the requests so far
    with the throttled ones in their colour (and the group's panel with ``cgroup``), then the
    end. Returns the URLs the page fetched."""
    import subprocess

    from tests.support import BIN, free_port, stop_by_pid
    from tests.test_commands_live import wait_serving

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen([str(BIN / "http-timing"), *argv, "--requests", str(total),
                             "--quiet", "--live", str(port)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_serving(url, proc)
        urls = only_own_requests(page, url)
        page.goto(url)
        page.wait_for_function("window.live.points.length >= 40 && "
                               "window.live.points.some(p => p[2] === 1)", timeout=60_000)
        assert page.locator("#status").inner_text() == "running"
        assert 0 < int(page.locator("#requests").inner_text()) < total
        assert int(page.locator("#throttled").inner_text()) > 0
        page.wait_for_function("window.live.drawn > 0")
        assert page.evaluate(THROTTLED_PIXELS) > 0
        if cgroup:
            page.wait_for_function("window.live.cgroup !== null", timeout=10_000)
            assert page.locator("#cpu-section").is_visible()
            assert "periods throttled" in page.locator("#cpu-title").inner_text()
        else:
            assert not page.locator("#cpu-section").is_visible()
        page.wait_for_function("window.live.end !== null", timeout=90_000)
        _out, err = proc.communicate(timeout=60)
    finally:
        stop_by_pid(proc)
    assert proc.returncode == 0, err
    assert page.locator("#status").inner_text() == "finished"
    assert page.locator("#requests").inner_text() == str(total)
    assert page.evaluate("window.live.points.length") == total
    assert page.evaluate(THROTTLED_PIXELS) > 0
    assert page.locator("#picture-box summary").is_visible()
    assert urls and all(u.startswith(url) for u in urls), urls
    return page.locator("#files li").all_inner_texts()


def test_live_page_of_a_run_under_the_in_process_throttle(page: Any, tmp_path: Path) -> None:
    with service_process(["--cpu-limit", "10"]) as (base, _proc):
        files = live_run(page, ["--url", base + "/cpuBurnFlow", "--name", "inproc"], 120,
                         tmp_path, cgroup=False)
    assert files == ["raw-data/inproc.csv", "raw-data/inproc.json", "pictures/inproc.png"]


@pytest.mark.root
def test_live_page_of_a_run_with_the_groups_cpu_per_period(page: Any, tmp_path: Path) -> None:
    from tests.cgroup_fixtures import burner_in_group
    from tests.support import favour_group, require_kernel_quota

    require_kernel_quota()
    with burner_in_group(0.2) as service:
        favour_group(service.group)   # the quota, not a busy machine's load, throttles it
        files = live_run(page, ["--url", service.base_url + "/burn?ms=12", "--iterations", "0",
                                "--cgroup", str(service.group), "--name", "live"], 160,
                         tmp_path, cgroup=True)
    assert files == ["raw-data/live.csv", "raw-data/live.json", "raw-data/live.cgroup.csv",
                     "pictures/live.png"]
    screenshot(page, "live-page.png", tmp_path)
