"""``client.run.limiters``: a running service's limit set in place and read back, on fixture
trees (the kernel's files written as plain files: what is written is what a later read sees)
and with a scripted ``docker`` (``docker update``'s command line; the quota file it would
write). The real kernel and a real container: tests/test_commands_advise_live.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from client.run.cgroup_lookup import CommandResult
from client.run.service_group import resolve_cgroup
from client.run.limiters import LIMITERS, LimiterError, LimiterOptions, limiter_for
from client.run.limiters.base import read_quota, same_limit, wait_for_quota, write_quota
from client.run.limiters.cgroupfs import CgroupLimiter
from client.run.limiters.docker import DockerLimiter
from cpuquota.limit import Limit
from tests.cgroup_fixtures import fake_proc, mount_line, v1_group, v2_group


def v1_tree(tmp_path: Path, quota_us: int = 30000, parent_quota: int | None = None
            ) -> tuple[Path, Path]:
    """A v1 cpu hierarchy with group ``/app`` (below ``/pod`` with ``parent_quota``)."""
    top = tmp_path / "cpu"
    v1_group(top, quota_us=-1)
    v1_group(top / "pod", quota_us=parent_quota if parent_quota is not None else -1)
    v1_group(top / "pod" / "app", quota_us=quota_us, cpuacct_usage=5)
    proc = fake_proc(tmp_path / "proc", [mount_line(30, "/", top, "cgroup", "rw,cpu,cpuacct")])
    return top / "pod" / "app", proc


def test_v1_quota_written_and_read_back(tmp_path: Path) -> None:
    group, proc = v1_tree(tmp_path)
    limiter = limiter_for(resolve_cgroup(str(group), proc=proc))
    assert isinstance(limiter, CgroupLimiter) and limiter.directory == group
    assert same_limit(limiter.read(), Limit(0.3))
    limiter.apply(Limit(0.55))
    assert (group / "cpu.cfs_quota_us").read_text() == "55000"
    assert same_limit(limiter.read(), Limit(0.55))
    limiter.apply(Limit(0.2, 50, 5))          # a new period, with a burst
    assert (group / "cpu.cfs_period_us").read_text() == "50000"
    assert (group / "cpu.cfs_burst_us").read_text() == "5000"
    assert same_limit(limiter.read(), Limit(0.2, 50, 5))
    limiter.apply(None)
    assert (group / "cpu.cfs_quota_us").read_text() == "-1" and limiter.read() is None
    assert "cpu.cfs_quota_us" in limiter.restore_hint(Limit(0.3))


def test_the_level_that_holds_the_quota_is_written(tmp_path: Path) -> None:
    """A pod's quota over its container's group: the pod's file is the one changed."""
    group, proc = v1_tree(tmp_path, quota_us=-1, parent_quota=40000)
    limiter = CgroupLimiter(resolve_cgroup(str(group), proc=proc))
    assert limiter.directory == group.parent and limiter.ceiling() is None
    limiter.apply(Limit(0.7))
    assert (group.parent / "cpu.cfs_quota_us").read_text() == "70000"
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "-1"


def test_a_limit_above_an_ancestors_quota_is_refused(tmp_path: Path) -> None:
    group, proc = v1_tree(tmp_path, quota_us=30000, parent_quota=80000)
    limiter = CgroupLimiter(resolve_cgroup(str(group), proc=proc))
    assert limiter.directory == group
    ceiling = limiter.ceiling()
    assert ceiling is not None and ceiling.cpus == pytest.approx(0.8)
    limiter.check(Limit(0.8))
    with pytest.raises(LimiterError, match="above the quota of 0.8 CPU"):
        limiter.check(Limit(0.9))
    with pytest.raises(LimiterError, match="minimum"):
        limiter.check(Limit(0.001))


