"""Comparing runs (client.compare): table rows, Markdown, the stacked picture, the overlay."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from client.compare import (compare_runs, format_markdown, format_table, limit_label,
                            plot_overlay, save_comparison, sequential)
from client.detect import detect
from client.model import Workload, predict
from client.rawdata import RequestRecord, Run

MS = 1_000_000
PNG = b"\x89PNG\r\n\x1a\n"


def limits(cpus: float | None, *, inprocess: float | None = None) -> dict[str, object]:
    cgroup = ({"quota_us": round(cpus * 100_000), "period_us": 100_000, "burst_us": 0,
               "cpus": cpus} if cpus else None)
    return {"limits": {"cgroup": cgroup,
                       "inprocess": {"cpu_limit_percent": inprocess, "cycle_ms": 100,
                                     "mode": "cfs"} if inprocess else None}}


def run_of(name: str, latencies_ms: list[float], metadata: dict[str, object] | None = None,
           tmp: Path = Path("/nonexistent")) -> Run:
    t, records = 0, []
    for i, ms in enumerate(latencies_ms):
        records.append(RequestRecord(i, t, round(ms * MS), 200))
        t += round(ms * MS) + 100_000
    return Run(tmp / f"{name}.csv", records, {"name": name, **(metadata or {})})


def modelled(name: str, cpus: float, metadata: dict[str, object]) -> Run:
    p = predict(Workload(service_ms=5, cpus=cpus, requests=60))
    return run_of(name, [r.latency_ns / MS for r in p.records], metadata)


def test_rows_have_the_limit_percentiles_and_throttled_share() -> None:
    runs = [modelled("one", 1, limits(1)), modelled("point3", 0.3, limits(0.3)),
            modelled("inproc", 0.1, limits(None, inprocess=10))]
    rows = compare_runs(runs)
    assert [r.name for r in rows] == ["one", "point3", "inproc"]
    assert [r.limit for r in rows] == ["1 CPU (kernel)", "0.3 CPU (kernel)",
                                       "0.1 CPU (in-process)"]
    assert rows[0].throttled_fraction == 0 and rows[0].p99_ms == pytest.approx(5)
    # 5 ms at 0.3 CPU: seq 6, 12, ..., 54 stall (9 of 60); at 0.1 every other one
    assert rows[1].throttled_fraction == pytest.approx(9 / 60)
    assert rows[1].max_ms == pytest.approx(75) and rows[1].p50_ms == pytest.approx(5)
    assert rows[2].throttled_fraction == pytest.approx(29 / 60)
    assert all(r.count == 60 for r in rows)


def test_table_and_markdown() -> None:
    rows = compare_runs([modelled("a|b", 0.3, limits(0.3)), run_of("capture", [5.1, 5.3])])
    text = format_table(rows).splitlines()
    assert text[0].split() == ["run", "limit", "requests", "p50", "ms", "p90", "ms", "p99",
                               "ms", "max", "ms", "throttled"]
    assert text[1].split()[:4] == ["a|b", "0.3", "CPU", "(kernel)"]
    assert text[1].endswith("15 %") and text[2].endswith("0 %")
    md = format_markdown(rows).splitlines()
    assert md[0] == "| run | limit | requests | p50 ms | p90 ms | p99 ms | max ms | throttled |"
    assert md[1] == "|---|---|---:|---:|---:|---:|---:|---:|"
    assert md[2].startswith("| a\\|b | 0.3 CPU (kernel) | 60 | 5.0 | 75.0 |")
    assert md[3] == "| capture | unknown | 2 | 5.2 | 5.3 | 5.3 | 5.3 | 0 % |"


def test_limit_label_and_sequential() -> None:
    assert limit_label(run_of("x", [1.0])) == "unknown"             # a text capture
    assert limit_label(run_of("x", [1.0], limits(None))) == "none"  # ours, no limit
    assert sequential(run_of("x", [1.0]))
    assert sequential(run_of("x", [1.0], {"mode": "closed-loop", "concurrency": 1}))
    assert not sequential(run_of("x", [1.0], {"mode": "closed-loop", "concurrency": 4}))
    assert not sequential(run_of("x", [1.0], {"mode": "open-loop", "concurrency": 1}))


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
    out = plot_overlay(measured, [("predicted", Run(tmp_path / "p", list(predicted.records),
                                                    {}))], detect(measured.records),
                       tmp_path / "o.png")
    assert out.read_bytes()[:8] == PNG
