"""client.analysis.cgroup on synthetic timelines: CPU per period, the report and one watch
interval."""

from __future__ import annotations

import json
import math

import pytest

from client.analysis.cgroup import (CgroupReport, RequestSpan, cgroup_report, interval_stats,
                                    request_spans, usage_per_period)
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample
from client.render.text import format_cgroup
from cpuquota.limit import Limit
from tests.timelines import MS, P, TWO_THROTTLES, S

def test_usage_per_period_on_the_kernel_grid() -> None:
    timeline = [S(0, 0), S(50, 10), S(100, 20), S(150, 20), S(200, 20), S(250, 30), S(330, 30)]
    assert usage_per_period(timeline, P, phase_ns=0) == [
        _usage(0, 20), _usage(100, 0), _usage(200, 10)]
    assert usage_per_period(timeline, P, phase_ns=50 * MS) == [_usage(50, 10), _usage(150, 10)]
    assert usage_per_period(timeline[:2], P) == [] and usage_per_period([], P) == []


def test_usage_per_period_places_a_throttled_interval_s_cpu_after_its_refill() -> None:
    # 2 CPUs spend a 30 ms quota in 15 ms right after each refill (boundaries at 0, 100, 200);
    # samples every 12 ms or so, none on a boundary
    timeline = [S(0, 0), S(6, 12), S(18, 30, 0, 1), S(94, 30, 0, 1),
                S(106, 42, 1, 1, 140), S(118, 60, 1, 2, 140), S(194, 60, 1, 2, 140),
                S(206, 72, 2, 2, 280)]
    assert usage_per_period(timeline, P, phase_ns=0, refills=True) == [
        _usage(0, 30), _usage(100, 30)]
    # linear alone: 6 of the 12 ms after each refill go to the period before
    assert usage_per_period(timeline, P, phase_ns=0) == [_usage(0, 36), _usage(100, 30)]
    # a throttle that began inside the interval: only the time it was running is before
    partial = [S(90, 0), S(110, 14, 1, 1, 6)]   # ran 90-94 (4 ms), throttled 94-100, ran 100-110
    assert usage_per_period([S(-10, 0)] + partial + [S(210, 14, 2, 1, 6)], P, phase_ns=0,
                            refills=True) == [_usage(0, 4), _usage(100, 10)]


def _usage(start_ms: int, used_ms: int) -> object:
    from client.analysis.cgroup import PeriodUsage
    return PeriodUsage(start_ms * MS, used_ms * MS)


def test_cgroup_report_counts_splits_latencies_and_is_json_ready() -> None:
    records = [RequestRecord(0, 0, 101 * MS, 200),            # throttled
               RequestRecord(1, 110 * MS, 140 * MS, 200),     # throttled
               RequestRecord(2, 251 * MS, 2 * MS, 200),
               RequestRecord(3, 254 * MS, 4 * MS, 200),
               RequestRecord(4, 255 * MS, 3 * MS, 0, error="refused")]   # failed: not timed
    report = cgroup_report(records, TWO_THROTTLES, Limit(0.2, source="cgroup"))
    assert isinstance(report, CgroupReport)
    assert (report.samples, report.nr_periods, report.nr_throttled) == (10, 2, 2)
    assert report.throttled_ms == 160 and report.throttled_share == 1.0
    assert report.duration_s == 0.26 and report.usage_cpus_mean == pytest.approx(42 / 260)
    assert report.quota_share_mean == pytest.approx(42 / 260 / 0.2)
    assert (report.quota_cpus, report.period_ms, report.periods) == (0.2, 100, 2)
    # (0, 100] used 20 ms and (100, 200] 20 ms: the samples around each boundary counted a
    # throttle's end, so their CPU is the new period's (linear alone says 22.7 and 18.3)
    assert report.periods_at_quota == 2
    assert [b.usage_ms for b in report.busiest] == [pytest.approx(20), pytest.approx(20)]
    assert (report.requests, report.throttled_requests) == (5, 2)
    assert (report.throttled_latency.count, report.throttled_latency.p50_ms) == (2, 120.5)
    assert (report.other_latency.count, report.other_latency.p50_ms) == (2, 3.0)
    assert report.other_latency.p99_ms == pytest.approx(3.98)
    data = report.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["busiest"][0]["quota_share"] == pytest.approx(1.0)


def test_cgroup_report_without_a_limit_or_samples_has_none_for_unknowns() -> None:
    empty = cgroup_report([(0, MS)], [], None)
    data = empty.to_dict()
    assert data["samples"] == 0 and data["throttled_share"] is None
    assert data["usage_cpus_mean"] is None and data["quota_cpus"] is None
    assert data["throttled_latency"]["p50_ms"] is None and data["other_latency"]["count"] == 1
    unlimited = cgroup_report([], [S(0, 0), S(1000, 500)], None)
    assert unlimited.usage_cpus_mean == 0.5 and math.isnan(unlimited.quota_share_mean)
    assert unlimited.periods == 10 and unlimited.periods_at_quota == 0


