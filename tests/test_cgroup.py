"""service.cgroup: parsing sample text (v1, v2, inside containers), then the real cgroup files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cpuquota.cgroupfs import (CgroupError, CpuController, CpuLimit, CpuStatReader, Mount,
                               find_cpu_controller, limit_in_force, locate_cpu_controller,
                               map_group_path, parse_cfs_value, parse_cpu_max, parse_cpu_stat,
                               parse_mountinfo, parse_pressure, parse_proc_cgroup, quota_levels,
                               read_cpu_limit, read_cpu_stat)
from service.cgroup import (create_group, empty_group, lift_quota, move_pid, remove_group,
                            unique_group_name)
from cpuquota.limit import Limit
from cpuquota.account import CpuStat
from tests.support import HIERARCHIES, favour_group, require, require_kernel_quota

# ---- samples ------------------------------------------------------------------------------

# This machine: cgroup v1, cpu alone in its hierarchy, a cgroup2 without the cpu controller.
HOST_V1_CGROUP = """\
9:name=systemd:/
4:memory:/process_api/09481d1b
2:cpuacct:/
1:cpu:/
0::/
"""
HOST_V1_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
22 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw
"""
# Inside `docker run --cpus 0.3` on a v1 host: the container's group is the mount's root.
DOCKER_V1_CGROUP = "12:cpu,cpuacct:/docker/4f2a9c\n11:memory:/docker/4f2a9c\n"
DOCKER_V1_MOUNTINFO = (
    "610 600 0:60 /docker/4f2a9c /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime "
    "master:18 - cgroup cgroup rw,cpu,cpuacct\n"
    "611 600 0:61 /docker/4f2a9c /sys/fs/cgroup/cpuset ro,nosuid - cgroup cgroup rw,cpuset\n"
)
# A current distro (systemd, v2 only).
HOST_V2_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"
HOST_V2_MOUNTINFO = ("29 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - "
                     "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")
# A container on v2 with its own cgroup namespace: it sees itself as the root.
DOCKER_V2_NS_CGROUP = "0::/\n"
DOCKER_V2_NS_MOUNTINFO = "700 690 0:27 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n"
# A container on v2 without a namespace (cgroupns=host): the mount's root is the container's group.
DOCKER_V2_HOSTNS_CGROUP = "0::/system.slice/docker-4f2a9c.scope\n"
DOCKER_V2_HOSTNS_MOUNTINFO = ("700 690 0:27 /system.slice/docker-4f2a9c.scope /sys/fs/cgroup "
                              "ro,nosuid - cgroup2 cgroup rw\n")

V1_STAT = ("nr_periods 31\nnr_throttled 30\nthrottled_time 2071000000\nnr_bursts 2\n"
           "burst_time 5000000\n")
V2_STAT = ("usage_usec 900000\nuser_usec 880000\nsystem_usec 20000\nnr_periods 31\n"
           "nr_throttled 30\nthrottled_usec 2071000\nnr_bursts 2\nburst_usec 5000\n")
V2_STAT_NO_CPU_CONTROLLER = "usage_usec 900000\nuser_usec 880000\nsystem_usec 20000\n"


# ---- pure parsing --------------------------------------------------------------------------

def test_parse_proc_cgroup_v1_v2_and_combined_controllers() -> None:
    rows = parse_proc_cgroup(HOST_V1_CGROUP + DOCKER_V1_CGROUP + "garbage\n\n")
    assert rows[0].hierarchy_id == 9 and rows[0].controllers == ("name=systemd",)
    assert [r.path for r in rows if "cpu" in r.controllers] == ["/", "/docker/4f2a9c"]
    assert rows[-2].controllers == ("cpu", "cpuacct")
    v2 = parse_proc_cgroup(HOST_V2_CGROUP)
    assert len(v2) == 1 and v2[0].hierarchy_id == 0 and v2[0].controllers == ()
    assert v2[0].path == "/user.slice/user-1000.slice/session-3.scope"


