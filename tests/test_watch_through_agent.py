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
from client.run.service_group import ServiceGroup, ServiceGroupError, NotHere
from client.run.pod_reach import THROUGH_API_ENV, locate, reach

DATA = Path(__file__).parent / "data" / "cluster"
NOT_HERE = "no cgroup for pod shop/api-a (uid 0) under kubepods: is this the pod's node?"


def test_a_pod_is_read_here_when_its_group_is_here_else_through_its_agent() -> None:
    assert not reach("k8s:shop/api-a", None).agent   # found here: its own files
    there = reach("k8s:shop/api-a", NotHere(NOT_HERE))
    assert there.agent and NOT_HERE in there.why
    assert reach("k8s:shop/api-a", None, forced=True).agent
    # a pod that is not there at all, or not the user's to read: said as it is
    assert not reach("k8s:shop/nosuch", ServiceGroupError("no pod nosuch in namespace shop")).agent
    assert not reach("/sys/fs/cgroup/cpu/x", NotHere("no such cgroup directory"),
                     forced=True).agent


def test_locate_tries_the_files_first_and_names_the_pod_for_the_agent() -> None:
    def not_here(spec: str) -> ServiceGroup:
        raise NotHere(NOT_HERE)

    assert locate("k8s:shop/api-a/web", not_here, {}) == PodRef("shop", "api-a", "web")
    def no_pod(spec: str) -> ServiceGroup:
        raise ServiceGroupError("no pod nosuch in namespace shop (kubectl: not found)")

    with pytest.raises(ServiceGroupError, match="no pod nosuch in namespace shop"):
        locate("k8s:shop/nosuch", no_pod, {})

    def must_not_be_asked(spec: str) -> ServiceGroup:
        raise AssertionError("the files were read though the agent was asked for")

    assert locate("k8s:shop/api-a", must_not_be_asked, {THROUGH_API_ENV: "1"}) == PodRef(
        "shop", "api-a")
    with pytest.raises(ServiceGroupError, match="expected k8s:NAMESPACE/POD"):
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


class CapturedAgent:
    """Stands for the agent's ``/timeline`` through the API: serves a capture in its format."""

    ref, namespace, agent, node = PodRef("shop", "web-a"), "throttle-lab-recorder", "a-1", "n2"

    def window(self, into: Path, from_s: float | None, to_s: float | None) -> Path:
        for suffix in (".cgroup.csv", ".json"):
            (into / f"shop_web-a{suffix}").write_bytes((DATA / f"shop_web-a{suffix}").read_bytes())
        return into / "shop_web-a.cgroup.csv"


def test_a_run_is_marked_from_the_agents_timeline_on_its_own_clock(tmp_path: Path) -> None:
    from client.data.files import read_run
    from client.run.agent_marks import mark_through_agent

    zero = json.loads((DATA / "shop_web-a.json").read_text())["clock"]["zero_epoch_ns"]
    ms = 1_000_000
    (tmp_path / "far.csv").write_text("seq,start_ns,latency_ns,status,error\n" + "".join(
        f"{i},{i * 100 * ms},{90 * ms},200,\n" for i in range(10)))
    (tmp_path / "far.json").write_text(json.dumps({   # the run began 2 s into the capture
        "name": "far", "clock": {"zero_epoch_ns": zero + 2000 * ms, "zero_uncertainty_ns": 1}}))
    run = mark_through_agent(CapturedAgent(), read_run(tmp_path / "far.csv"))  # type: ignore[arg-type]
    kept = read_run(tmp_path / "far.csv")
    assert kept.records == run.records and kept.timeline == run.timeline
    assert kept.timeline is not None
    captured = {s.t_ns for s in read_timeline(DATA / "shop_web-a.cgroup.csv")}
    assert {s.t_ns + 2000 * ms for s in kept.timeline} <= captured   # on the run's clock
    # across the requests: from the last row at or before the first one's start
    assert kept.timeline[0].t_ns <= 0 < kept.timeline[1].t_ns
    assert kept.metadata.cgroup is not None
    assert kept.metadata.cgroup["source"] == ("the node agent throttle-lab-recorder/a-1 on node "
                                              "n2, through the API server's proxy")
    assert kept.metadata.cgroup["spec"] == "k8s:shop/web-a"
    assert kept.metadata.cgroup["outside_timeline"] == 0
    assert all(r.cgroup_nr_throttled is not None for r in kept.records)
    assert sum(r.cgroup_nr_throttled or 0 for r in kept.records) > 0   # it throttles each period
    assert kept.metadata.limit is not None and kept.metadata.limit.cpus == pytest.approx(0.5)


def test_through_the_api_without_a_kubeconfig_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import usage_error

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.setenv(THROUGH_API_ENV, "1")
    line = usage_error(["--url", "http://127.0.0.1:9/x", "--cgroup", "k8s:shop/web-a",
                        "--requests", "1"], tmp_path, monkeypatch, capsys)
    assert line.startswith("http-timing: --cgroup k8s:shop/web-a: ") and "kubeconfig" in line
    assert not (tmp_path / "raw-data").exists()   # nothing sent, nothing written
    monkeypatch.chdir(tmp_path)
    from client.commands import main

    assert main(["watch", "k8s:shop/web-a", "--count", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("http-timing watch: k8s:shop/web-a: ")


def agent_pod(name: str, phase: str, ready: str | None) -> dict[str, object]:
    """An agent pod as the API lists it, its JSON (the fields read: phase, IP, Ready)."""
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": name}, "status": {
        "phase": phase, "conditions": conditions,
        **({"podIP": "10.42.1.5"} if phase == "Running" else {})}}


class Listed:
    """The API's raw answer (no model: ``_preload_content=False``) to listing the
    recorder's pods on one node."""

    def __init__(self, *pods: object) -> None:
        self.pods = list(pods)

    def list_namespaced_pod(self, namespace: str, **options: object) -> object:
        import json
        from types import SimpleNamespace

        assert options.get("_preload_content") is False
        return SimpleNamespace(data=json.dumps({"items": self.pods}).encode())


@pytest.mark.parametrize("pods, said", [
    ((), "no running node agent on node n2 (namespace throttle-lab-recorder"),
    ((agent_pod("a-1", "Pending", None),), "no running node agent on node n2"),
    ((agent_pod("a-1", "Running", "False"),),
     "the node agent throttle-lab-recorder/a-1 on node n2 is not ready: kubectl -n "
     "throttle-lab-recorder describe pod a-1"),
])
def test_a_node_without_a_ready_agent_is_one_line(pods: tuple[object, ...], said: str) -> None:
    from client.run.agent_timeline import AgentTimelineError, _agent_on

    with pytest.raises(AgentTimelineError) as info:
        _agent_on(Listed(*pods), "n2", "throttle-lab-recorder")
    assert str(info.value).startswith(said) and "\n" not in str(info.value)
    ready = agent_pod("a-2", "Running", "True")
    assert _agent_on(Listed(*pods, ready), "n2", "throttle-lab-recorder") == "a-2"
