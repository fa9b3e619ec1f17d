"""client.render.cgroup_plot: the throttled bands behind a run's dots and the usage panel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Rectangle

from client.render.figures import pyplot, save_figure
from client.render.cgroup_plot import draw_throttled_bands, draw_usage_panel, usage_title
from client.data.timeline import CgroupSample
from cpuquota.limit import Limit

MS = 1_000_000


def busy_then_idle() -> list[CgroupSample]:
    """0.2 CPU quota: 1 s at the quota (runs 20 ms, throttled 80 ms, in each 100 ms period
    from 0), then 3 s idle. Samples every 10 ms, and 1 ms either side of each boundary
    instead of on it."""
    boundaries = range(100, 1001, 100)
    times = sorted({*range(0, 4001, 10), *(b + d for b in boundaries for d in (-1, 1))}
                   - set(boundaries))
    samples = []
    for t in times:
        k = min(t // 100, 10)                    # boundaries passed while busy
        ran = min(t % 100, 20) if t < 1000 else 0
        samples.append(CgroupSample(t * MS, (k * 20 + ran) * MS, k, k, k * 80 * MS))
    return samples


def test_bands_are_one_collection_in_seconds_over_the_full_height(tmp_path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        ax.scatter([0.1, 0.5], [5, 90])
        draw_throttled_bands(ax, [(20 * MS, 100 * MS), (120 * MS, 200 * MS)])
        draw_throttled_bands(ax, [])                 # nothing to shade: nothing drawn
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)
                 and "throttled" in str(c.get_label())]
        assert len(bands) == 1 and bands[0].get_label() == (
            "periods throttled (cgroup cpu.stat): 2 stretches")
        xs = sorted({round(float(x), 3) for path in bands[0].get_paths()
                     for x in np.asarray(path.vertices)[:, 0]})
        assert xs == [0.02, 0.1, 0.12, 0.2]
        assert bands[0].get_zorder() < ax.collections[0].get_zorder()
        save_figure(fig, tmp_path / "bands.png")
    finally:
        plt.close(fig)
    assert (tmp_path / "bands.png").stat().st_size > 1000


def test_usage_panel_bars_per_period_quota_line_and_the_average(tmp_path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    try:
        draw_usage_panel(ax, busy_then_idle(), Limit(0.2, source="cgroup"))
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert len(bars) == 40                               # 4 s of 100 ms periods
        heights = [round(b.get_height(), 3) for b in bars]
        # 20 ms in each busy period (give or take the interpolation across a boundary)
        assert all(19 <= h <= 21 for h in heights[:10]) and set(heights[10:]) == {0.0}
        assert [round(b.get_width(), 3) for b in bars[:2]] == [0.1, 0.1]
        lines = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()}
        assert lines["quota 20 ms per 100 ms"] == 20
        assert round(lines["run's average 0.05 CPU"], 3) == 5.0
        title = ax.get_title()
        assert "10 of 40 periods hit the 0.2 CPU quota" in title
        assert "yet the run's average is only 0.05 CPU (25 % of the limit)" in title
        save_figure(fig, tmp_path / "usage.png")
    finally:
        plt.close(fig)
    assert (tmp_path / "usage.png").stat().st_size > 1000


def test_usage_panel_without_a_limit() -> None:
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        draw_usage_panel(ax, busy_then_idle(), None)
        assert "no CPU quota: throttling cannot happen here" in ax.get_title()
        assert not any("quota" in str(line.get_label()) for line in ax.get_lines())
        draw_usage_panel(ax, [], None)                      # an empty timeline draws no bars
    finally:
        plt.close(fig)
    assert usage_title(0.1, None, 0, 0).endswith("0.10 CPU")
    assert "and the run's average is 0.19 CPU (95 % of" in usage_title(0.19, Limit(0.2), 9, 9)


def test_usage_panel_draws_the_pressure_stall_per_period_where_it_was_sampled() -> None:
    from dataclasses import replace
    # PSI "some" grows with the throttled time (80 ms of each busy period)
    with_psi = [replace(s, pressure_some_ns=s.throttled_ns) for s in busy_then_idle()]
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        draw_usage_panel(ax, with_psi, Limit(0.2, source="cgroup"))
        psi = [line for line in ax.get_lines() if "PSI" in str(line.get_label())]
        assert len(psi) == 1 and "800 ms in all" in str(psi[0].get_label())
        assert max(psi[0].get_ydata()) == 80.0
        assert any("PSI" in t.get_text() for t in ax.get_legend().get_texts())
        fig2, ax2 = plt.subplots()
        draw_usage_panel(ax2, busy_then_idle(), Limit(0.2, source="cgroup"))   # v1: no line
        assert not any("PSI" in str(line.get_label()) for line in ax2.get_lines())
        plt.close(fig2)
    finally:
        plt.close(fig)
