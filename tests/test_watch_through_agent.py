"""A pod whose group is not on this machine is read through its node's agent: where a
``k8s:`` target is read (its files here, else the agent; ``HTTP_TIMING_THROUGH_API=1`` forces
the agent), and the lines ``watch`` makes of the agent's rows, replayed from a timeline in the
agent's format (tests/data/cluster/). The real agent, through the real API server, is in
tests/test_kube_cgroup.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.commands.watch import agent_rows, next_interval, on_wall_clock
from client.data.metadata import RunMetadata
from client.data.timeline import CgroupSample, read_timeline
from client.run.agent_timeline import PodRef
from client.run.cgroup_target import CgroupTarget, CgroupTargetError, NotHere
from client.run.pod_reach import THROUGH_API_ENV, locate, reach

DATA = Path(__file__).parent / "data" / "cluster"
NOT_HERE = "no cgroup for pod shop/api-a (uid 0) under kubepods: is this the pod's node?"


def test_a_pod_is_read_here_when_its_group_is_here_else_through_its_agent() -> None:
    assert not reach("k8s:shop/api-a", None).agent   # found here: its own files
    there = reach("k8s:shop/api-a", NotHere(NOT_HERE))
    assert there.agent and NOT_HERE in there.why
    assert reach("k8s:shop/api-a", None, forced=True).agent
    # a pod that is not there at all, or not the user's to read: said as it is
    assert not reach("k8s:shop/nosuch", CgroupTargetError("no pod nosuch in namespace shop")).agent
    assert not reach("/sys/fs/cgroup/cpu/x", NotHere("no such cgroup directory"),
                     forced=True).agent


def test_locate_tries_the_files_first_and_names_the_pod_for_the_agent() -> None:
    def not_here(spec: str) -> CgroupTarget:
        raise NotHere(NOT_HERE)

    assert locate("k8s:shop/api-a/web", not_here, {}) == PodRef("shop", "api-a", "web")
    def no_pod(spec: str) -> CgroupTarget:
        raise CgroupTargetError("no pod nosuch in namespace shop (kubectl: not found)")

    with pytest.raises(CgroupTargetError, match="no pod nosuch in namespace shop"):
        locate("k8s:shop/nosuch", no_pod, {})

    def must_not_be_asked(spec: str) -> CgroupTarget:
        raise AssertionError("the files were read though the agent was asked for")

    assert locate("k8s:shop/api-a", must_not_be_asked, {THROUGH_API_ENV: "1"}) == PodRef(
        "shop", "api-a")
    with pytest.raises(CgroupTargetError, match="expected k8s:NAMESPACE/POD"):
        locate("k8s:shop", must_not_be_asked, {THROUGH_API_ENV: "1"})


def agent_capture(name: str) -> tuple[list[CgroupSample], RunMetadata]:
    meta = json.loads((DATA / f"{name}.json").read_text())
    samples = on_wall_clock(read_timeline(DATA / f"{name}.cgroup.csv"),
                            meta["clock"]["zero_epoch_ns"])
    return samples, RunMetadata(cgroup=meta["cgroup"])


def test_the_agents_rows_become_one_line_per_poll_that_brought_rows() -> None:
    samples, meta = agent_capture("shop_web-a")
    polls = [samples[i:i + 100] for i in range(0, len(samples), 100)]   # a poll a second
    polls.insert(3, [])                                   # a poll while nothing was flushed
    rows = agent_rows(polls, meta.limit, "cpu.stat, read by the node agent", samples[0].t_ns)
    assert len(rows) == len([p for p in polls if p])   # the empty poll shows nothing
    # the lines add up to what the agent's counters say from its first row to its last
    first, last = samples[0], samples[-1]
    assert sum(r.stats.nr_throttled for r in rows) == last.nr_throttled - first.nr_throttled
    assert sum(r.stats.nr_periods for r in rows) == last.nr_periods - first.nr_periods
    assert sum(r.stats.throttled_ms for r in rows) == pytest.approx(
        (last.throttled_ns - first.throttled_ns) / 1e6)
    assert rows[0].limit is not None and rows[0].limit.cpus == pytest.approx(0.5)
    assert rows[0].usage_counter == "cpu.stat, read by the node agent"
    assert [r.elapsed_s for r in rows] == sorted(r.elapsed_s for r in rows)


def test_a_row_already_shown_is_not_shown_again() -> None:
    samples, _ = agent_capture("shop_api-a")
    assert next_interval(samples[10], samples[:11]) is None   # the window repeats the last row
    assert next_interval(samples[10], samples[10:20]) == (samples[10], samples[19])
    assert next_interval(None, samples[:1]) is None             # one row: no interval yet
