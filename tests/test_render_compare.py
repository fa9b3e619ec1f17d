"""client.render.compare: the stacked comparison picture with its Markdown, and the overlay."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from client.analysis.detect import detect
from client.analysis.model import Workload, predict
from client.render.compare import plot_overlay, save_comparison
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
    predicted = predict(Workload(service_ms=5, cpus=0.3, requests=60))
    out = plot_overlay(measured, [("predicted", predicted.records)],
                       detect(measured.records), tmp_path / "o.png")
    assert out.read_bytes()[:8] == PNG
