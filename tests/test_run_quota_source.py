"""A pod on another node, resized from a kubeconfig alone: the resize is in force once the pod's
status says the new limit AND its node's agent counts the pod's rows under the new quota
(``client.run.limiters.quota_source``); the agent's words and a refused resize are one line
each, naming what to do; a run's rows from the agent are those across its requests. A scripted
API and a scripted agent; the same on the real two-node
cluster: tests/test_two_nodes_commands.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.analysis.advise import shape
from client.run.agent_marks import across
from client.run.agent_timeline import AgentLink, NoTimeline, PodRef
from client.run.inplace import InPlace
from client.run.limiters import LimiterError
from client.run.limiters.base import same_limit
from client.run.limiters.kubernetes import USER_RBAC, KubernetesLimiter
from client.run.limiters.pods import PodsLimiter
from client.run.limiters.quota_source import AgentQuota, limit_of
from cpuquota.limit import Limit
from tests.test_run_limiters_kubernetes import ScriptedApi, pod

LINK = AgentLink(None, PodRef("shop", "api-1"), "node-2", "throttle-lab-recorder", "agent-x")


class Agent:
    """The agent's metadata of its latest rows: the quota file as it read it ``lag`` polls
    ago (it re-reads the quota once a second); ``rows=False``: no row in the window."""

    def __init__(self, quota_file: Path, lag: int = 0, rows: bool = True,
                 cpus: int | None = None) -> None:
        self.quota_file, self.lag, self.rows, self.cpus = quota_file, lag, rows, cpus
        self.seen: list[int] = []

    def __call__(self, since: float) -> dict[str, Any]:
        if not self.rows:
            raise NoTimeline("the agent has no timeline for shop/api-1 in that window")
        self.seen.append(int(self.quota_file.read_text()))
        quota = self.seen[max(0, len(self.seen) - 1 - self.lag)]
        meta: dict[str, Any] = {"cgroup": {"quota_us": quota, "period_us": 100000,
                                           "burst_us": None}}
        if self.cpus is not None:
            meta["host_cpus"] = self.cpus
        return meta


def through_agent(tmp_path: Path, agent: Agent, api: ScriptedApi,
                  link: AgentLink = LINK) -> KubernetesLimiter:
    return KubernetesLimiter(None, api, "shop", link.ref.pod, "app", to_json=lambda obj: obj,
                             timeout=2, quota=AgentQuota(link, agent), rbac=USER_RBAC)


def test_the_agents_metadata_names_the_quota_as_the_files_do() -> None:
    assert same_limit(limit_of({"quota_us": 30000, "period_us": 100000}), Limit(0.3))
    assert limit_of({"quota_us": None, "period_us": 100000}) is None   # no quota
    assert limit_of(None) is None
    burst = limit_of({"quota_us": 20000, "period_us": 100000, "burst_us": 50000})
    assert burst is not None and burst.burst_us == 20000   # capped at the quota, as read


def test_a_resize_is_in_force_once_the_pods_status_and_its_agent_say_so(tmp_path: Path
                                                                         ) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("50000")
    agent = Agent(tmp_path / "cpu.cfs_quota_us", lag=3)
    limits = through_agent(tmp_path, agent, ScriptedApi(pod(), tmp_path, lag=1))
    assert same_limit(limits.read(), Limit(0.5))
    limits.apply(Limit(0.3))
    assert agent.seen[-1] == 30000 and len(agent.seen) > 3   # it waited for the agent's rows
    assert same_limit(limits.read(), Limit(0.3))


def test_an_agent_that_never_counts_the_new_quota_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("50000")
    agent = Agent(tmp_path / "cpu.cfs_quota_us", lag=1000)
    limits = through_agent(tmp_path, agent, ScriptedApi(pod(), tmp_path, lag=1))
    with pytest.raises(LimiterError, match=r"^the limit is not in force: the node agent "
                       r"throttle-lab-recorder/agent-x's timeline on node node-2 counts "
                       r"k8s:shop/api-1 under 50000/100000 µs, not 30000/100000 µs"):
        limits.quota.wait_for(Limit(0.3), timeout=0.3)


def test_an_agent_without_rows_of_the_pod_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("50000")
    limits = through_agent(tmp_path, Agent(tmp_path / "cpu.cfs_quota_us", rows=False),
                           ScriptedApi(pod(), tmp_path))
    with pytest.raises(LimiterError, match="has no row of the pod in the last 10 s"):
        limits.read()


class Refused(Exception):
    status = 403


class NoResize(ScriptedApi):
    def patch_namespaced_pod_resize(self, name: str, namespace: str,
                                    body: dict[str, Any], **_: Any) -> None:
        raise Refused("pods \"api-1\" is forbidden")


def test_no_right_to_resize_names_the_users_role(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("50000")
    limits = through_agent(tmp_path, Agent(tmp_path / "cpu.cfs_quota_us"),
                           NoResize(pod(), tmp_path))
    with pytest.raises(LimiterError) as caught:
        limits.apply(Limit(0.3))
    assert str(caught.value) == (
        "no permission: patch pods/resize in namespace shop: the ClusterRole "
        "throttle-lab-pod-resizer in k8s/recorder/user-rbac.yaml grants it (kubectl -n "
        "NAMESPACE create rolebinding ... --clusterrole=throttle-lab-pod-resizer --user=YOU)")


def test_a_runs_rows_from_the_agent_are_those_across_its_requests() -> None:
    timeline = "t_ns,usage_ns\n0,1\n500,2\n1000,3\n1500,4\n2000,5\n"
    # a run right after another: the other's tail (0..500) is not the run's
    assert across(timeline, 1100, 1600) == "t_ns,usage_ns\n1000,3\n1500,4\n2000,5\n"
    assert across(timeline, 1000, 1500) == "t_ns,usage_ns\n1000,3\n1500,4\n"
    assert across(timeline, -5, 9000) == timeline   # no row beyond: all of them


def test_a_pod_on_another_node_is_tried_up_to_that_nodes_cpus(tmp_path: Path) -> None:
    """The largest limit worth trying is the pod's node's CPU count, as its agent says; an
    agent that does not say leaves this machine's."""
    (tmp_path / "cpu.cfs_quota_us").write_text("50000")
    there = through_agent(tmp_path, Agent(tmp_path / "cpu.cfs_quota_us", cpus=16),
                          ScriptedApi(pod(), tmp_path))
    assert there.node_cpus() == (16, "node node-2's 16 CPUs")
    at = InPlace(None, there, Limit(0.5), None)  # type: ignore[arg-type]  # only the limiter
    assert at.ceiling(shape(100, 0)) == (16000, "node node-2's 16 CPUs")
    older = through_agent(tmp_path, Agent(tmp_path / "cpu.cfs_quota_us"),
                          ScriptedApi(pod(), tmp_path))
    assert older.node_cpus() is None


def test_a_deployments_pods_are_tried_up_to_their_smallest_nodes_cpus(tmp_path: Path
                                                                       ) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("50000")
    big, small = (through_agent(tmp_path, Agent(tmp_path / "cpu.cfs_quota_us", cpus=cpus),
                                ScriptedApi(pod(), tmp_path),
                                AgentLink(None, PodRef("shop", "api-1"), node,
                                          "throttle-lab-recorder", f"agent-{node}"))
                  for cpus, node in ((16, "node-2"), (4, "node-3")))
    assert PodsLimiter("shop/api", [big, small]).node_cpus() == (4, "node node-3's 4 CPUs")