def test_the_same_quota_on_two_levels_is_named_by_the_first() -> None:
    """A pod-level limit (KEP-2837) the kubelet writes on the container's group too: both
    levels hold 0.2 CPU and both count throttles, the one or the other more. The report
    names the first level (the pod's, as the resolver orders them for a pod-level limit) whichever counted
    more; a level of another quota that throttled most is still the one named."""
    timeline = [CgroupSample(s.t_ns, s.usage_ns, s.nr_periods, s.nr_throttled,
                             s.throttled_ns // 2, None, None,
                             ((s.nr_periods, s.nr_throttled, s.throttled_ns),))
                for s in TWO_THROTTLES]
    records = [RequestRecord(0, 0, 101 * MS, 200), RequestRecord(1, 251 * MS, 2 * MS, 200)]
    pod_first = [("/kubepods/pod1", Limit(0.2, source="cgroup")),
                 ("/kubepods/pod1/ctr", Limit(0.2, source="cgroup"))]
    report = cgroup_report(records, timeline, pod_first[0][1], pod_first)
    assert report.levels[1].throttled_ms > report.levels[0].throttled_ms > 0
    assert report.quota_group == "/kubepods/pod1"
    other = [("/kubepods/pod1/ctr", Limit(0.5, source="cgroup")),
             ("/kubepods/pod1", Limit(0.2, source="cgroup"))]
    assert cgroup_report(records, timeline, other[0][1], other).quota_group == "/kubepods/pod1"


def test_two_quota_levels_and_pressure_name_the_group_that_throttled() -> None:
    # level 0: a container's 0.5 CPU (never throttled); level 1: the pod's 0.2 CPU, whose
    # counters are TWO_THROTTLES'; PSI "some" grows with the throttled time
    timeline = [CgroupSample(s.t_ns, s.usage_ns, s.nr_periods, 0, 0, 3 * s.throttled_ns // 2,
                             s.throttled_ns // 2,
                             ((s.nr_periods, s.nr_throttled, s.throttled_ns),))
                for s in TWO_THROTTLES]
    levels = [("/kubepods/pod1/ctr", Limit(0.5, source="cgroup")),
              ("/kubepods/pod1", Limit(0.2, source="cgroup"))]
    records = [RequestRecord(0, 0, 101 * MS, 200), RequestRecord(1, 251 * MS, 2 * MS, 200)]
    report = cgroup_report(records, timeline, levels[0][1], levels)
    assert report.quota_group == "/kubepods/pod1" and report.throttled_requests == 1
    ctr, pod = report.levels
    assert (ctr.nr_throttled, ctr.throttled_requests) == (0, 0)
    assert (pod.quota_cpus, pod.nr_throttled, pod.throttled_ms, pod.throttled_requests) == \
        (0.2, 2, 160, 1)
    assert (report.pressure_some_ms, report.pressure_full_ms) == (240, 80)
    data = report.to_dict()
    assert data["quota_group"] == "/kubepods/pod1" and data["levels"][1]["throttled_ms"] == 160
    assert data["pressure_some_ms"] == 240
    text = "\n".join(format_cgroup(report))
    assert "cgroup: throttled by the quota on /kubepods/pod1 (0.2 CPU)" in text
    # the run's own line is the watched group's, and says so when another level throttled
    assert "0 of 2 periods throttled (0 %), throttled time 0.0 ms in the watched group " \
        "(each quota level below)" in text
    assert "quota 0.5 CPU per 100 ms on /kubepods/pod1/ctr: 0 of 2 periods throttled" in text
    assert "some tasks waited 240.0 ms for a CPU (92 % of the run), all of them 80.0 ms" in text
    # a timeline without pressure (cgroup v1) says so, no error
    v1 = cgroup_report(records, TWO_THROTTLES, levels[1][1], levels[1:])
    assert v1.pressure_some_ms is None and v1.quota_group == "/kubepods/pod1"
    assert "CPU pressure (PSI): not recorded (no cpu.pressure: cgroup v1" in \
        "\n".join(format_cgroup(v1))


def test_request_spans_from_records_pairs_and_spans() -> None:
    open_loop = RequestRecord(0, 12 * MS, 5 * MS, 200, scheduled_ns=10 * MS)
    assert request_spans([open_loop, (1, 4), RequestSpan(5, 6, 1, False)]) == [
        RequestSpan(12 * MS, 15 * MS, 5 * MS, True), RequestSpan(1, 4, 3),
        RequestSpan(5, 6, 1, False)]


def test_interval_stats_for_watch() -> None:
    stats = interval_stats(S(0, 0, 10, 2, 100), S(1000, 150, 20, 9, 500), Limit(0.2))
    assert (stats.interval_s, stats.nr_periods, stats.nr_throttled) == (1.0, 10, 7)
    assert stats.throttled_ms == 400 and stats.usage_cpus == pytest.approx(0.15)
    assert stats.quota_share == pytest.approx(0.75) and stats.throttled_share == 0.7
    data = interval_stats(S(0), S(500, 100), None).to_dict()
    assert data["quota_share"] is None and data["throttled_share"] is None
    assert data["usage_cpus"] == pytest.approx(0.2)
