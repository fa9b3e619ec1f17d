"""service.pages: /, /pi and /api/pi on a real server, the browser 422 page, the pure helpers."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx
import pytest

from service.pages import build_chart, describe_pauses, flatten_limits, limit_headline, templates
from service.pi import PauseSummary, leibniz_pi
from tests.support import running_service

HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


class Tags(HTMLParser):
    """Every start tag with its attributes, to check links and assets without regexes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def assert_self_contained(text: str) -> None:
    """No CDN, no external asset: only relative links, no scripts or stylesheets to fetch."""
    for tag, attrs in Tags(text).tags:
        assert tag not in ("script", "link", "img", "iframe"), tag
        for name in ("href", "src", "action"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith("/"), (tag, name, value)


def test_api_pi_shape_and_server_timing() -> None:
    with running_service(max_counter=300_000) as base:
        r = httpx.get(base + "/api/pi", params={"counter": 50_000}, timeout=30)
        default = httpx.get(base + "/api/pi", timeout=30).json()
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert {"pi", "counter", "wall_ns", "cpu_ns", "gaps"} <= set(body)
    assert body["counter"] == 50_000 and body["pi"] == leibniz_pi(50_000)
    assert abs(body["error"]) == pytest.approx(1 / 50_000, rel=0.01)
    us = [g["us"] for g in body["gaps"]]
    assert us == sorted(us) and len(set(us)) == len(us)
    assert sum(g["count"] for g in body["gaps"]) == 50_000
    assert all(g["count"] > 0 for g in body["gaps"])
    # the gaps add up to the loop's wall time (each floored by < 1 us)
    total_us = sum(g["us"] * g["count"] for g in body["gaps"])
    assert total_us <= body["wall_ns"] / 1000 < total_us + 50_000
    assert 0 < body["cpu_ns"] <= body["wall_ns"] * 1.05 + 1_000_000
    assert body["pauses"]["threshold_us"] == 1000
    assert body["pauses"]["count"] == sum(g["count"] for g in body["gaps"] if g["us"] >= 1000)
    timing = r.headers["server-timing"]
    assert re.search(r"burn;dur=\d+\.\d{3}", timing) and re.search(r"cpu;dur=\d+\.\d{3}", timing)
    assert default["counter"] == 100_000


def test_pi_page_shows_result_table_chart_and_limits() -> None:
    with running_service(max_counter=300_000, max_iterations=4321) as base:
        r = httpx.get(base + "/pi", params={"counter": 20_000}, headers=HTML, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    text = r.text
    assert "burn;dur=" in r.headers["server-timing"]
    assert "Limit in force" in text and "max_counter" in text and "300000" in text
    assert "4321" in text  # max_iterations, from describe_limits
    assert f"{leibniz_pi(20_000):.12f}" in text
    assert re.search(r"\d+ pauses?, [\d.,]+ ms of [\d.,]+ ms", text)
    assert "<svg" in text and 'id="gap-chart"' in text
    rows = re.findall(r'<tr(?: class="pause")?><td class="num">([\d,]+)</td><td class="num">([\d,]+)</td>',
                      text)
    assert rows, "the gap table has rows"
    gaps = [int(g.replace(",", "")) for g, _ in rows]
    assert gaps == sorted(gaps)
    assert sum(int(c.replace(",", "")) for _, c in rows) == 20_000
    # highlighted rows are exactly the gaps of 1 ms or more
    highlighted = [int(g.replace(",", "")) for g in
                   re.findall(r'<tr class="pause"><td class="num">([\d,]+)</td>', text)]
    assert highlighted == [g for g in gaps if g >= 1000]
    assert_self_contained(text)


def test_landing_page_links_forms_and_limits() -> None:
    with running_service(max_counter=123_456) as base:
        r = httpx.get(base + "/", headers=HTML)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    tags = Tags(r.text).tags
    actions = {attrs.get("action") for tag, attrs in tags if tag == "form"}
    assert actions == {"/pi", "/cpuBurnFlow"}
    inputs = {attrs.get("name"): attrs for tag, attrs in tags if tag == "input"}
    assert inputs["counter"]["max"] == "123456" and inputs["iterations"]["type"] == "number"
    hrefs = {attrs.get("href") for tag, attrs in tags if tag == "a"}
    assert {"/docs", "/metrics", "/limits", "/pi"} <= hrefs
    assert "Limit in force" in r.text and "cpu_count" in r.text
    assert_self_contained(r.text)


@pytest.mark.parametrize("bad", ["-1", "1001", "abc", "1e3", "<script>alert(1)</script>",
                                 "99999999999999999999999"])
def test_bad_counter_gets_a_readable_422_page_for_browsers_and_json_for_apis(bad: str) -> None:
    with running_service(max_counter=1000) as base:
        page = httpx.get(base + "/pi", params={"counter": bad}, headers=HTML)
        api = httpx.get(base + "/api/pi", params={"counter": bad}, headers=HTML)
        plain = httpx.get(base + "/pi", params={"counter": bad})
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    assert "counter must be an integer in [0, 1000]" in page.text
    assert bad not in page.text and "alert" not in page.text
    assert_self_contained(page.text)
    for r in (api, plain):  # an API path, or no text/html in Accept: JSON
        assert r.status_code == 422 and r.headers["content-type"] == "application/json"
        assert r.json()["detail"][0]["parameter"] == "counter"
        assert r.json()["detail"][0]["allowed"] == {"min": 0, "max": 1000}
        assert bad not in r.text


def test_burn_route_keeps_json_422_for_browsers() -> None:
    with running_service(max_iterations=10) as base:
        r = httpx.get(base + "/cpuBurnFlow", params={"iterations": "11"}, headers=HTML)
    assert r.status_code == 422 and r.json()["detail"][0]["parameter"] == "iterations"


def test_limits_report_max_counter() -> None:
    with running_service(max_counter=777) as base:
        assert httpx.get(base + "/limits").json()["max_counter"] == 777


def test_templates_escape_every_value() -> None:
    html = templates.get_template("error.html").render(
        title="t<i>", problems=[{"message": "<script>alert(1)</script>"}],
        limits=[("name<b>", "value\"'&")], limit_headline="<em>none</em>")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<em>" not in html and "&lt;em&gt;none" in html
    assert "name&lt;b&gt;" in html and "value&#34;&#39;&amp;" in html
    assert "t&lt;i&gt;" in html


def test_describe_pauses() -> None:
    summary = PauseSummary(count=8, total_us=712_000, longest_us=92_295, threshold_us=1000)
    assert describe_pauses(summary, 797_000_000) == "8 pauses, 712 ms of 797 ms"
    one = PauseSummary(count=1, total_us=1_500, longest_us=1_500, threshold_us=1000)
    assert describe_pauses(one, 73_000_000) == "1 pause, 1.50 ms of 73.0 ms"


def test_build_chart_marks_only_pauses_and_keeps_small_gaps_flat() -> None:
    chart = build_chart([10_000_000, 20_000_000, 30_000_000], [5_000, 90_000_000, 3_000],
                        wall_ns=30_000_000)
    assert len(chart.pauses) == 1
    x, y = chart.pauses[0]
    assert chart.left < x < chart.width and 0 < y < chart.threshold_y < chart.bottom
    assert chart.stems.count("M") == 3 and chart.x_max_label == "30.0 ms"
    quiet = build_chart([1_000_000], [40_000], wall_ns=1_000_000)
    assert quiet.pauses == [] and quiet.y_max_label == "2.00 ms"  # twice the 1 ms threshold
    assert quiet.zero_label_fits and not chart.zero_label_fits  # 1 ms of 99 ms: too close
    assert build_chart([], [], wall_ns=0).stems == ""


def test_flatten_limits() -> None:
    rows = flatten_limits({"cpu_count": 2, "inprocess": None,
                           "cgroup": {"version": 1, "quota_us": 30000, "burst": None},
                           "empty": {}, "cpus": 0.3, "on": True})
    assert rows == [("cpu_count", "2"), ("inprocess", "off"), ("cgroup.version", "1"),
                    ("cgroup.quota_us", "30000"), ("cgroup.burst", "none"), ("empty", "none"),
                    ("cpus", "0.3"), ("on", "yes")]


def test_limit_headline() -> None:
    assert limit_headline({"cpu_count": 2, "inprocess": None, "cgroup": None}) == (
        "no CPU limit: the service may use every CPU (2)")
    both = limit_headline({
        "inprocess": {"cpu_limit_percent": 10.0, "cycle_ms": 100.0, "mode": "cfs"},
        "cgroup": {"version": 1, "quota_us": 30000, "period_us": 100000, "burst_us": 0,
                   "cpus": 0.3}})
    assert both == ("in-process throttle: 10% of one CPU per 100 ms cycle (cfs mode); "
                    "kernel CPU quota: 0.3 CPU (30000 µs per 100000 µs period, cgroup v1)")
    # a cgroup without a quota is no limit
    assert limit_headline({"cgroup": {"version": 1, "quota_us": None}}).startswith("no CPU limit")
    boundary = {"cpu_limit_percent": 5.0, "cycle_ms": 100.0, "mode": "boundary",
                "per": "worker thread"}
    assert limit_headline({"inprocess": boundary}) == (
        "in-process throttle: 5% of one CPU per worker thread, per 100 ms cycle (boundary mode)")
