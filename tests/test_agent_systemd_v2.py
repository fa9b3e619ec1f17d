"""The node agent (agent/, Go, its Kube source) and the client's ``k8s:`` lookup on the
kubelet's own cgroup v2 layout under the systemd driver with containerd, made for real in
the v2 guest (marker ``cgroup2``): ``kubepods.slice/kubepods-burstable.slice/
kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope``, the cpu controller handed down
to the container's scope (its own ``cpu.max``), a quota on the pod's slice, then a tighter one
on the container's, and one CPU-burning process in the scope.

The agent watches the pod as it does on a node: its Kube source lists the node's labelled pods
from an API server (a fake one in this process, ``tests.agent_support.fake_pod_api``) and finds
the groups by the pod's uid and the container's id. Its /metrics and its timeline's last row
must equal the groups' ``cpu.stat`` read here once they stopped moving, with the level that
binds named; the client's ``--cgroup k8s:NS/POD[/ID] --pod-uid UID`` (no kubectl) must find the
same groups and quota. Every group made is removed (``nested_groups``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from client.run.cgroup_sampler import read_sample
from client.run.service_group import resolve_cgroup
from cpuquota.cgroupfs import locate_cpu_controller
from service.cgroup import empty_group, remove_group
from tests.agent_support import (RunningAgent, fake_pod_api, parse_metrics, running_kube_agent,
                                 running_pod)
from tests.cgroup_fixtures import nested_groups
from tests.support import require_kernel_quota

pytestmark = pytest.mark.cgroup2

UID = "3c9e1f0a-5b7d-4e2f-8a6c-1d0b9e8f7a6c"
UID_ = UID.replace("-", "_")
CID = "e7a1c3f5" + "9" * 56
NS, POD, CONTAINER, NODE = "shop", "web", "app", "guest-node"
POD_SLICE = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
SCOPE = f"{POD_SLICE}/cri-containerd-{CID}.scope"
AGENT_SCOPE = ("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
               "0f1e2d3c_4b5a_4968_8776_a5b4c3d2e1f0.slice/cri-containerd-" + "a" * 64 + ".scope")
BURN = ["sh", "-c", "while :; do :; done"]     # one process, cheap to start under TCG


def cpu_stat(group: Path) -> dict[str, int]:
    return {k: int(v) for k, v in
            (line.split() for line in (group / "cpu.stat").read_text().splitlines())}


def quiet(*groups: Path) -> list[dict[str, int]]:
    """The groups' cpu.stat once it has stopped moving (a group's period timer runs on for up
    to two periods after its last use)."""
    last = [cpu_stat(g) for g in groups]
    while True:
        time.sleep(0.5)
        now = [cpu_stat(g) for g in groups]
        if now == last:
            return now
        last = now


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def labels(container: str, level: str) -> str:
    return f'container="{container}",level="{level}",namespace="{NS}",pod="{POD}"'


def timeline(agent: RunningAgent, container: str, fmt: str) -> httpx.Response:
    return httpx.get(agent.base + "/timeline", params={
        "namespace": NS, "pod": POD, "container": container, "format": fmt}, timeout=60)


def last_row(agent: RunningAgent) -> dict[str, int]:
    """The container's timeline's last row, by column name."""
    lines = timeline(agent, CONTAINER, "csv").text.strip().splitlines()
    header = lines[0].split(",")
    return {k: int(v) for k, v in zip(header, lines[-1].split(",")) if v}


def agree(agent: RunningAgent, want: dict[str, float], timeout: float = 60.0) -> None:
    """Until the agent's figures (``want``'s keys: metric lines, or ``row:<column>`` of the
    container's last timeline row) equal the values the test read from the kernel."""
    got: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while True:
        metrics, row = parse_metrics(agent.metrics()), last_row(agent)
        got = {k: (row.get(k[4:], -1) if k.startswith("row:") else metrics.get(k, -1))
               for k in want}
        if all(got[k] == pytest.approx(v, abs=1e-9) for k, v in want.items()):
            return
        if time.monotonic() > deadline:
            differ = "; ".join(f"{k}: the agent {got[k]}, cpu.stat {want[k]}"
                               for k in want if got[k] != pytest.approx(want[k], abs=1e-9))
            pytest.fail(f"the agent's figures differ from the groups' cpu.stat: {differ}")
        time.sleep(0.2)