def test_v2_cpu_max(tmp_path: Path) -> None:
    top = tmp_path / "unified"
    v2_group(top, cpu_max=None)
    group = v2_group(top / "app", cpu_max="max 100000")
    proc = fake_proc(tmp_path / "proc", [mount_line(30, "/", top, "cgroup2", "rw")])
    limiter = CgroupLimiter(resolve_cgroup(str(group), proc=proc))
    assert limiter.read() is None
    limiter.apply(Limit(0.25))
    assert (group / "cpu.max").read_text() == "25000 100000"
    limiter.apply(None)
    assert (group / "cpu.max").read_text() == "max 100000"
    assert limiter.restore_hint(None) == f"echo max > {group}/cpu.max"


def test_a_limit_not_in_force_says_so(tmp_path: Path) -> None:
    group, _ = v1_tree(tmp_path)
    write_quota(group, 1, Limit(0.5))
    assert same_limit(wait_for_quota(group, 1, Limit(0.5), timeout=0.1), Limit(0.5))
    with pytest.raises(LimiterError, match="not in force.*50000/100000"):
        wait_for_quota(group, 1, Limit(0.6), timeout=0.1)
    with pytest.raises(LimiterError, match="no such file"):
        read_quota(tmp_path / "gone", 1)


class ScriptedDocker:
    """``docker update``: the quota file written as the engine would; every command kept."""

    def __init__(self, group: Path, fail: str | None = None) -> None:
        self.group, self.fail, self.calls = group, fail, []  # type: list[list[str]]

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        if self.fail:
            return CommandResult(1, "", self.fail)
        assert argv[:3] == ["docker", "update", "--cpus"]
        (self.group / "cpu.cfs_quota_us").write_text(str(round(float(argv[3]) * 100000)))
        return CommandResult(0, argv[4] + "\n", "")


def test_docker_update_and_read_back(tmp_path: Path) -> None:
    group, proc = v1_tree(tmp_path)
    # the group docker:web resolves to
    target = replace(resolve_cgroup(str(group), proc=proc), spec="docker:web")
    docker = ScriptedDocker(group)
    limiter = LIMITERS["docker"](target, docker, LimiterOptions())
    assert isinstance(limiter, DockerLimiter) and not limiter.can_remove
    limiter.apply(Limit(0.45))
    assert docker.calls == [["docker", "update", "--cpus", "0.45", "web"]]
    assert same_limit(limiter.read(), Limit(0.45))
    for bad, words in ((None, "cannot take"), (Limit(0.3, 50), "100 ms period"),
                       (Limit(0.3, 100, 1), "burst")):
        with pytest.raises(LimiterError, match=words):
            limiter.check(bad)
    refused = DockerLimiter(target, ScriptedDocker(group, "permission denied while trying"))
    with pytest.raises(LimiterError, match="permission denied"):
        refused.apply(Limit(0.5))


def test_an_unsupported_kind_is_one_line(tmp_path: Path) -> None:
    group, proc = v1_tree(tmp_path)
    target = replace(resolve_cgroup(str(group), proc=proc), spec="podman:web")
    with pytest.raises(LimiterError, match="podman: target is not supported yet"):
        limiter_for(target)


def test_the_root_group_cannot_get_a_quota(tmp_path: Path) -> None:
    group, proc = v1_tree(tmp_path, quota_us=-1)
    top = group.parent.parent
    with pytest.raises(LimiterError, match="root cgroup"):
        CgroupLimiter(resolve_cgroup(str(top), proc=proc))


def test_a_kind_without_a_capability_says_what_it_lacks(tmp_path: Path) -> None:
    group, proc = v1_tree(tmp_path)
    target = replace(resolve_cgroup(str(group), proc=proc), spec="docker:web")
    limiter = LIMITERS["docker"](target, ScriptedDocker(group), LimiterOptions())
    assert limiter.ceiling() is None      # nothing above caps a container's limit
    assert limiter.unchanged() is None    # nothing to say after the restore
    with pytest.raises(LimiterError, match="--apply patches a Kubernetes Deployment; docker "
                       "targets: see 'To keep it'"):
        limiter.patch_deployment(Limit(0.5))
