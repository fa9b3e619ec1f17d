"""``advise`` in words, tables and a picture (from a made-up answer: no runs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from matplotlib.figure import Figure

from client.analysis.advise import Advice, Alternative, UsageResult, conclude, shape
from client.analysis.advise_model import USAGE_RULES, Profile, model_curve, model_point
from client.analysis.goal import LatencyGoal, Measured
from client.data.metadata import LoadMode
from client.render.advise import (advice_figure, format_advice, format_run, format_runs_table,
                                  format_usage_table, limit_words, save_advice_figure)
from client.render.figures import pyplot, save_figure
from cpuquota.limit import Limit

TARGET = LatencyGoal(30)
FREE = Measured("t-advise-none", "profile", None, 300, 0, 4.4, 5.0, 7.0, 0.0, None)


def row(cpus: float, p99: float, role: str = "search", period_ms: float = 100) -> Measured:
    limit = Limit(cpus, period_ms)
    return Measured(f"t-advise-{cpus:g}", role, limit, 100, 0, 4.5, 8.0, p99, 0.05,
                    TARGET.misses(8.0, p99, 0.05), TARGET.narrow(8.0, p99, 0.05))


def advice() -> Advice:
    profile = Profile(run=FREE, mode=LoadMode.SEQUENTIAL, concurrency=1, rate_rps=None,
                      requests=100, cpu_ms=4.0, cpu_source="test", burn_cpu_ms=3.3,
                      baseline_ms=4.4, cores=1, usage=(0.85, 0.86, 0.9),
                      usage_counter="throttle_lab_process_cpu_seconds_total", peak_to_mean=1.2)
    runs = (FREE, row(0.7, 23.5, "guess"), row(0.56, 44.4), row(0.665, 33.0),
            row(1.015, 5.8, "usage"))
    at, below = conclude(runs[1:], TARGET)
    guess = model_point(profile, Limit(0.703), TARGET)
    period = Alternative("period", model_point(profile, Limit(0.2, 10), TARGET),
                         (row(0.29, 27.0, "period", 10),))
    usage = UsageResult(USAGE_RULES[0], 1.0146, Limit(1.015), runs[4])
    curve = model_curve(profile, TARGET, shape(100), 100, 2000, points=12)
    return Advice(TARGET, "kernel CPU quota", "sequential: 100 requests", profile, guess,
                  runs, at, below, 10, 2000, None, (usage,), (period,), tuple(curve))


def test_one_line_per_run() -> None:
    assert format_run(3, row(0.665, 33.0)) == (
        "[3] search 0.665 CPU: p50 4.5  p90 8.0  p99 33.0 ms, 5 % delayed by throttling: "
        "misses: p99 33.0 > 30 ms (narrowly)")
    assert format_run(1, FREE).endswith("0 % delayed by throttling: not judged")
    assert limit_words(Limit(0.29, 10, 2.0)) == "0.29 CPU (period 10 ms, burst 2 ms)"
    assert limit_words(None) == "no limit"


def test_the_answer_in_words() -> None:
    text = format_advice(advice())
    assert "Recommendation for p99 <= 30 ms (kernel CPU quota; sequential: 100 requests):" in text
    assert ("  0.7 CPU = 700m: docker run --cpus 0.7; Kubernetes resources.limits.cpu: 700m"
            in text)
    assert "  at 0.665 CPU (the next lower step tried): " in text
    assert "The smallest limit that meets it lies in (0.665, 0.7] CPU." in text
    assert "The model's first guess was 0.703 CPU" in text and "0 % above" not in text
    assert "(throttle_lab_process_cpu_seconds_total, 3 samples (few samples" in text
    assert "With a shorter period: " in text and "59 % less than 0.7 CPU" in text
    assert "docker run --cpu-period 10000 --cpu-quota 2900" in text


def test_the_usage_table_puts_the_rules_beside_the_latency_target() -> None:
    table = format_usage_table(advice()).splitlines()
    assert table[0] == ("| limit set by | rule gives | run at | p50 ms | p90 ms | p99 ms | "
                        "delayed by throttling | meets p99 <= 30 ms |")
    assert table[2] == "| the latency target (advise) | – | 0.7 | 4.5 | 8.0 | 23.5 | 5 % | yes |"
    assert table[3] == ("| p90 of usage + 15 % (Kubernetes VPA recommender) | 1.0146 | 1.015 | "
                        "4.5 | 8.0 | 5.8 | 5 % | yes |")
    runs = format_runs_table(advice().runs).splitlines()
    assert len(runs) == 2 + 5 and runs[2].startswith("| t-advise-none | profile | no limit |")


def test_alternatives_not_looked_for_or_not_worth_it() -> None:
    base = advice()
    skipped = Advice(base.target, base.backend, base.load, base.profile, base.guess, base.runs,
                     base.at, base.below, 10, 2000)
    assert "was not looked for (--no-alternatives)" in format_advice(skipped)
    none = Advice(base.target, base.backend, base.load, base.profile, base.guess, base.runs,
                  base.at, base.below, 10, 2000, alternatives=())
    assert "Neither a shorter period nor a burst" in format_advice(none)


def test_no_recommendation_says_why() -> None:
    base = advice()
    none = Advice(base.target, base.backend, base.load, base.profile, None, base.runs, None,
                  base.below, 10, 2000, "the target cannot be met by a CPU limit alone: ...")
    text = format_advice(none)
    assert text.startswith("No recommendation for p99 <= 30 ms: the target cannot be met")


def test_the_picture(tmp_path: Path) -> None:
    out = save_advice_figure(advice(), tmp_path / "a" / "t-advise.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


def drawn_at(fig: Figure, label: str) -> list[tuple[float, float]]:
    """The points of the collection labelled ``label...`` in the advise picture."""
    return [tuple(map(float, xy)) for c in fig.axes[0].collections
            if str(c.get_label()).startswith(label) for xy in c.get_offsets()]


def test_the_picture_draws_every_run_the_answer_rests_on() -> None:
    less = row(0.525, 89.8, "less")
    fig = advice_figure(advice(), less=less)
    try:
        # the answer, the next lower step and the rest of the search: p99 against the limit
        assert sorted(drawn_at(fig, "measured p99")) == [
            (0.56, 44.4), (0.665, 33.0), (0.7, 23.5), (1.015, 5.8)]
        assert drawn_at(fig, "period 10 ms: measured p99") == [(0.29, 27.0)]
        # 25 % less: the run that shows the answer is the smallest
        assert drawn_at(fig, "25 % less, 0.525 CPU: p99 89.8 ms (missed)") == [(0.525, 89.8)]
    finally:
        pyplot().close(fig)
    without = advice_figure(advice())
    try:
        assert drawn_at(without, "25 % less") == []
    finally:
        pyplot().close(without)


def test_a_long_load_wraps_inside_the_picture(tmp_path: Path) -> None:
    long = replace(advice(), load="sequential: 100 requests to http://shop-api.default.svc."
                   "cluster.local:8080/api/v1/orders?limit=50 in docker:shop-api, its group's "
                   "cpu.stat read every 10 ms")
    fig = advice_figure(long)
    try:
        save_figure(fig, tmp_path / "long.png")
        title = fig.axes[0].title
        box = title.get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
        assert title.get_text().count("\n") >= 2
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1
    finally:
        pyplot().close(fig)