def test_parse_mountinfo_keeps_cgroup_mounts_and_unescapes() -> None:
    mounts = parse_mountinfo(HOST_V1_MOUNTINFO)
    assert [m.mount_point for m in mounts] == ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
                                               "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/unified"]
    assert mounts[0].fstype == "cgroup" and "cpu" in mounts[0].super_options
    assert mounts[-1].fstype == "cgroup2"
    escaped = parse_mountinfo("1 0 0:9 /a\\040b /mnt/my\\040cg rw - cgroup2 none rw\n")
    assert escaped == [Mount("/a b", "/mnt/my cg", "cgroup2", ("rw",))]


def test_map_group_path_through_the_mount_root() -> None:
    host = Mount("/", "/sys/fs/cgroup/cpu", "cgroup", ("rw", "cpu"))
    assert map_group_path(host, "/") == "/sys/fs/cgroup/cpu"
    assert map_group_path(host, "/docker/x") == "/sys/fs/cgroup/cpu/docker/x"
    inside = Mount("/docker/x", "/sys/fs/cgroup/cpu", "cgroup", ("rw", "cpu"))
    assert map_group_path(inside, "/docker/x") == "/sys/fs/cgroup/cpu"
    assert map_group_path(inside, "/docker/x/sub") == "/sys/fs/cgroup/cpu/sub"
    assert map_group_path(inside, "/docker/xy") is None       # a prefix, not a parent
    assert map_group_path(inside, "/../other") is None
    assert map_group_path(Mount("/", "/", "cgroup2", ()), "/") == "/"


@pytest.mark.parametrize(("proc", "mountinfo", "version", "group", "directory"), [
    (HOST_V1_CGROUP, HOST_V1_MOUNTINFO, 1, "/", "/sys/fs/cgroup/cpu"),
    (DOCKER_V1_CGROUP, DOCKER_V1_MOUNTINFO, 1, "/docker/4f2a9c", "/sys/fs/cgroup/cpu,cpuacct"),
    (HOST_V2_CGROUP, HOST_V2_MOUNTINFO, 2, "/user.slice/user-1000.slice/session-3.scope",
     "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"),
    (DOCKER_V2_NS_CGROUP, DOCKER_V2_NS_MOUNTINFO, 2, "/", "/sys/fs/cgroup"),
    (DOCKER_V2_HOSTNS_CGROUP, DOCKER_V2_HOSTNS_MOUNTINFO, 2, "/system.slice/docker-4f2a9c.scope",
     "/sys/fs/cgroup"),
])
def test_find_cpu_controller(proc: str, mountinfo: str, version: int, group: str,
                             directory: str) -> None:
    controller = find_cpu_controller(proc, mountinfo)
    assert controller is not None
    assert (controller.version, controller.group) == (version, group)
    assert controller.directory == Path(directory)


def test_find_cpu_controller_without_one() -> None:
    # v1 cpu hierarchy listed but not mounted, and no v2 line: nothing to find
    unmounted = HOST_V1_MOUNTINFO.replace("rw,cpu\n", "rw,xx\n")
    assert find_cpu_controller("1:cpu:/\n", unmounted) is None
    # the group is outside what the only mount shows
    assert find_cpu_controller("0::/elsewhere\n", DOCKER_V2_HOSTNS_MOUNTINFO) is None
    assert find_cpu_controller("", "") is None


def test_parse_quota_files() -> None:
    assert parse_cfs_value("-1\n") is None
    assert parse_cfs_value("30000\n") == 30000
    assert parse_cpu_max("max 100000\n") == (None, 100000)
    assert parse_cpu_max("30000 100000\n") == (30000, 100000)
    with pytest.raises(ValueError, match="QUOTA PERIOD"):
        parse_cpu_max("30000\n")


