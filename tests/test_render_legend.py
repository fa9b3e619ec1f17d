"""Every picture keeps its legends off the data: each legend, as drawn in the saved file, lies
outside the axes it labels (beside or below them). Runs the render tests that make each kind
of picture with ``Figure.savefig`` watched."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure
from matplotlib.axis import Tick
from matplotlib.text import Text

from client.render.figures import plot_run
from tests import test_render_advise, test_render_compare, test_render_figures
from tests.runs import limits, modelled
from tests.test_render_cgroup_plot import busy_then_idle

def run_with_a_timeline(tmp_path: Path) -> None:
    """A run watched in its group: the dots over the throttled bands, the usage panel below."""
    run = modelled("w", 0.2, {**limits(0.2), "cgroup": {"quota_us": 20000, "period_us": 100000,
                                                        "cpus": 0.2}})
    plot_run(replace(run, timeline=busy_then_idle()), tmp_path / "w.png")



PICTURES: dict[str, Callable[[Path], None]] = {
    "run": test_render_figures.test_plot_run_writes_a_png_with_the_url_and_limit_as_title,
    "comparison": test_render_compare.test_save_comparison_writes_the_picture_and_the_markdown,
    "overlay": test_render_compare.test_plot_overlay,
    "advise": test_render_advise.test_the_picture,
    "advise of a long load": test_render_advise.test_a_long_load_wraps_inside_the_picture,
    "run with its group": run_with_a_timeline,
}


@pytest.mark.parametrize("picture", sorted(PICTURES))
def test_legends_lie_outside_the_axes(picture: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []
    original = Figure.savefig

    def watched(fig: Figure, *args: Any, **kwargs: Any) -> Any:
        result = original(fig, *args, **kwargs)   # drawn: the extents are the file's
        renderer = fig.canvas.get_renderer()      # type: ignore[attr-defined]
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            box, frame = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            overlap_w = min(box.x1, frame.x1) - max(box.x0, frame.x0)
            overlap_h = min(box.y1, frame.y1) - max(box.y0, frame.y0)
            assert overlap_w <= 1 or overlap_h <= 1, (picture, ax.get_title(), box, frame)
            inside = fig.bbox
            assert box.x1 <= inside.x1 + 1 and box.y0 >= inside.y0 - 1, "legend cut off"
            seen.append((ax.get_title(), len(legend.get_texts())))
        return result

    monkeypatch.setattr(Figure, "savefig", watched)
    PICTURES[picture](tmp_path)
    assert seen, f"the {picture} picture has no legend"


@pytest.mark.parametrize("picture", sorted(PICTURES))
def test_no_text_is_cut_off(picture: str, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Titles, subtitles, axis labels and legends: every text drawn lies inside the file (tick
    labels aside: matplotlib keeps those beyond the axes' limits, undrawn)."""
    seen: list[str] = []
    original = Figure.savefig

    def watched(fig: Figure, *args: Any, **kwargs: Any) -> Any:
        result = original(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()      # type: ignore[attr-defined]
        inside = fig.bbox
        ticks = {id(label) for tick in fig.findobj(Tick) for label in (tick.label1, tick.label2)}
        for text in fig.findobj(Text):
            if id(text) in ticks or not text.get_visible() or not text.get_text().strip():
                continue
            box = text.get_window_extent(renderer)
            assert (box.x0 >= inside.x0 - 1 and box.x1 <= inside.x1 + 1
                    and box.y0 >= inside.y0 - 1 and box.y1 <= inside.y1 + 1), (
                picture, text.get_text(), box)
            seen.append(text.get_text())
        return result

    monkeypatch.setattr(Figure, "savefig", watched)
    PICTURES[picture](tmp_path)
    assert seen, f"the {picture} picture has no text"
