"""``http-timing --cgroup`` when the quota is on the parent (a pod's) and the service runs in a
child group without one (a container's), on real groups: cgroup v1 on this host (root), and
cgroup v2 in the guest (marker ``cgroup2``) with the names real nodes give these groups, where
the child has no cpu controller at all and the group's ``cpu.pressure`` (PSI) is sampled too.
The kernel counts a throttle only in the group whose quota it was: the marks must come from
the parent, and ``report`` must name it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from client.analysis.report import build_report
from client.data.files import read_run
from client.data.timeline import read_timeline, timeline_path
from client.run.cgroup_sampler import read_sample
from client.run.service_group import resolve_cgroup
from client.render.text import format_report
from cpuquota.cgroupfs import locate_cpu_controller
from tests.cgroup_fixtures import burner_in, nested_groups
from tests.support import http_timing, require, require_kernel_quota

MS = 1_000_000
UID = "8d1f5a3c-1b2e-4c6d-9e8f-0a1b2c3d4e5f"
UID_ = UID.replace("-", "_")
CID = "d4f2a9c" + "0" * 57          # past 'c': crio-conmon-<id> sorts before crio-<id>

# (path of the container's group, the pod-level group that holds the quota)
LAYOUTS = {
    "docker": (f"system.slice/docker-{CID}.scope", "system.slice"),
    "containerd-burstable": (
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope",
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"),
    "crio-besteffort": (
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
        f"crio-{CID}.scope",
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"),
    "containerd-guaranteed": (f"kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}"
                              ".scope", f"kubepods.slice/kubepods-pod{UID_}.slice"),
    "cgroupfs-burstable": (f"kubepods/burstable/pod{UID}/{CID}", f"kubepods/burstable/pod{UID}"),
}


def require_version(version: int) -> None:
    require_kernel_quota()
    found = locate_cpu_controller().version
    require(found == version, f"needs the cpu controller on cgroup v{version} (this kernel: "
                              f"v{found})")


def timed_run(tmp_path: Path, target: str, url: str) -> tuple[dict[str, object], str]:
    """A sequential run against ``url`` attached to ``target`` (the CLI, as a user runs it);
    its report's JSON and text (``http-timing report [--json]``: in this process on v2, where
    each start of the CLI costs a guest under TCG half a minute)."""
    result = http_timing("--url", url, "--iterations", "0", "--requests", "40", "--cgroup",
                         target, "--name", "a", "--quiet", "--no-plot", cwd=tmp_path,
                         timeout=600)
    assert result.returncode == 0, result.stderr
    if locate_cpu_controller().version == 1:
        report = http_timing("report", "raw-data/a.csv", "--json", cwd=tmp_path)
        assert report.returncode == 0, report.stderr
        text = http_timing("report", "raw-data/a.csv", cwd=tmp_path).stdout
        return json.loads(report.stdout), text
    csv = tmp_path / "raw-data" / "a.csv"
    built = build_report(read_run(csv))
    return built.to_dict(), "\n".join(format_report(built, csv))


def check_marks_from_the_parent(tmp_path: Path, pod: Path, data: dict[str, object]) -> None:
    csv = tmp_path / "raw-data" / "a.csv"
    run = read_run(csv)
    timeline = read_timeline(timeline_path(csv))
    assert run.metadata.cgroup is not None
    levels = run.metadata.cgroup["levels"]
    assert [level["path"] for level in levels] == [str(pod)]
    group = levels[0]["group"]
    assert run.metadata.cgroup["quota_group"] == group and group.endswith(pod.name)
    parent_ns = timeline[-1].throttled_ns - timeline[0].throttled_ns
    assert parent_ns > 100 * MS            # the pod's quota bit (its own counters show it)
    marks = [r.cgroup_throttled_ns or 0 for r in run.records]
    assert sum(1 for m in marks if m) >= 3
    assert sum(marks) == pytest.approx(parent_ns, rel=0.25)   # sequential: they add up
    cgroup = data["cgroup"]
    assert isinstance(cgroup, dict)
    assert cgroup["quota_group"] == group and cgroup["quota_cpus"] == 0.2
    assert cgroup["throttled_requests"] >= 3


@pytest.mark.root
def test_v1_quota_on_the_parent_marks_the_child_s_requests(tmp_path: Path) -> None:
    require_version(1)
    top = f"throttle-lab-test-{os.getpid()}"
    path, quota_at = LAYOUTS["cgroupfs-burstable"]
    with nested_groups(f"{top}/{path}", f"{top}/{quota_at}", 0.2) as (pod, ctr):
        with burner_in(ctr) as service:
            data, text = timed_run(tmp_path, f"pid:{service.pid}",
                                   service.base_url + "/burn?ms=8")
    check_marks_from_the_parent(tmp_path, pod, data)
    cgroup = data["cgroup"]
    assert isinstance(cgroup, dict) and cgroup["pressure_some_ms"] is None   # v1: no PSI
    assert f"throttled by the quota on /{top}/{quota_at} (0.2 CPU)" in text
    assert "CPU pressure (PSI): not recorded" in text


@pytest.mark.cgroup2
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_v2_runtime_groups_resolve_with_the_pod_s_quota(layout: str) -> None:
    """Every runtime's names, by pid: the container's group has no cpu controller; the
    pod's quota is the one in force, its counters are sampled, and PSI is read."""
    require_version(2)
    path, quota_at = LAYOUTS[layout]
    with nested_groups(path, quota_at, 0.2) as (pod, ctr):
        if layout.startswith("crio"):                     # CRI-O's monitor beside it
            (ctr.parent / f"crio-conmon-{CID}.scope").mkdir()
        sleeper = subprocess.Popen(["sleep", "300"])      # cheap to start under TCG
        try:
            (ctr / "cgroup.procs").write_text(f"{sleeper.pid}\n")
            assert not (ctr / "cpu.max").exists()
            target = resolve_cgroup(f"pid:{sleeper.pid}")
            assert target.directory == ctr and target.group == "/" + path
            assert [level.directory for level in target.levels] == [pod]
            assert target.limit is not None and target.limit.cpus == 0.2
            assert target.pressure and target.stat_path == pod / "cpu.stat"
            sample = read_sample(target)
            assert sample.pressure_some_ns is not None and sample.usage_ns >= 0
        finally:
            sleeper.kill()
            sleeper.wait()
            if layout.startswith("crio"):
                (ctr.parent / f"crio-conmon-{CID}.scope").rmdir()


