"""client.render.text: the lines http-timing prints (whole reports are pinned in
tests/test_outputs_pinned.py)."""

from __future__ import annotations


from client.analysis.report import Report
from client.analysis.detect import detect
from client.analysis.throughput import throughput_row
from client.data.record import RequestRecord
from client.data.summary import summarize
from client.render.text import (
    format_detection,
    format_summary,
    format_throughput,
)

MS = 1_000_000


def test_summary_and_throughput_lines() -> None:
    records = [RequestRecord(i, i * 10 * MS, 5 * MS, 200) for i in range(10)]
    assert format_summary(summarize(records)) == (
        "latency ms: p50 5.00  p90 5.00  p99 5.00  max 5.00  mean 5.00  errors 0 of 10")
    assert format_summary(summarize([])) == (
        "latency ms: p50 n/a  p90 n/a  p99 n/a  max n/a  mean n/a  errors 0 of 0")
    row = throughput_row(records, None)
    assert format_throughput(row, 100) == "throughput 105.3 requests/s (intended 100/s), 0.0 % errors"
    assert format_throughput(row, None) == "throughput 105.3 requests/s, 0.0 % errors"


def test_detection_lines() -> None:
    assert format_detection(detect([])) == ["delayed by throttling: n/a (no successful request)"]
    records = [RequestRecord(i, i * 10 * MS, (75 if i % 5 == 4 else 5) * MS, 200)
               for i in range(40)]
    lines = format_detection(detect(records))
    # from latency alone: slow, never "throttled"
    assert lines[0] == ("slow: 8 of 40 requests (20.0 %), from the latency distribution alone; "
                        "slower than 75.0 ms counts (not known to be throttling: --cgroup "
                        "TARGET reads the service's own counters)")
    assert lines[1] == "stall: 70.0 ms typical extra delay of a slow request (the others 5.00 ms)"
    assert not any("throttled" in line for line in lines)
    counted = [RequestRecord(r.seq, r.start_ns, r.latency_ns, 200,
                             cgroup_nr_throttled=int(r.latency_ns > 50 * MS),
                             cgroup_throttled_ns=0) for r in records]
    lines = format_detection(detect(counted))
    assert lines[0] == ("delayed by throttling: 8 of 40 requests (20.0 %), from the cgroup "
                        "counters (cpu.stat)")
    assert lines[1] == ("stall: 70.0 ms typical extra delay of a request delayed by throttling "
                        "(the others 5.00 ms)")


def test_a_saturated_run_says_so_and_reads_no_stall_or_period_from_its_queue() -> None:
    # 3 connections, each request waiting for the two ahead of it: 10 ms of work, ~30 ms each
    records = [RequestRecord(i, i * 10 * MS, (10 if i % 7 == 0 else 30) * MS, 200)
               for i in range(60)]
    detection = detect(records, sequential=False, concurrency=3)
    lines = format_detection(detection)
    assert lines[0].startswith("slow: ")
    assert lines[1].startswith("saturated: 3 connections offered more than the service serves")
    assert detection.stall_ms is None and detection.period_source == "default"
    assert not any(line.startswith("stall: ") for line in lines)
    assert detect(records, sequential=False, concurrency=1).saturated is None


def _saturated_capture(name: str) -> tuple[Report, list[str], float]:
    """A capture of tests/data/saturated read and reported: its report, its lines and the
    share of periods the kernel throttled across it (asserted to be nearly all)."""
    from pathlib import Path

    from client.analysis.report import build_report
    from client.data.files import read_run
    from client.render.text import format_report

    run = read_run(Path(__file__).parent / "data" / "saturated" / f"{name}.csv")
    assert run.timeline is not None
    first, last = run.timeline[0], run.timeline[-1]
    periods, throttled = (last.nr_periods - first.nr_periods,
                          last.nr_throttled - first.nr_throttled)
    assert periods > 20 and throttled >= 0.9 * periods, (throttled, periods)  # the kernel's
    report = build_report(run)
    return report, format_report(report, run.path), 100 * throttled / periods


def test_an_open_loop_whose_group_wanted_more_than_its_quota_throughout_is_saturated() -> None:
    """A capture from the kernel (tests/data/saturated, 2026-12-01, cgroup v1): 100 requests/s
    of 2 ms for 3 s to the stdlib burner at 0.5 CPU, a busy loop in its group beside it. Its
    stall and recurrence, read from the quota's queue, are not printed: the saturated line
    is (issue 55)."""
    report, lines, share = _saturated_capture("open-loop")
    assert (f"saturated: at 100 requests/s the group wanted more CPU than its quota "
            f"throughout: {share:.0f} % of the periods were throttled") in "\n".join(lines)
    assert not any(line.startswith("stall:") for line in lines), lines
    assert not any("stalls recur" in line for line in lines), lines
    assert "period: 100 ms (limit)" in lines
    assert report.detection.stall_ms is None and report.to_dict()["saturated"]