def test_parse_cpu_stat_normalises_throttled_time_to_ns() -> None:
    v1, v2 = parse_cpu_stat(V1_STAT, 1), parse_cpu_stat(V2_STAT, 2)
    assert v1 == v2 == CpuStat(31, 30, 2_071_000_000, 2, 5_000_000)
    assert parse_cpu_stat(V2_STAT_NO_CPU_CONTROLLER, 2) is None
    assert v1 is not None and v1 - CpuStat(1, 0, 71_000_000) == CpuStat(30, 30, 2_000_000_000, 2,
                                                                        5_000_000)


@pytest.mark.parametrize(("text", "expected"), [
    # Linux >= 5.14: the burst counters
    ("usage_usec 5\nuser_usec 4\nsystem_usec 1\nnr_periods 9\nnr_throttled 3\n"
     "throttled_usec 1500\nnr_bursts 2\nburst_usec 700\n", CpuStat(9, 3, 1_500_000, 2, 700_000)),
    # 4.15 - 5.13: no burst fields
    ("usage_usec 5\nuser_usec 4\nsystem_usec 1\nnr_periods 9\nnr_throttled 3\n"
     "throttled_usec 1500\n", CpuStat(9, 3, 1_500_000, 0, 0)),
    # a newer kernel's extra fields (core scheduling) are passed over
    ("usage_usec 5\nuser_usec 4\nsystem_usec 1\ncore_sched.force_idle_usec 0\nnr_periods 9\n"
     "nr_throttled 3\nthrottled_usec 1500\nnr_bursts 0\nburst_usec 0\n", CpuStat(9, 3, 1_500_000)),
])
def test_parse_v2_cpu_stat_with_and_without_burst_fields(text: str, expected: CpuStat) -> None:
    assert parse_cpu_stat(text, 2) == expected


def test_parse_pressure_totals_in_ns() -> None:
    text = ("some avg10=1.50 avg60=0.30 avg300=0.07 total=2071000\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=1500\n")
    pressure = parse_pressure(text)
    assert (pressure.some_ns, pressure.full_ns) == (2_071_000_000, 1_500_000)
    assert parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").full_ns is None
    with pytest.raises(ValueError, match="no 'some"):
        parse_pressure("")


def test_cpu_limit_cpus_and_dict() -> None:
    limited = CpuLimit(1, "/sys/fs/cgroup/cpu/g", "/g", 30000, 100000, 0)
    assert limited.cpus == 0.3
    keys = {"version", "path", "quota_us", "period_us", "burst_us", "cpus"}
    assert set(limited.as_dict()) >= keys
    assert CpuLimit(2, "/sys/fs/cgroup", "/", None, 100000, None).as_dict()["cpus"] is None


# ---- the files, in a directory laid out like cgroupfs --------------------------------------

def _v1_group(directory: Path, quota: int, period: int = 100000, stat: str = V1_STAT) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period}\n")
    (directory / "cpu.cfs_burst_us").write_text("0\n")
    (directory / "cpu.stat").write_text(stat)


def test_limit_in_force_is_the_tightest_up_to_the_mount(tmp_path: Path) -> None:
    # like Kubernetes: a limit on the pod (0.5) and a tighter one on the container (0.2)
    mount = Mount("/", str(tmp_path), "cgroup", ("rw", "cpu"))
    _v1_group(tmp_path, -1)
    _v1_group(tmp_path / "kubepods" / "pod1", 50000)
    _v1_group(tmp_path / "kubepods" / "pod1" / "ctr", 20000, stat=V1_STAT.replace("30", "7"))
    _v1_group(tmp_path / "kubepods", -1)
    ctr = CpuController(1, mount, "/kubepods/pod1/ctr")
    limit = limit_in_force(ctr)
    assert limit is not None and limit.quota_us == 20000 and limit.cpus == 0.2
    assert limit.group == "/kubepods/pod1/ctr" and limit.path == str(tmp_path / "kubepods/pod1/ctr")
    # an unlimited container in a limited pod: the pod's limit is the one in force
    (tmp_path / "kubepods/pod1/ctr/cpu.cfs_quota_us").write_text("-1\n")
    pod = limit_in_force(ctr)
    assert pod is not None and pod.cpus == 0.5 and pod.group == "/kubepods/pod1"
    # nothing limited: the own group, quota None
    (tmp_path / "kubepods/pod1/cpu.cfs_quota_us").write_text("-1\n")
    own = limit_in_force(ctr)
    assert own is not None and own.quota_us is None and own.group == "/kubepods/pod1/ctr"


