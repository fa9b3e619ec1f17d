"""client.render.figures: the dot picture of one run, coloured by the run's detection."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image

from client.analysis.detect import detect_run
from client.data.files import Run
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from client.render.figures import COLOURS, draw_detected, plot_run, pyplot
from tests.runs import limits, modelled

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_throttled_requests_are_the_detections() -> None:
    run = modelled("point3", 0.3, limits(0.3))  # 9 of 60 stall
    run.records.append(RequestRecord(60, 10**9, 1000, 0, error="ConnectError"))
    detection = detect_run(run)
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        draw_detected(ax, run, detection)
        labels = set(ax.get_legend_handles_labels()[1])
        colours = [tuple(c.get_facecolor()[0]) for c in ax.collections]
    finally:
        plt.close(fig)
    # each label counts requests in words: its unit is in it
    assert labels == {"51 requests", "9 requests slow (latency distribution alone)",
                      "1 request failed"}
    assert len(colours) == 3 and detection.throttled_count == 9
    assert COLOURS["throttled"] == "#ff7f0e"


def test_plot_run_writes_a_png_with_the_url_and_limit_as_title(tmp_path: Path) -> None:
    run = modelled("m", 0.3, {**limits(0.3), "url": "http://h/cpuBurnFlow", "iterations": 5000})
    out = plot_run(run, tmp_path / "deep" / "m.png")
    assert out.read_bytes()[:8] == PNG
    height, width = matplotlib.image.imread(out).shape[:2]
    assert (width, height) == (1450, 650)
    capture = Run(tmp_path / "c.txt", [RequestRecord(0, 0, 5_000_000, 200)],
                  RunMetadata.missing())
    assert plot_run(capture, tmp_path / "c.png", title="t").exists()


def test_the_legend_says_how_long_the_throttling_held_the_requests() -> None:
    """Issue 55: a request held 0.02 ms and one held 71 ms were drawn alike; the legend now
    says the range of the holds (``cgroup_held_ns``: the attribution's wall time)."""
    ms = 1_000_000
    held = [20_000, 68 * ms, 71 * ms, 0, 0]   # the first hardly held at all
    records = [RequestRecord(i, i * 100 * ms, 5 * ms + h, 200, cgroup_throttled_ns=h,
                             cgroup_nr_throttled=1 if h else 0, cgroup_held_ns=h)
               for i, h in enumerate(held)]
    run = Run(Path("held.csv"), records, RunMetadata.missing())
    detection = detect_run(run)
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        draw_detected(ax, run, detection)
        labels = set(ax.get_legend_handles_labels()[1])
    finally:
        plt.close(fig)
    assert labels == {"2 requests", "3 requests delayed by throttling (cgroup counters "
                                    "(cpu.stat)), held 0.02–71 ms"}
