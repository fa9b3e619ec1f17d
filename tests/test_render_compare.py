"""client.render.compare: the stacked comparison picture with its Markdown, and the overlay."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.image
import pytest
from matplotlib.axes import Axes

from client.analysis.detect import detect
from client.analysis.model import Scenario, predict
from client.data.files import Run
from client.render.compare import comparison_figure, plot_overlay, save_comparison
from client.render.figures import pyplot
from client.render.tables import format_markdown
from tests.runs import limits, modelled

PNG = b"\x89PNG\r\n\x1a\n"


def test_save_comparison_writes_the_picture_and_the_markdown(tmp_path: Path) -> None:
    runs = [modelled("one", 1, limits(1)), modelled("point3", 0.3, limits(0.3)),
            modelled("point1", 0.1, limits(0.1))]
    out = tmp_path / "deep" / "sweep.png"
    picture, markdown, rows = save_comparison(runs, out, title="sweep")
    assert picture == out and out.read_bytes()[:8] == PNG
    height, width = matplotlib.image.imread(out).shape[:2]
    assert width == 1500 and height >= 2.6 * 3 * 100  # three stacked runs
    assert markdown == tmp_path / "deep" / "sweep.md"
    text = markdown.read_text()
    assert text.startswith("![sweep](sweep.png)\n") and format_markdown(rows) in text
    with pytest.raises(ValueError):
        save_comparison([], tmp_path / "none.png")


def test_plot_overlay(tmp_path: Path) -> None:
    measured = modelled("m", 0.3, limits(0.3))
    predicted = predict(Scenario(service_ms=5, cpus=0.3, requests=60))
    out = plot_overlay(measured, [("predicted", predicted.records)],
                       detect(measured.records), tmp_path / "o.png")
    assert out.read_bytes()[:8] == PNG


def sweep_runs() -> list[Run]:
    """A sweep's three runs: the same 60 requests at 1, 0.3 and 0.1 CPU, from 0.3 s to 6 s."""
    return [modelled(f"s-kernel-{cpus:g}", cpus, limits(cpus)) for cpus in (1, 0.3, 0.1)]


def test_each_run_of_a_sweep_fills_a_panel_on_its_own_time_axis() -> None:
    runs = sweep_runs()
    fig = comparison_figure(runs)
    try:
        *rows, cdf = fig.axes
        assert len(rows) == len(runs) and cdf.get_title() == "latency CDF"
        for ax, run in zip(rows, runs):
            starts = [r.start_ns / 1e9 for r in run.records]
            lo, hi = ax.get_xlim()
            assert lo <= min(starts) and hi >= max(starts)
            # its own data and matplotlib's 5 % margins, not the longest run's axis
            assert hi - lo <= 1.2 * (max(starts) - min(starts))
            assert ax.get_ylim() == rows[0].get_ylim()  # latencies at their true size
        longest = max(r.start_ns for r in runs[-1].records) / 1e9
        assert rows[0].get_xlim()[1] < longest / 2
    finally:
        pyplot().close(fig)


def legend_texts(ax: Axes) -> list[str]:
    legend = ax.get_legend()
    return [text.get_text().replace("\n", " ") for text in legend.get_texts()] if legend else []


def test_every_legend_says_its_unit() -> None:
    sweep = comparison_figure(sweep_runs())
    pair = comparison_figure([modelled("a", 0.3, limits(0.3)), modelled("b", 0.3, limits(0.3))])
    try:
        # a sweep's runs differ only by their limits: the CDF names the limits
        assert legend_texts(sweep.axes[-1]) == [
            "1 CPU (60 requests)", "0.3 CPU (60 requests)", "0.1 CPU (60 requests)"]
        assert legend_texts(pair.axes[-1]) == ["a: 0.3 CPU (60 requests)",
                                               "b: 0.3 CPU (60 requests)"]
        for ax in sweep.axes[:-1] + pair.axes[:-1]:
            texts = legend_texts(ax)
            assert texts and all(re.match(r"\d+ requests? ", text + " ") for text in texts)
    finally:
        pyplot().close(sweep)
        pyplot().close(pair)
