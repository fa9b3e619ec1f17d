"""client.data.metadata: the typed metadata, read in one place, written with the same keys."""

from __future__ import annotations

import json
from pathlib import Path

from client.data.files import read_run
from client.data.metadata import LoadMode, RunMetadata, SweepInfo
from client.data.summary import summarize
from cpuquota.limit import Limit

ROOT = Path(__file__).resolve().parent.parent


def test_limit_prefers_the_kernel_quota() -> None:
    meta = RunMetadata.from_dict({"limits": {
        "cgroup": {"quota_us": 30000, "period_us": 100000, "burst_us": 5000},
        "inprocess": {"cpu_limit_percent": 50, "cycle_ms": 20}}})
    assert meta.limit == Limit(0.3, 100, 5, "kernel")
    meta = RunMetadata.from_dict({"limits": {"cgroup": {"quota_us": None, "period_us": 100000},
                                             "inprocess": {"cpu_limit_percent": 50,
                                                           "cycle_ms": 20}}})
    assert meta.limit == Limit(0.5, 20, 0, "in-process")
    unlimited = RunMetadata.from_dict({"limits": {"cgroup": None, "inprocess": None}})
    assert unlimited.limit is None and unlimited.unlimited and unlimited.limit_label() == "none"
    unknown = RunMetadata.from_dict({})
    assert unknown.limit is None and not unknown.unlimited and unknown.limit_label() == "unknown"
    assert unknown.limit_description() == "limit unknown"
    # a service that reported something no limit can be: unknown, not a crash
    odd = RunMetadata.from_dict({"limits": {"cgroup": {"quota_us": 5, "period_us": 3}}})
    assert odd.limit is None


def test_words_of_the_limits_in_force() -> None:
    both = RunMetadata.from_dict({"limits": {
        "cgroup": {"quota_us": 30000, "period_us": 100000, "cpus": 0.3},
        "inprocess": {"cpu_limit_percent": 30, "cycle_ms": 100, "mode": "cfs"}}})
    assert both.limit_description() == ("kernel quota 0.3 CPU (30 ms per 100 ms), "
                                        "in-process 30 % of 100 ms (cfs)")
    assert both.limit_label() == "0.3 CPU (kernel)"
    assert RunMetadata.from_dict({"limits": {}}).limit_description() == "no CPU limit"


def test_sequential_and_workers() -> None:
    assert RunMetadata().sequential and RunMetadata.missing().sequential
    assert RunMetadata(mode=LoadMode.CLOSED_LOOP, concurrency=1).sequential
    assert not RunMetadata(mode=LoadMode.CLOSED_LOOP, concurrency=4).sequential
    assert not RunMetadata.from_dict({"mode": "open-loop"}).sequential
    assert RunMetadata.from_dict({"mode": "nonsense", "concurrency": "x"}).sequential
    assert RunMetadata.from_dict({"limits": {"workers": 3}}).workers == 3
    assert RunMetadata.from_dict({"limits": {"workers": "3"}}).workers == 1


def test_recorded_files_round_trip_byte_for_byte() -> None:
    """Every committed run's JSON is read into the typed metadata and written back as it was."""
    for path in sorted((ROOT / "raw-data").glob("*.json")):
        raw = json.loads(path.read_text())
        meta = RunMetadata.from_dict(raw)
        assert meta.to_dict() == raw, path.name
        assert (json.dumps(meta.to_dict(), indent=2, sort_keys=True) + "\n") == path.read_text()
        if "summary" in raw:  # the runs' own (benchmarks may write less)
            assert meta.summary == summarize(read_run(path).records), path.name


def test_a_run_in_progress_has_no_end_keys_and_unknown_keys_survive() -> None:
    meta = RunMetadata(name="x", url="http://h/")
    assert "ended_at" not in meta.to_dict() and "summary" not in meta.to_dict()
    assert "sweep" not in meta.to_dict()
    meta.sweep = SweepInfo("s-sweep", "kernel", 0.3, "2026-01-01T00:00:00+00:00")
    meta.ended_at = "2026-01-01T00:00:01+00:00"
    out = meta.to_dict()
    assert out["sweep"]["cpus"] == 0.3 and out["stop_reason"] is None and out["summary"] is None
    extra = RunMetadata.from_dict({"name": "y", "note": {"by": "hand"}})
    assert extra.to_dict()["note"] == {"by": "hand"}


def test_quota_levels_of_a_watched_group() -> None:
    meta = RunMetadata.from_dict({"cgroup": {
        "group": "/kubepods/pod1/ctr", "quota_us": 20000, "period_us": 100000, "cpus": 0.2,
        "quota_group": "/kubepods/pod1",
        "levels": [{"group": "/kubepods/pod1", "quota_us": 20000, "period_us": 100000},
                   {"group": "/kubepods", "quota_us": 100000, "period_us": 50000}]}})
    assert meta.quota_levels() == [("/kubepods/pod1", Limit(0.2, source="cgroup")),
                                   ("/kubepods", Limit(2.0, 50.0, source="cgroup"))]
    assert meta.limit == Limit(0.2, source="cgroup")
    assert RunMetadata.from_dict({"cgroup": {"quota_us": None}}).quota_levels() == []
    assert RunMetadata.from_dict({}).quota_levels() == []