def test_quota_levels_are_every_group_with_a_quota_up_to_the_top(tmp_path: Path) -> None:
    _v1_group(tmp_path, -1)
    _v1_group(tmp_path / "kubepods", -1)
    _v1_group(tmp_path / "kubepods" / "pod1", 50000)
    _v1_group(tmp_path / "kubepods" / "pod1" / "ctr", 20000)
    (tmp_path / "outside").mkdir()
    _v1_group(tmp_path / "outside" / "top", 10000)
    found = quota_levels(tmp_path / "kubepods/pod1/ctr", tmp_path, 1, "/kubepods/pod1/ctr")
    assert [(c.group, c.cpus) for c in found] == [("/kubepods/pod1/ctr", 0.2),
                                                  ("/kubepods/pod1", 0.5)]
    # v2: a container without the cpu controller below a pod with cpu.max; the root has none
    v2 = tmp_path / "v2"
    pod = v2 / "kubepods.slice" / "pod.slice"
    (pod / "ctr.scope").mkdir(parents=True)
    (pod / "cpu.max").write_text("20000 100000\n")
    (v2 / "kubepods.slice" / "cpu.max").write_text("max 100000\n")
    found = quota_levels(pod / "ctr.scope", v2, 2, "/kubepods.slice/pod.slice/ctr.scope")
    assert [(c.group, c.quota_us, c.burst_us) for c in found] == \
        [("/kubepods.slice/pod.slice", 20000, None)]


def test_read_v2_files(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("30000 100000\n")
    (tmp_path / "cpu.max.burst").write_text("10000\n")
    (tmp_path / "cpu.stat").write_text(V2_STAT)
    limit = read_cpu_limit(tmp_path, 2, "/g")
    assert (limit.quota_us, limit.period_us, limit.burst_us) == (30000, 100000, 10000)
    assert limit.cpus == 0.3
    assert read_cpu_stat(tmp_path, 2) == CpuStat(31, 30, 2_071_000_000, 2, 5_000_000)
    probe = CpuStatReader(tmp_path, 2)
    before = probe.sample()
    (tmp_path / "cpu.stat").write_text(V2_STAT.replace("nr_throttled 30", "nr_throttled 32")
                                       .replace("throttled_usec 2071000", "throttled_usec 2211000"))
    after = probe.sample()
    assert before is not None and after is not None
    assert after - before == CpuStat(0, 2, 140_000_000)
    assert CpuStatReader(tmp_path / "missing", 2).sample() is None


def test_v2_child_goes_next_to_our_group_with_cpu_enabled_down_to_its_parent(
        tmp_path: Path) -> None:
    # v2 forbids processes in a group that hands controllers down (except the root), and we
    # are in our own group: the child goes next to it, with +cpu written from the nearest
    # group that has the controller down to the parent (files here; the kernel in the guest).
    mount = Mount("/", str(tmp_path), "cgroup2", ("rw",))
    own = tmp_path / "user.slice" / "session.scope"
    own.mkdir(parents=True)
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    (tmp_path / "user.slice" / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "user.slice" / "cgroup.subtree_control").write_text("memory\n")
    controller = CpuController(2, mount, "/user.slice/session.scope")
    group = create_group(Limit(0.3), controller, name="throttle-lab-t")
    assert group == tmp_path / "user.slice" / "throttle-lab-t"
    assert (group / "cpu.max").read_text() == "30000 100000"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (tmp_path / "user.slice" / "cgroup.subtree_control").read_text() == "+cpu"
    # already handed down at the parent: nothing written anywhere
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    (tmp_path / "user.slice" / "cgroup.subtree_control").write_text("cpu memory\n")
    create_group(Limit(0.3), controller, name="throttle-lab-u")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "memory\n"
    # we are in the root: the child goes below it
    root = CpuController(2, mount, "/")
    assert create_group(Limit(0.3), root, name="throttle-lab-v") == tmp_path / "throttle-lab-v"
    # no group has the cpu controller at all
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "user.slice" / "cgroup.subtree_control").write_text("memory\n")
    with pytest.raises(CgroupError, match="the cpu controller is not available"):
        create_group(Limit(0.3), controller, name="throttle-lab-w")
    assert not (tmp_path / "user.slice" / "throttle-lab-w").exists()