@pytest.mark.cgroup2
@pytest.mark.timeout(900)          # under TCG the CLI alone takes half a minute to start
@pytest.mark.parametrize(("layout", "by"), [("containerd-burstable", "pid")])   # every layout
# resolves alike (test_v2_runtime_groups_resolve_with_the_pod_s_quota): one run marks them
def test_v2_quota_on_the_pod_marks_the_container_s_requests(tmp_path: Path, layout: str,
                                                            by: str) -> None:
    require_version(2)
    path, quota_at = LAYOUTS[layout]
    with nested_groups(path, quota_at, 0.2) as (pod, ctr):
        with burner_in(ctr) as service:
            target = f"pid:{service.pid}" if by == "pid" else str(ctr)
            data, text = timed_run(tmp_path, target, service.base_url + "/burn?ms=8")
    check_marks_from_the_parent(tmp_path, pod, data)
    cgroup = data["cgroup"]
    assert isinstance(cgroup, dict)
    assert cgroup["pressure_some_ms"] is not None and cgroup["pressure_some_ms"] > 0
    header = timeline_path(tmp_path / "raw-data" / "a.csv").read_text().splitlines()[0]
    assert "pressure_some_ns,pressure_full_ns" in header
    assert f"throttled by the quota on /{quota_at} (0.2 CPU)" in text
    assert "CPU pressure (PSI): some tasks waited" in text
