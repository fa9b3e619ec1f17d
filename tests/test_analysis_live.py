"""The live page's state (client.analysis.live): every request kept, marked by the run's own
detection, sent once per viewer, and the watched group's panel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from client.analysis.detect import detect
from client.analysis.live import FAILED, OK, THROTTLED, LiveState, kind_of
from client.data.summary import summarize
from cpuquota.limit import Limit
from tests.captures import capture
from tests.timelines import TWO_THROTTLES


def test_marks_are_the_pictures_and_new_requests_follow_the_last_rule() -> None:
    records, truth = capture(0.3, 4.3)
    state = LiveState()
    state.extend(records[:60])
    state.reclassify()
    state.extend(records[60:])          # marked by the first 60's threshold, not re-detected
    assert [k == THROTTLED for k in state.kinds] == truth
    state.reclassify()
    assert [k == THROTTLED for k in state.kinds] == list(detect(records).throttled) == truth
    counts = state.count()
    summary = summarize(records)
    assert counts.requests == 100 and counts.throttled == sum(truth) == 14
    assert counts.throttled_share == pytest.approx(0.14)
    assert counts.p50_ms == pytest.approx(summary.p50_ms, abs=1e-3)
    assert counts.p99_ms == pytest.approx(summary.p99_ms, abs=1e-3)


def test_kind_of_failed_and_before_any_detection() -> None:
    records, _truth = capture(0.3, 4.3, n=10)
    failed = replace(records[0], status=0, error="refused")
    assert kind_of(failed, None) == FAILED and kind_of(records[0], None) == OK
    cgroup_marked = replace(records[1], cgroup_nr_throttled=1, cgroup_throttled_ns=5)
    state = LiveState()
    state.extend([cgroup_marked, replace(records[2], cgroup_nr_throttled=0,
                                         cgroup_throttled_ns=0)])
    state.reclassify()
    assert state.kinds == [THROTTLED, OK]
    assert kind_of(cgroup_marked, state.detection) == THROTTLED


def test_frames_carry_each_point_once_and_everything_after_a_change() -> None:
    records, truth = capture(0.3, 4.3)
    state = LiveState()
    state.extend(records[:3])
    first = state.frame(0, -1, -1)
    assert first["reset"] and len(first["points"]) == 3 and first["cursor"] == 3
    assert "cgroup" not in first and "end" not in first
    state.extend(records[3:5])
    second = state.frame(first["cursor"], first["epoch"], -1)
    assert not second["reset"] and len(second["points"]) == 2
    assert second["points"][0][:2] == [round(records[3].start_ns / 1e9, 4),
                                       round(records[3].latency_ms, 3)]
    state.extend(records[5:])
    state.reclassify()                  # the first 5 were marked by no detection: all ok
    third = state.frame(second["cursor"], second["epoch"], -1)
    if any(truth[:5]):
        assert third["reset"] and len(third["points"]) == 100
    assert [p[2] == THROTTLED for p in state.points] == truth
    state.finish(detect(records), ["raw-data/x.csv", "raw-data/x.json"])
    last = state.frame(100, third["epoch"], -1)
    assert last["reset"] and len(last["points"]) == 100      # the final picture, whole
    assert last["end"]["files"] == ["raw-data/x.csv", "raw-data/x.json"]
    assert last["counts"]["throttled"] == 14


def test_the_groups_throttles_and_cpu_per_period() -> None:
    state = LiveState(limit=Limit(0.2, 100.0))
    state.read_timeline(TWO_THROTTLES[:1])
    assert state.cgroup is None
    state.read_timeline(TWO_THROTTLES)
    assert state.cgroup is not None and state.cgroup_version == 1
    assert state.cgroup["quota_ms"] == pytest.approx(20) and state.cgroup["period_ms"] == 100
    assert len(state.cgroup["stretches"]) == 2
    assert state.cgroup["nr_throttled"] == 2 and state.cgroup["nr_periods"] == 2
    used = [ms for _t, ms in state.cgroup["periods"]]
    assert len(used) == 2 and all(15 < ms < 25 for ms in used)   # each spent ~the quota
    frame = state.frame(0, -1, -1)
    assert frame["cgroup"] == state.cgroup and state.frame(0, 0, 1).get("cgroup") is None


def test_the_panel_follows_a_change_of_quota() -> None:
    """An in-place resize mid-watch: the panel's quota line is the quota in force now, and
    the changes are listed."""
    from client.data.timeline import CgroupSample

    ms = 1_000_000
    timeline = [CgroupSample(t * ms, t * ms // 4, t // 100, 0, 0, quotas=((20000, 100000),))
                for t in range(0, 1000, 10)]
    state = LiveState(limit=Limit(0.2, 100.0))
    state.read_timeline(timeline)
    assert state.cgroup is not None and state.cgroup["quota_ms"] == 20 and \
        state.cgroup["quotas"] == []
    timeline += [CgroupSample(t * ms, t * ms // 4, t // 100, 0, 0, quotas=((50000, 100000),))
                 for t in range(1000, 1500, 10)]
    state.read_timeline(timeline)
    assert state.cgroup["quota_ms"] == 50 and state.cgroup["quotas"] == [[0.0, 20.0], [1.0, 50.0]]


def test_the_cpu_panel_follows_the_reports_rule_for_a_coarse_or_unknown_usage() -> None:
    """The report's rule (client.analysis.cgroup.cgroup_report): periods at the quota are
    counted only from a usage fine enough per period; a coarse one (reaped children's 10 ms
    ticks against a 20 ms quota) shows its periods but counts none, with the report's reason;
    one that cannot be known shows no periods at all."""
    from client.analysis.cgroup import cgroup_report

    limit = Limit(0.2, 100.0)
    exact = {"source": "cpu.stat", "resolution_ns": 1000, "unknown": None}
    coarse = {"source": "proc", "resolution_ns": 10_000_000, "unknown": None}
    lost = {"source": "proc", "resolution_ns": 1, "unknown": "2 process(es) ... were reaped"}
    panels = {}
    for name, usage in (("exact", exact), ("coarse", coarse), ("lost", lost)):
        state = LiveState(limit=limit)
        state.read_timeline(TWO_THROTTLES, usage=usage)
        assert state.cgroup is not None
        report = cgroup_report([], TWO_THROTTLES, limit, usage=usage)
        assert state.cgroup["periods_at_quota"] == report.periods_at_quota, name
        assert state.cgroup["per_period_unknown"] == report.per_period_unknown, name
        assert state.cgroup["usage_unknown"] == report.usage_unknown, name
        panels[name] = state.cgroup
    assert panels["exact"]["periods_at_quota"] == 2 and panels["exact"]["per_period_unknown"] is None
    assert panels["coarse"]["periods_at_quota"] is None and len(panels["coarse"]["periods"]) == 2
    assert "too coarse" in panels["coarse"]["per_period_unknown"]
    assert panels["lost"]["periods"] == [] and panels["lost"]["periods_at_quota"] is None
    assert panels["lost"]["usage_unknown"].startswith("2 process(es)")
    no_note = LiveState(limit=limit)   # a timeline without a usage note: as exact
    no_note.read_timeline(TWO_THROTTLES)
    assert no_note.cgroup is not None and no_note.cgroup["periods_at_quota"] == 2