def test_locate_without_a_cpu_controller(tmp_path: Path) -> None:
    (tmp_path / "cgroup").write_text("4:memory:/\n")
    (tmp_path / "mountinfo").write_text(HOST_V1_MOUNTINFO.replace(" rw,cpu\n", " rw,memory\n"))
    with pytest.raises(CgroupError, match="no cgroup cpu controller"):
        locate_cpu_controller(tmp_path)
    with pytest.raises(CgroupError, match="cannot read"):
        locate_cpu_controller(tmp_path / "missing")


def test_unique_group_name() -> None:
    a, b = unique_group_name(), unique_group_name(1234)
    assert a.startswith(f"throttle-lab-{os.getpid()}-") and b.startswith("throttle-lab-1234-")
    assert unique_group_name() != a


# ---- the real kernel (root, cgroups) -------------------------------------------------------

@pytest.mark.root
@HIERARCHIES
def test_real_group_limits_counts_and_is_removed(cgroup_version: int) -> None:
    require_kernel_quota(cgroup_version)
    group = create_group(Limit(0.1))
    busy = None
    try:
        assert "throttle-lab" in group.name and str(os.getpid()) in group.name
        limit = read_cpu_limit(group, locate_cpu_controller().version)
        assert (limit.quota_us, limit.period_us, limit.cpus) == (10000, 100000, 0.1)
        version = locate_cpu_controller().version
        before = read_cpu_stat(group, version)
        busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\n"
                                 "while time.time() - t < 30: pass"])
        move_pid(group, busy.pid)
        assert group.name in Path(f"/proc/{busy.pid}/cgroup").read_text()
        favour_group(group)   # its quota, not the machine's load, decides how much it runs
        assert before is not None
        deadline = time.monotonic() + 10   # a busy machine may give it less for a while
        while True:
            time.sleep(0.2)
            after = read_cpu_stat(group, version)
            assert after is not None
            delta = after - before
            if (delta.nr_periods >= 3 and delta.nr_throttled >= 2
                    and delta.throttled_ns > 50_000_000
                    or time.monotonic() > deadline):
                break
        assert delta.nr_periods >= 3 and delta.nr_throttled >= 2, delta
        assert delta.throttled_ns > 50_000_000, delta   # ~90 ms of each 100 ms period
        assert empty_group(group) == [busy.pid]
        assert busy.wait(timeout=10) == -signal.SIGTERM
    finally:
        if busy is not None and busy.poll() is None:
            busy.kill()
            busy.wait()
        removed = remove_group(group)
    assert removed and not group.exists()


@pytest.mark.root
@HIERARCHIES
def test_a_group_being_emptied_has_its_quota_lifted(cgroup_version: int) -> None:
    """What dies in a group as a command ends is not throttled while it exits (cpu-quota and
    burn-service lift the quota after reading cpu.stat, before emptying the group)."""
    require_kernel_quota(cgroup_version)
    group = create_group(Limit(0.1))
    try:
        version = locate_cpu_controller().version
        assert read_cpu_limit(group, version).quota_us == 10000
        lift_quota(group, version)
        assert read_cpu_limit(group, version).quota_us is None
    finally:
        assert remove_group(group)
    lift_quota(group, version)   # a group already gone: nothing to lift, no error