def test_the_count_of_requests_delayed_by_throttling_says_how_long_they_were_held() -> None:
    """Issue 55: a 0.02 ms hold at 1 CPU counted like a 70 ms one. The holds are each
    request's ``cgroup_held_ns`` (the attribution's wall time): their range and median go
    with the count, and into the JSON as ``throttle_held_ms``."""
    held = [20_000, 68 * MS, 71 * MS, 0, 0, 65 * MS, 0, 0, 0, 0]
    records = [RequestRecord(i, i * 100 * MS, 5 * MS + h, 200, cgroup_throttled_ns=h,
                             cgroup_nr_throttled=1 if h else 0, cgroup_held_ns=h)
               for i, h in enumerate(held)]
    detection = detect(records)
    assert format_detection(detection)[0] == (
        "delayed by throttling: 4 of 10 requests (40.0 %), from the cgroup counters (cpu.stat); "
        "held 0.02–71 ms, median 66 ms")
    assert detection.to_dict()["throttle_held_ms"] == {
        "count": 4, "min": 0.02, "median": 66.5, "max": 71.0}
    # none held (files from before cgroup_held_ns): no holds said, no key
    older = [RequestRecord(r.seq, r.start_ns, r.latency_ns, 200,
                           cgroup_nr_throttled=r.cgroup_nr_throttled, cgroup_throttled_ns=0)
             for r in records]
    assert "held" not in format_detection(detect(older))[0]
    assert "throttle_held_ms" not in detect(older).to_dict()


def test_the_run_s_last_line_says_how_long_the_requests_were_held() -> None:
    """On the kernel's capture: the holds the last line gives are those of its CSV."""
    from pathlib import Path

    import numpy as np

    from client.analysis.report import build_report
    from client.commands.run import throttling_line
    from client.data.files import read_run

    run = read_run(Path(__file__).parent / "data" / "saturated" / "open-loop.csv")
    report = build_report(run)
    holds = np.asarray([r.cgroup_held_ns for r in run.records
                        if report.detection.is_throttled(r) and r.cgroup_held_ns]) / 1e6
    assert len(holds) == report.detection.throttled_count > 100
    line = throttling_line(report, run.metadata.cgroup)
    assert line is not None
    low, high, mid = holds.min(), holds.max(), float(np.median(holds))
    figure = (lambda v: f"{v:.2g}" if v < 1 else f"{v:.1f}" if v < 10 else f"{v:.0f}")
    assert (f"{len(holds)} of 300 requests delayed by throttling ({100 * len(holds) / 300:.1f} "
            f"%, held {figure(low)}–{figure(high)} ms, median {figure(mid)} ms)") in line, line


def test_a_sequential_run_that_wanted_more_than_its_quota_throughout_is_saturated() -> None:
    """A capture from the kernel (tests/data/saturated/sequential, 2026-12-01, cgroup v1): 15
    requests of ~13 ms of CPU, one at a time, to burn-service at 0.05 CPU (5 ms a period).
    Every request needed more than a period's quota, so every one was held: no fast mode is
    left to read a stall against. The saturated finding replaces the stall and period lines,
    and no "not a quota" guess is made of a run the kernel says was throttled (issue 55)."""
    report, lines, share = _saturated_capture("sequential")
    text = "\n".join(lines)
    assert "saturated: one request at a time wanted more CPU than the quota gives: " in text
    assert f"{share:.0f} % of the periods were throttled" in text
    assert not any(line.startswith("stall:") for line in lines), lines
    assert not any("stalls recur" in line for line in lines), lines
    assert "period: 100 ms (limit)" in lines
    assert "not a quota" not in text, lines
    assert report.detection.stall_ms is None and report.to_dict()["saturated"]


def test_a_sequential_run_with_unheld_requests_keeps_its_stall() -> None:
    """The demo's shape: a third of the requests held, the rest fast. Not saturated: its stall
    is what the run shows (the kernel's counters marked the held ones)."""
    records = [RequestRecord(i, i * 80 * MS, (75 if i % 3 == 0 else 5) * MS, 200,
                             cgroup_nr_throttled=int(i % 3 == 0), cgroup_throttled_ns=0)
               for i in range(60)]
    detection = detect(records, throttled_share=1.0)
    assert detection.saturated is None and detection.stall_ms is not None
    held = [RequestRecord(r.seq, r.start_ns, 300 * MS, 200, cgroup_nr_throttled=3,
                          cgroup_throttled_ns=0) for r in records]
    assert detect(held, throttled_share=1.0).saturated is not None
    assert detect(held, throttled_share=0.5).saturated is None   # the counters must say so