def check_client(pod: Path, ctr: Path, binding: list[Path], pod_stat: dict[str, int]) -> None:
    """``--cgroup k8s:NS/POD/<id> --pod-uid UID`` (the full id and 12 characters of it) and
    ``k8s:NS/POD``: the container's scope, the pod's slice, the levels with a quota, the
    tightest first, and the sampler's counters from the binding level."""
    for spec in (f"k8s:{NS}/{POD}/{CID}", f"k8s:{NS}/{POD}/{CID[:12]}"):
        target = resolve_cgroup(spec, pod_uid=UID)
        assert target.directory == ctr and target.group == "/" + SCOPE, spec
        assert [level.directory for level in target.levels] == binding, spec
        assert target.pressure and target.stat_path == binding[0] / "cpu.stat"
    whole = resolve_cgroup(f"k8s:{NS}/{POD}", pod_uid=UID)
    assert whole.directory == pod and [lv.directory for lv in whole.levels] == [pod]
    sample = read_sample(whole)
    assert (sample.nr_periods, sample.nr_throttled, sample.throttled_ns) == (
        pod_stat["nr_periods"], pod_stat["nr_throttled"], pod_stat["throttled_usec"] * 1000)


@pytest.mark.timeout(900)
def test_agent_and_k8s_lookup_on_the_kubelets_systemd_layout(tmp_path: Path) -> None:
    require_kernel_quota(2)
    pods = [running_pod(NS, POD, UID, NODE, {CONTAINER: CID})]
    with nested_groups(SCOPE, POD_SLICE, 0.2) as (pod, ctr), agent_pod_group() as own:
        # as the kubelet's runtime does: the container's scope has the cpu controller too
        (pod / "cgroup.subtree_control").write_text("+cpu\n")
        assert (ctr / "cpu.max").read_text().split()[0] == "max"
        # the agent as its DaemonSet's pod runs it: in its own pod's scope, in a cgroup
        # namespace of its own (the v2 default), with the node's hierarchy mounted in
        wrap = ["sh", "-c", f'echo $$ > {own}/cgroup.procs && exec unshare -C "$@"', "sh"]
        with fake_pod_api(tmp_path, pods) as kubeconfig, \
                running_kube_agent(tmp_path, kubeconfig, NODE, "--interval", "50ms",
                                   start_s=300, wrap=wrap) as agent:
            # (mountinfo shows a cgroup mount's root from the reader's namespace: read it there)
            seen = subprocess.run(["nsenter", "-C", "-t", str(agent.proc.pid), "cat",
                                   "/proc/self/mountinfo"], capture_output=True, text=True,
                                  check=True).stdout.splitlines()
            roots = [line.split()[3] for line in seen if " - cgroup2 " in line]
            assert roots == ["/../../../.."], f"the agent sees the mount's root as {roots}"
            watch_both_levels(agent, pod, ctr)


@contextmanager
def agent_pod_group() -> Iterator[Path]:
    """The agent's own pod's scope (BestEffort), below the kubepods.slice the test made;
    removed at the end, the deepest first."""
    top = Path(locate_cpu_controller().mount.mount_point)
    made: list[Path] = []
    try:
        here = top / "kubepods.slice"
        for part in AGENT_SCOPE.split("/")[1:]:
            here = here / part
            here.mkdir()
            made.append(here)
        yield here
    finally:
        for directory in reversed(made):
            empty_group(directory)
            remove_group(directory)