@pytest.mark.root
def test_real_limit_in_force_for_this_process() -> None:
    require_kernel_quota()
    limit = limit_in_force()
    assert limit is not None and limit.period_us is not None
    assert Path(limit.path, "cpu.stat").exists()
    assert CpuStatReader.locate() is not None


def test_cpu_stat_in_metrics_with_cadvisor_names(tmp_path: Path) -> None:
    from service.metrics import KernelCpuStatCollector, ServiceMetrics

    (tmp_path / "cpu.stat").write_text(V2_STAT)
    (tmp_path / "cpu.max").write_text("30000 100000\n")
    metrics = ServiceMetrics()
    metrics.register(KernelCpuStatCollector(CpuStatReader(tmp_path, 2)))
    text = metrics.render().decode()
    assert "container_cpu_cfs_periods_total 31.0" in text
    assert "container_cpu_cfs_throttled_periods_total 30.0" in text
    assert "container_cpu_cfs_throttled_seconds_total 2.071" in text
    assert "container_spec_cpu_quota 30000.0" in text and "container_spec_cpu_period 100000.0" in text
    (tmp_path / "cpu.max").write_text("max 100000\n")   # unlimited: counters, no quota
    text = metrics.render().decode()
    assert "container_cpu_cfs_periods_total" in text and "container_spec_cpu_quota" not in text
    nothing = ServiceMetrics()
    nothing.register(KernelCpuStatCollector(None))
    assert "container_cpu_cfs" not in nothing.render().decode()


# ---- a real cgroup v2 tree (the guest that tests/test_guest_cgroup2.py boots) --------------

@pytest.mark.cgroup2
def test_real_v2_root_gets_cpu_enabled_for_our_group() -> None:
    # a fresh v2 root hands no controller down; we are in the root (exempt from the no
    # internal processes rule), so +cpu goes into the root's cgroup.subtree_control
    require_kernel_quota(2)
    controller = locate_cpu_controller()
    control = Path(controller.mount.mount_point) / "cgroup.subtree_control"
    require(controller.directory == Path(controller.mount.mount_point),
            f"this test needs to run in the root group, not {controller.group}")
    control.write_text("-cpu")                  # as after boot (no group of ours is left)
    assert "cpu" not in control.read_text().split()
    group = create_group(Limit(0.2), controller)
    try:
        assert group.parent == Path(controller.mount.mount_point)
        assert "cpu" in control.read_text().split()
        assert (group / "cpu.max").read_text().split() == ["20000", "100000"]
    finally:
        assert remove_group(group)


@pytest.mark.cgroup2
def test_real_v2_refusal_names_the_file_and_the_rule() -> None:
    # our group's parent holds a process of its own: cpu (a threaded controller) may still be
    # enabled there while it has no populated child, but ours is one, so the kernel says EBUSY
    require_kernel_quota(2)
    controller = locate_cpu_controller()
    top = Path(controller.mount.mount_point)
    busy = create_group(Limit(0.5))
    occupied = busy / "occupied"
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        occupied.mkdir()
        move_pid(busy, sleepers[0].pid)
        move_pid(occupied, sleepers[1].pid)
        inside = CpuController(2, controller.mount, f"{controller.mount.root.rstrip('/')}/"
                                                    f"{occupied.relative_to(top)}")
        with pytest.raises(CgroupError) as refused:
            create_group(Limit(0.2), inside, name="throttle-lab-refused")
        message = str(refused.value)
        assert f"cannot enable the cpu controller in {busy}/cgroup.subtree_control" in message
        assert "has processes of its own" in message and "\n" not in message
        assert not (busy / "throttle-lab-refused").exists()
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        assert remove_group(occupied) and remove_group(busy)
