"""A Deployment's pods on other nodes, each read through its own node's agent: a run is marked
from the sum of the pods' timelines (client.run.agent_marks.mark_through_agents), each pod's
cut across the run on the run's clock, replayed from captures in the agent's format
(tests/data/cluster/). The real agents, through the real API server, are in
tests/test_two_nodes_commands.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.data.files import read_run
from client.data.timeline import CgroupSample, read_timeline
from client.run.agent_marks import mark_through_agents, summed_cgroup
from client.run.agent_timeline import PodRef

DATA = Path(__file__).parent / "data" / "cluster"
MS = 1_000_000
ZERO = json.loads((DATA / "shop_web-a.json").read_text())["clock"]["zero_epoch_ns"]


class CapturedAgent:
    """Stands for a node's agent's ``/timeline`` through the API: serves a capture, its rows
    ``late_ns`` after the capture's own instants (each node's agent reads at its own)."""

    namespace = "throttle-lab-recorder"

    def __init__(self, pod: str, agent: str, node: str, late_ns: int) -> None:
        self.ref, self.agent, self.node = PodRef("shop", pod), agent, node
        self.late_ns = late_ns

    def window(self, into: Path, from_s: float | None, to_s: float | None) -> Path:
        into.mkdir(parents=True, exist_ok=True)
        stem = f"shop_{self.ref.pod}"
        meta = json.loads((DATA / f"{stem}.json").read_text())
        meta["clock"]["zero_epoch_ns"] += self.late_ns
        (into / f"{stem}.json").write_text(json.dumps(meta))
        (into / f"{stem}.cgroup.csv").write_bytes((DATA / f"{stem}.cgroup.csv").read_bytes())
        return into / f"{stem}.cgroup.csv"

    def rows(self, run_zero: int) -> list[CgroupSample]:
        """The capture on the run's clock."""
        shift = ZERO + self.late_ns - run_zero
        return [CgroupSample(s.t_ns + shift, s.usage_ns, s.nr_periods, s.nr_throttled,
                             s.throttled_ns)
                for s in read_timeline(DATA / f"shop_{self.ref.pod}.cgroup.csv")]


AGENTS = [CapturedAgent("web-a", "a-1", "n1", 0), CapturedAgent("web-b", "a-2", "n2", 3 * MS)]


def a_run(directory: Path, begins_ms: int) -> Path:
    """Ten requests of 90 ms, 100 ms apart, the run's zero ``begins_ms`` into the captures."""
    (directory / "both.csv").write_text("seq,start_ns,latency_ns,status,error\n" + "".join(
        f"{i},{i * 100 * MS},{90 * MS},200,\n" for i in range(10)))
    (directory / "both.json").write_text(json.dumps({
        "name": "both", "clock": {"zero_epoch_ns": ZERO + begins_ms * MS,
                                  "zero_uncertainty_ns": 1}}))
    return directory / "both.csv"


def own_delta(rows: list[CgroupSample], first_ns: int, last_ns: int) -> tuple[int, int, int]:
    """A pod's own change across [first_ns, last_ns]: from its last row at or before the
    first to its first at or after the last."""
    start = max((s for s in rows if s.t_ns <= first_ns), key=lambda s: s.t_ns)
    end = min((s for s in rows if s.t_ns >= last_ns), key=lambda s: s.t_ns)
    return (end.nr_periods - start.nr_periods, end.nr_throttled - start.nr_throttled,
            end.throttled_ns - start.throttled_ns)


def test_a_run_is_marked_from_the_sum_of_each_pods_own_agent(tmp_path: Path) -> None:
    path = a_run(tmp_path, 2000)
    run = mark_through_agents("k8s:shop/deployment/web", AGENTS,  # type: ignore[arg-type]
                              read_run(path))
    kept = read_run(path)
    assert kept.records == run.records and kept.timeline == run.timeline
    assert kept.timeline is not None
    first = min(r.start_ns for r in kept.records)
    last = max(r.end_ns for r in kept.records)
    assert kept.timeline[0].t_ns <= first and kept.timeline[-1].t_ns >= last
    # the kept sum changes across the run by each pod's own change added up
    owns = [own_delta(agent.rows(ZERO + 2000 * MS), first, last) for agent in AGENTS]
    got = kept.timeline[-1], kept.timeline[0]
    assert (got[0].nr_periods - got[1].nr_periods, got[0].nr_throttled - got[1].nr_throttled,
            got[0].throttled_ns - got[1].throttled_ns) == tuple(map(sum, zip(*owns)))
    assert all(own[1] > 0 for own in owns)   # both pods throttled across the run
    cgroup = kept.metadata.cgroup
    assert cgroup is not None
    assert cgroup["spec"] == "k8s:shop/deployment/web"
    assert cgroup["pods"] == ["k8s:shop/web-a", "k8s:shop/web-b"]
    assert cgroup["source"] == (
        "the sum over 2 pods: the node agent throttle-lab-recorder/a-1 on node n1, the node "
        "agent throttle-lab-recorder/a-2 on node n2, through the API server's proxy")
    assert cgroup["outside_timeline"] == 0
    assert all(r.cgroup_nr_throttled is not None for r in kept.records)
    assert kept.metadata.limit is not None and kept.metadata.limit.cpus == pytest.approx(1.0)


def test_each_pods_rows_are_cut_across_the_run_before_the_sum(tmp_path: Path) -> None:
    """The rows before the run (a run right after another) are not the sum's."""
    path = a_run(tmp_path, 5000)
    run = mark_through_agents("k8s:shop/deployment/web", AGENTS,  # type: ignore[arg-type]
                              read_run(path))
    assert run.timeline is not None
    # the agents were asked from 3 s before the first request: the sum begins at the pods'
    # last rows at or before it (a row every 10 ms each), and ends at their first after
    assert -10 * MS < run.timeline[0].t_ns <= 0
    assert 990 * MS <= run.timeline[-1].t_ns < 1000 * MS + 3 * MS + 10 * MS


def test_the_sums_quota_is_the_pods_quotas_added_up() -> None:
    level = {"path": "/a", "group": "pod-a", "quota_us": 10000, "period_us": 100000,
             "cpus": 0.1}
    pods = [{"path": f"/p{k}", "group": f"pod{k}", "quota_us": 10000, "period_us": 100000,
             "cpus": 0.1, "quota_group": f"pod{k}", "levels": [{**level, "path": f"/p{k}"}],
             "pressure": True} for k in (1, 2)]
    summed = summed_cgroup(pods)
    assert (summed["quota_us"], summed["cpus"]) == (20000, 0.2)
    assert summed["levels"][0]["quota_us"] == 20000 and summed["levels"][0]["cpus"] == 0.2
    assert summed["group"] == "pod1 (+1 pod(s): the sum)"
    assert summed["paths"] == ["/p1", "/p2"]
    assert summed["pressure"] is False
    no_quota = summed_cgroup([pods[0], {**pods[1], "quota_us": None}])
    assert no_quota["quota_us"] is None and no_quota["cpus"] is None