def watch_both_levels(agent: RunningAgent, pod: Path, ctr: Path) -> None:
    """The pod's quota binds, then the container's: the agent's figures and the client's."""
    wait_for(lambda: timeline(agent, CONTAINER, "json").status_code == 200 and
             timeline(agent, "", "json").status_code == 200, "the agent's two timelines")
    meta = timeline(agent, CONTAINER, "json").json()["cgroup"]
    assert (meta["path"], meta["group"], meta["quota_group"], meta["cpus"]) == (
        str(ctr), "/" + SCOPE, "/" + POD_SLICE, 0.2), f"the pod's slice binds: {json.dumps(meta)}"
    burner = subprocess.Popen(BURN)
    try:
        (ctr / "cgroup.procs").write_text(f"{burner.pid}\n")
        wait_for(lambda: cpu_stat(pod)["nr_throttled"] >= 5, "5 periods throttled")
        os.kill(burner.pid, signal.SIGSTOP)        # its counters stop: compare them
        pod_stat, ctr_stat = quiet(pod, ctr)
        print(f"pod-level quota: pod {pod_stat}, container {ctr_stat}")
        p, c = labels("", "pod"), labels(CONTAINER, "container")
        agree(agent, {
            f"throttle_lab_cpu_cfs_periods_total{{{p}}}": pod_stat["nr_periods"],
            f"throttle_lab_cpu_cfs_throttled_periods_total{{{p}}}": pod_stat["nr_throttled"],
            f"throttle_lab_cpu_cfs_throttled_seconds_total{{{p}}}":
                pod_stat["throttled_usec"] / 1e6,
            f"throttle_lab_cpu_usage_seconds_total{{{p}}}": pod_stat["usage_usec"] / 1e6,
            f"throttle_lab_cpu_cfs_quota_seconds{{{p}}}": 0.02,
            f"throttle_lab_cpu_usage_seconds_total{{{c}}}": ctr_stat["usage_usec"] / 1e6,
            f"throttle_lab_cpu_cfs_throttled_periods_total{{{c}}}": ctr_stat["nr_throttled"],
            "row:usage_ns": ctr_stat["usage_usec"] * 1000,
            "row:nr_periods": pod_stat["nr_periods"],        # the binding level's
            "row:nr_throttled": pod_stat["nr_throttled"],
            "row:throttled_ns": pod_stat["throttled_usec"] * 1000})
        assert f"throttle_lab_cpu_cfs_quota_seconds{{{c}}}" not in agent.metrics()
        assert last_row(agent)["pressure_some_ns"] > 0          # PSI: it waited
        check_client(pod, ctr, [pod], pod_stat)

        # the container's own quota, tighter: it binds, in a new segment of its timeline
        (ctr / "cpu.max").write_text("10000 100000\n")
        wait_for(lambda: timeline(agent, CONTAINER, "json").json()["cgroup"]["quota_group"]
                 == "/" + SCOPE, "the container's quota in the agent's timeline")
        meta = timeline(agent, CONTAINER, "json").json()["cgroup"]
        assert [(lv["path"], lv["group"]) for lv in meta["levels"]] == [
        (str(ctr), "/" + SCOPE), (str(pod), "/" + POD_SLICE)]
        assert meta["cpus"] == 0.1
        os.kill(burner.pid, signal.SIGCONT)
        before = cpu_stat(ctr)["nr_throttled"]
        wait_for(lambda: cpu_stat(ctr)["nr_throttled"] >= before + 5,
                 "5 periods throttled by the container's quota")
    finally:
        burner.kill()
        burner.wait()
    pod_stat, ctr_stat = quiet(pod, ctr)
    print(f"container-level quota: pod {pod_stat}, container {ctr_stat}")
    agree(agent, {
        f"throttle_lab_cpu_cfs_periods_total{{{c}}}": ctr_stat["nr_periods"],
        f"throttle_lab_cpu_cfs_throttled_periods_total{{{c}}}": ctr_stat["nr_throttled"],
        f"throttle_lab_cpu_cfs_throttled_seconds_total{{{c}}}":
            ctr_stat["throttled_usec"] / 1e6,
        f"throttle_lab_cpu_cfs_quota_seconds{{{c}}}": 0.01,
        f"throttle_lab_cpu_cfs_throttled_periods_total{{{p}}}": pod_stat["nr_throttled"],
        "row:usage_ns": ctr_stat["usage_usec"] * 1000,
        "row:nr_periods": ctr_stat["nr_periods"],            # the binding level's
        "row:nr_throttled": ctr_stat["nr_throttled"],
        "row:throttled_ns": ctr_stat["throttled_usec"] * 1000,
        "row:level1_nr_periods": pod_stat["nr_periods"],     # the pod's, next
        "row:level1_nr_throttled": pod_stat["nr_throttled"],
        "row:level1_throttled_ns": pod_stat["throttled_usec"] * 1000})
    check_client(pod, ctr, [ctr, pod], pod_stat)
