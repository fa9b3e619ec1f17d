"""client.run.service_group: --cgroup TARGET on fixture trees (v1/v2, cgroupfs/systemd, every
QoS class, pid: through a fake /proc, docker: and k8s: through an injected runner), the
one-line errors, then the real kernel (root): a real group by path and by pid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from client.run.cgroup_lookup import CommandResult
from client.run.service_group import ServiceGroup, ServiceGroupError, resolve_cgroup
from service.cgroup import create_group, empty_group, move_pid, remove_group
from cpuquota.limit import NO_QUOTA, Limit
from tests.cgroup_fixtures import fake_proc, mount_line, v1_group, v2_group
from tests.support import ROOT, require, require_kernel_quota

UID = "8d1f5a3c-1b2e-4c6d-9e8f-0a1b2c3d4e5f"
CID = "4f2a9c" + "0" * 58
META_KEYS = {"spec", "path", "group", "version", "quota_us", "period_us", "burst_us", "cpus"}


class Runner:
    """A fake docker/kubectl: answers from a table keyed by the command's first word."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        return self.answers.get(argv[0], CommandResult(127, "", f"{argv[0]}: command not found"))


NO_COMMANDS = Runner({})


def v1_host(tmp_path: Path, cpuacct: str = "separate") -> tuple[Path, Path, Path]:
    """(proc, cpu hierarchy, cpuacct hierarchy) as on this machine: cpu and cpuacct apart
    (``cpuacct="together"``: mounted as one ``cpu,cpuacct`` hierarchy)."""
    cpu, acct = tmp_path / "cgroup" / "cpu", tmp_path / "cgroup" / "cpuacct"
    cpu.mkdir(parents=True)
    if cpuacct == "together":
        mounts = [mount_line(32, "/", cpu, "cgroup", "rw,cpu,cpuacct")]
    else:
        acct.mkdir(parents=True)
        mounts = [mount_line(32, "/", cpu, "cgroup", "rw,cpu"),
                  mount_line(33, "/", acct, "cgroup", "rw,cpuacct"),
                  mount_line(35, "/", tmp_path / "cgroup" / "memory", "cgroup", "rw,memory")]
    return fake_proc(tmp_path / "proc", mounts), cpu, acct


def v2_host(tmp_path: Path) -> tuple[Path, Path]:
    top = tmp_path / "cgroup2"
    v2_group(top, cpu_max=None)
    return fake_proc(tmp_path / "proc", [mount_line(29, "/", top, "cgroup2", "rw")]), top


# ---- a directory -----------------------------------------------------------------------------

def test_v1_directory_reads_quota_burst_and_falls_back_to_the_processes(tmp_path: Path) -> None:
    proc, cpu, _acct = v1_host(tmp_path)
    group = v1_group(cpu / "mine", quota_us=20000, burst_us=5000, procs=[7])
    target = resolve_cgroup(str(group), proc=proc, run=NO_COMMANDS)
    assert (target.version, target.group, target.directory) == (1, "/mine", group)
    assert target.limit == Limit(0.2, 100.0, 5.0, "cgroup")
    assert target.usage_source.kind == "proc" and target.usage_source.path == group
    meta = target.to_metadata()
    assert META_KEYS <= set(meta)
    assert (meta["quota_us"], meta["period_us"], meta["burst_us"], meta["cpus"]) == \
        (20000, 100000, 5000, 0.2)
    assert json.loads(json.dumps(meta)) == meta
    assert NO_COMMANDS.calls == []


def test_v1_cpuacct_usage_beside_or_in_a_twin_with_the_same_processes(tmp_path: Path) -> None:
    proc, cpu, acct = v1_host(tmp_path)
    docker = v1_group(cpu / "docker" / "abc", procs=[5, 6])
    twin = v1_group(acct / "docker" / "abc", procs=[5, 6], cpuacct_usage=123)
    target = resolve_cgroup(str(docker), proc=proc, run=NO_COMMANDS)
    assert target.usage_source.kind == "cpuacct"
    assert target.usage_source.path == twin / "cpuacct.usage"
    (twin / "cgroup.procs").write_text("5\n")   # a group of the same name, not the same group
    assert resolve_cgroup(str(docker), proc=proc).usage_source.kind == "proc"
    # the same processes in a cpuacct group of another path: found from their /proc/PID/cgroup
    mine = v1_group(cpu / "mine", procs=[8, 9])
    elsewhere = v1_group(acct / "elsewhere", procs=[8, 9], cpuacct_usage=77)
    fake_proc(proc, cgroups={pid: "5:cpuacct:/elsewhere\n4:cpu:/mine\n" for pid in (8, 9)})
    source = resolve_cgroup(str(mine), proc=proc, run=NO_COMMANDS).usage_source
    assert (source.kind, source.path) == ("cpuacct", elsewhere / "cpuacct.usage")
    (elsewhere / "cgroup.procs").write_text("8\n9\n10\n")   # more than ours: not ours alone
    assert resolve_cgroup(str(mine), proc=proc).usage_source.kind == "proc"
    together_proc, together, _ = v1_host(tmp_path / "co", cpuacct="together")
    group = v1_group(together / "docker" / "abc", cpuacct_usage=9)
    source = resolve_cgroup(str(group), proc=together_proc).usage_source
    assert (source.kind, source.path) == ("cpuacct", group / "cpuacct.usage")


def test_v1_unlimited_group_and_a_symlinked_path(tmp_path: Path) -> None:
    proc, cpu, _acct = v1_host(tmp_path)
    group = v1_group(cpu / "free", quota_us=-1, burst_us=None)
    link = tmp_path / "link-to-cpu"
    link.symlink_to(cpu)
    target = resolve_cgroup(str(link / "free"), proc=proc)
    assert target.limit is None and target.burst_us is None and target.directory == group
    meta = target.to_metadata()
    assert meta["quota_us"] is None and meta["cpus"] is None and meta["spec"].endswith("free")


def test_v2_directory_group_from_the_mount_root_and_usage_from_cpu_stat(tmp_path: Path) -> None:
    proc, top = v2_host(tmp_path)
    group = v2_group(top / "system.slice" / "docker-abc.scope", "50000 100000")
    target = resolve_cgroup(str(group), proc=proc)
    assert (target.version, target.group) == (2, "/system.slice/docker-abc.scope")
    assert target.limit == Limit(0.5, 100.0, 0.0, "cgroup")
    assert target.usage_source.kind == "cpu.stat"
    v2_group(top / "free", "max 100000")
    assert resolve_cgroup(str(top / "free"), proc=proc).limit is None


@pytest.mark.parametrize("make, expected", [
    (lambda tmp, top, cpu: tmp / "nowhere", "no such cgroup directory: "),
    (lambda tmp, top, cpu: _file(tmp / "f"), "is not a directory"),
    (lambda tmp, top, cpu: _dir(tmp / "plain"), "is not in a cgroup file system"),
    (lambda tmp, top, cpu: v2_group(top / "nocpu", cpu_max=None),
     "no cpu controller in .*nocpu: the parent's cgroup.subtree_control does not enable 'cpu'"),
    (lambda tmp, top, cpu: top, "the root of cgroup v2 has no quota"),
    (lambda tmp, top, cpu: _dir(tmp / "cgroup" / "memory" / "x"),
     "in the cgroup v1 'memory' hierarchy, not the cpu controller's"),
    (lambda tmp, top, cpu: v1_group(cpu / "g", stat="nr_bursts 0\n"),
     "no throttling counters in .*cpu.stat"),
])
def test_bad_directories_are_one_clear_line(tmp_path: Path, make: object, expected: str) -> None:
    proc, cpu, _acct = v1_host(tmp_path)
    top = tmp_path / "cgroup2"
    v2_group(top, cpu_max=None)
    with open(proc / "self" / "mountinfo", "a") as f:
        f.write(mount_line(29, "/", top, "cgroup2", "rw") + "\n")
    path = make(tmp_path, top, cpu)  # type: ignore[operator]
    with pytest.raises(ServiceGroupError, match=expected) as info:
        resolve_cgroup(str(path), proc=proc)
    assert "\n" not in str(info.value)


def _file(path: Path) -> Path:
    path.write_text("x")
    return path


def _dir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


@pytest.mark.root
def test_an_unreadable_group_says_root_may_be_needed(tmp_path: Path) -> None:
    """A real permission error: root without the capabilities that bypass file permissions
    (what a normal user is) resolves a group owned by another user, mode 0700."""
    require(os.geteuid() == 0, "dropping capabilities needs root")
    require(shutil.which("setpriv") is not None, "no setpriv (util-linux)")
    proc, cpu, _acct = v1_host(tmp_path)
    secret = v1_group(cpu / "secret")
    for path in (secret, *secret.iterdir()):
        os.chown(path, 65534, 65534)
    secret.chmod(0o700)
    code = ("import sys\nfrom pathlib import Path\n"
            "from client.run.service_group import resolve_cgroup, ServiceGroupError\n"
            "try:\n    resolve_cgroup(sys.argv[1], proc=Path(sys.argv[2]))\n"
            "except ServiceGroupError as e:\n    print(e)\n")
    drop = "-dac_override,-dac_read_search"
    out = subprocess.run(["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}",
                          sys.executable, "-c", code, str(secret), str(proc)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "permission denied" in out.stdout and "root" in out.stdout, out.stdout
    assert len(out.stdout.strip().splitlines()) == 1


# ---- pid: ------------------------------------------------------------------------------------

def test_pid_v1_maps_through_this_process_mounts(tmp_path: Path) -> None:
    proc, cpu, _acct = v1_host(tmp_path)
    group = v1_group(cpu / "docker" / "abc", procs=[4242])
    fake_proc(proc, None, {4242: "4:memory:/docker/abc\n2:cpuacct:/docker/abc\n"
                                 "1:cpu:/docker/abc\n0::/\n"})
    (proc / "self" / "mountinfo").write_text(
        mount_line(32, "/", cpu, "cgroup", "rw,cpu") + "\n")
    target = resolve_cgroup("pid:4242", proc=proc)
    assert (target.directory, target.group, target.version) == (group, "/docker/abc", 1)
    assert target.spec == "pid:4242"


def test_pid_v2(tmp_path: Path) -> None:
    proc, top = v2_host(tmp_path)
    group = v2_group(top / "user.slice" / "app.service")
    fake_proc(proc, [mount_line(29, "/", top, "cgroup2", "rw")],
              {77: "0::/user.slice/app.service\n"})
    target = resolve_cgroup("pid:77", proc=proc)
    assert (target.directory, target.version, target.usage_source.kind) == (group, 2, "cpu.stat")


def test_a_pid_in_a_group_without_a_limit_is_said_in_one_line(tmp_path: Path) -> None:
    proc, cpu, _acct = v1_host(tmp_path, cpuacct="together")
    v1_group(cpu, quota_us=-1, procs=[4242])                  # the root: no quota
    v1_group(cpu / "batch", quota_us=-1, procs=[5151])        # a group with none, nor above
    v1_group(cpu / "docker" / "abc", procs=[6161])            # 0.3 CPU
    fake_proc(proc, None, {4242: "1:cpu,cpuacct:/\n", 5151: "1:cpu,cpuacct:/batch\n",
                           6161: "1:cpu,cpuacct:/docker/abc\n"})
    root = resolve_cgroup("pid:4242", proc=proc)
    assert (root.group, root.limit, root.levels) == ("/", None, ())
    assert root.no_limit == ("pid:4242 is in the root cgroup /: no CPU quota: throttling "
                             "cannot happen here (none is claimed; its CPU figures are the "
                             "whole machine's)")
    unlimited = resolve_cgroup("pid:5151", proc=proc).no_limit
    assert unlimited is not None and "/batch" in unlimited and NO_QUOTA in unlimited
    assert "\n" not in unlimited
    assert resolve_cgroup("pid:6161", proc=proc).no_limit is None   # a quota: nothing to say


@pytest.mark.parametrize("spec, cgroup, expected", [
    ("pid:99", None, "no such process: 99"),
    ("pid:abc", None, "pid: needs a process id"),
    ("pid:0", None, "pid: needs a process id"),
    ("pid:5", "0::/../other.slice/x\n", "outside this process's cgroup namespace"),
    ("pid:5", "4:memory:/x\n", "process 5 has no cgroup cpu controller"),
])
def test_bad_pids(tmp_path: Path, spec: str, cgroup: str | None, expected: str) -> None:
    proc, top = v2_host(tmp_path)
    if cgroup is not None:
        fake_proc(proc, [mount_line(29, "/", top, "cgroup2", "rw")], {5: cgroup})
        if "memory" in cgroup:
            (proc / "self" / "mountinfo").write_text("")
    with pytest.raises(ServiceGroupError, match=expected):
        resolve_cgroup(spec, proc=proc)


# ---- docker: ---------------------------------------------------------------------------------

def test_docker_resolves_the_container_by_its_main_process(tmp_path: Path) -> None:
    proc, cpu, acct = v1_host(tmp_path)
    group = v1_group(cpu / "docker" / CID, quota_us=30000, procs=[3131])
    v1_group(acct / "docker" / CID, procs=[3131], cpuacct_usage=1)
    fake_proc(proc, None, {3131: f"2:cpuacct:/docker/{CID}\n1:cpu:/docker/{CID}\n"})
    runner = Runner({"docker": CommandResult(0, f"{CID} 3131 true\n", "")})
    target = resolve_cgroup("docker:web", proc=proc, run=runner)
    assert runner.calls[0][:2] == ["docker", "inspect"] and runner.calls[0][-1] == "web"
    assert (target.directory, target.spec, target.limit) == \
        (group, "docker:web", Limit(0.3, source="cgroup"))
    assert target.usage_source.kind == "cpuacct"


@pytest.mark.parametrize("answer, expected", [
    (CommandResult(1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                   "Is the docker daemon running?\n"), "Docker is not running"),
    (CommandResult(1, "", "Error: No such container: web\n"), "no such container: web"),
    (CommandResult(0, f"{CID} 0 false\n", ""), "container web is not running"),
    (CommandResult(0, f"{CID} 999999 true\n", ""), "process 999999 is not on this machine"),
    (None, "docker: command not found"),
])
def test_docker_errors_are_one_line(tmp_path: Path, answer: CommandResult | None,
                                    expected: str) -> None:
    proc, _cpu, _acct = v1_host(tmp_path)
    runner = Runner({} if answer is None else {"docker": answer})
    with pytest.raises(ServiceGroupError, match=expected) as info:
        resolve_cgroup("docker:web", proc=proc, run=runner)
    assert "\n" not in str(info.value)


@pytest.mark.docker
def test_docker_real_container(tmp_path: Path) -> None:
    """A real container with --cpus 0.3 (the integrator runs this with the Docker tests)."""
    from tests.dockerd import docker, docker_engine, project_image, run_container

    with docker_engine():
        image = project_image()
        with run_container(image.image, ["--cpus", "0.3"]) as container:
            target = resolve_cgroup(f"docker:{container.id[:12]}")
            assert container.id in target.group
            assert target.limit is not None and abs(target.limit.cpus - 0.3) < 1e-9
            pid = docker("inspect", "--format", "{{.State.Pid}}", container.id).stdout.strip()
            assert resolve_cgroup(f"pid:{pid}").directory == target.directory


# ---- k8s: ------------------------------------------------------------------------------------

def pod_path(driver: str, qos: str, uid: str, runtime: str = "cri-containerd") -> tuple[str, str]:
    """(pod group, container group) relative to the hierarchy's root, as the kubelet names them."""
    if driver == "cgroupfs":
        pod = "kubepods" + ("" if qos == "guaranteed" else f"/{qos}") + f"/pod{uid}"
        return pod, f"{pod}/{CID}"
    under = uid.replace("-", "_")
    if qos == "guaranteed":
        pod = f"kubepods.slice/kubepods-pod{under}.slice"
    else:
        pod = f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{under}.slice"
    return pod, f"{pod}/{runtime}-{CID}.scope"


def k8s_host(tmp_path: Path, version: int, driver: str, qos: str,
             runtime: str = "cri-containerd") -> tuple[Path, Path, Path]:
    """(proc, pod dir, container dir): a node with two pods, the pause container's group too."""
    if version == 1:
        proc, top, _acct = v1_host(tmp_path)
    else:
        proc, top = v2_host(tmp_path)

    def make(directory: Path) -> Path:
        if version == 1:
            return v1_group(directory, quota_us=50000)
        return v2_group(directory, "50000 100000")

    other_pod, _ = pod_path(driver, "burstable", "11111111-2222-3333-4444-555555555555")
    make(top / other_pod)
    pod, container = pod_path(driver, qos, UID, runtime)
    make(top / pod)
    make(top / container)
    make(top / pod / ("f" * 64 if driver == "cgroupfs" else f"{runtime}-{'f' * 64}.scope"))
    return proc, top / pod, top / container


def kubectl_json(container_id: str | None = f"containerd://{CID}") -> CommandResult:
    status = {"name": "app", **({"containerID": container_id} if container_id else {})}
    return CommandResult(0, json.dumps({"metadata": {"uid": UID}, "status": {
        "containerStatuses": [{"name": "sidecar", "containerID": "containerd://" + "e" * 64},
                              status]}}), "")


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_k8s_pod_and_container_every_driver_qos_and_version(tmp_path: Path, version: int,
                                                            driver: str, qos: str) -> None:
    proc, pod_dir, container_dir = k8s_host(tmp_path, version, driver, qos)
    runner = Runner({"kubectl": kubectl_json()})
    pod = resolve_cgroup("k8s:shop/web-7d9", proc=proc, run=runner)
    assert pod.directory == pod_dir and pod.version == version
    assert runner.calls[0] == ["kubectl", "get", "pod", "-n", "shop", "web-7d9", "-o", "json"]
    container = resolve_cgroup("k8s:shop/web-7d9/app", proc=proc, run=runner)
    assert container.directory == container_dir and container.limit == Limit(0.5, source="cgroup")
    assert container.group.endswith(container_dir.name) and "kubepods" in container.group


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_k8s_a_pod_of_one_container_is_watched_at_its_container(tmp_path: Path,
                                                                 driver: str) -> None:
    """The kubelet puts the limit on the pod's group and on its container's: a pod named
    alone, with one container, resolves to the container's group with both quota levels."""
    proc, pod_dir, container_dir = k8s_host(tmp_path, 1, driver, "burstable")
    one = CommandResult(0, json.dumps({"metadata": {"uid": UID}, "status": {
        "containerStatuses": [{"name": "app", "containerID": f"containerd://{CID}"}]}}), "")
    target = resolve_cgroup("k8s:shop/web", proc=proc, run=Runner({"kubectl": one}))
    assert target.directory == container_dir
    assert [level.directory for level in target.levels] == [container_dir, pod_dir]
    # not running yet (no container id): the pod's group
    waiting = CommandResult(0, json.dumps({"metadata": {"uid": UID}, "status": {
        "containerStatuses": [{"name": "app"}]}}), "")
    assert resolve_cgroup("k8s:shop/web", proc=proc,
                          run=Runner({"kubectl": waiting})).directory == pod_dir


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_k8s_a_pod_level_limit_is_named_on_a_tie(tmp_path: Path, version: int,
                                                 driver: str) -> None:
    """KEP-2837: the pod's spec.resources.limits.cpu, the container without one of its own.
    The kubelet writes the same quota on both groups; the spec says it is the pod's, so the
    pod's level is the one named (its cpu.stat the timeline's counters), the container's
    after it. A container limit of its own below the pod's is the container's."""
    proc, pod_dir, container_dir = k8s_host(tmp_path, version, driver, "burstable")

    def pod(own: str | None) -> CommandResult:
        return CommandResult(0, json.dumps({"metadata": {"uid": UID}, "spec": {
            "resources": {"limits": {"cpu": "500m"}},
            "containers": [{"name": "app", "resources": {} if own is None else
                            {"limits": {"cpu": own}}}]}, "status": {"containerStatuses": [
                                {"name": "app", "containerID": f"containerd://{CID}"}]}}), "")

    for spec in ("k8s:shop/web", "k8s:shop/web/app"):
        target = resolve_cgroup(spec, proc=proc, run=Runner({"kubectl": pod(None)}))
        assert target.directory == container_dir
        assert [level.directory for level in target.levels] == [pod_dir, container_dir]
        assert target.to_metadata()["quota_group"] == target.levels[0].group
        assert target.stat_path == pod_dir / "cpu.stat"
        assert target.limit == Limit(0.5, source="cgroup")
    tied = resolve_cgroup("k8s:shop/web", proc=proc, run=Runner({"kubectl": pod("0.5")}))
    assert tied.levels[0].directory == pod_dir
    (container_dir / ("cpu.cfs_quota_us" if version == 1 else "cpu.max")).write_text(
        "30000\n" if version == 1 else "30000 100000\n")
    own = resolve_cgroup("k8s:shop/web", proc=proc, run=Runner({"kubectl": pod("300m")}))
    assert [level.directory for level in own.levels] == [container_dir, pod_dir]


@pytest.mark.parametrize("runtime", ["docker", "crio", "cri-containerd"])
def test_k8s_systemd_runtimes_without_kubectl(tmp_path: Path, runtime: str) -> None:
    proc, pod_dir, container_dir = k8s_host(tmp_path, 2, "systemd", "burstable", runtime)
    # kubectl cannot reach a cluster: --pod-uid for the pod, the container by its id
    runner = Runner({"kubectl": CommandResult(1, "", "The connection to the server "
                                              "localhost:8080 was refused\n")})
    pod = resolve_cgroup("k8s:shop/web", pod_uid=UID, proc=proc, run=runner)
    assert pod.directory == pod_dir and runner.calls == []
    by_id = resolve_cgroup(f"k8s:shop/web/{CID[:12]}", pod_uid=UID, proc=proc, run=runner)
    assert by_id.directory == container_dir and runner.calls == []


def test_k8s_in_a_cgroup_namespace_names_the_groups_from_the_mount(tmp_path: Path) -> None:
    """In a pod of a v2 node (a cgroup namespace of its own) the node's hierarchy, mounted
    in, has the root ``/../../../..``: the groups are named as the node names them."""
    top = tmp_path / "cgroup2"
    v2_group(top, cpu_max=None)
    proc = fake_proc(tmp_path / "proc", [mount_line(41, "/../../../..", top, "cgroup2", "rw")])
    pod, container = pod_path("systemd", "burstable", UID)
    v2_group(top / pod, "50000 100000")
    v2_group(top / container, "max 100000")
    for spec in (f"k8s:shop/web/{CID[:12]}", str(top / container)):
        target = resolve_cgroup(spec, pod_uid=UID, proc=proc, run=NO_COMMANDS)
        assert target.group == "/" + container, spec
        assert [level.group for level in target.levels] == ["/" + pod], spec
        assert target.to_metadata()["quota_group"] == "/" + pod


def test_k8s_crio_passes_over_the_conmon_sibling(tmp_path: Path) -> None:
    # crio-conmon-<id>.scope sorts before crio-<id>.scope when the id starts past 'c'
    cid = "d" + CID[1:]
    proc, top = v2_host(tmp_path)
    pod, _container = pod_path("systemd", "burstable", UID, "crio")
    v2_group(top / pod, "50000 100000")
    v2_group(top / pod / f"crio-conmon-{cid}.scope", cpu_max=None)
    container = v2_group(top / pod / f"crio-{cid}.scope", cpu_max=None)
    target = resolve_cgroup(f"k8s:shop/web/{cid[:12]}", pod_uid=UID, proc=proc, run=NO_COMMANDS)
    assert target.directory == container


# the runtime paths of real v2 nodes (systemd driver) and the cgroupfs driver, by pid:
RUNTIME_PATHS = {
    "docker": f"system.slice/docker-{CID}.scope",
    "containerd-burstable": "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                            f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
    "crio-besteffort": "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                       f"{UID.replace('-', '_')}.slice/crio-{CID}.scope",
    "containerd-guaranteed": f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
                             f"cri-containerd-{CID}.scope",
    "cgroupfs-burstable": f"kubepods/burstable/pod{UID}/{CID}",
}


@pytest.mark.parametrize("name", sorted(RUNTIME_PATHS))
def test_pid_in_a_runtime_group_with_the_quota_on_its_parent(tmp_path: Path, name: str) -> None:
    """The container's group has no cpu controller; its parent (the pod, or system.slice)
    holds the quota: attachable, the throttling read from the parent."""
    proc, top = v2_host(tmp_path)
    path = RUNTIME_PATHS[name]
    parent, _, leaf = path.rpartition("/")
    for k in range(1, parent.count("/") + 1):
        v2_group(top / parent.rsplit("/", k)[0], "max 100000")
    v2_group(top / parent, "20000 100000", burst_us=5000)
    own = v2_group(top / path, cpu_max=None)
    (own / "cpu.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=10\n"
                                      "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")
    fake_proc(proc, None, {321: f"0::/{path}\n"})
    target = resolve_cgroup("pid:321", proc=proc)
    assert (target.directory, target.group) == (own, "/" + path)
    assert target.limit == Limit(0.2, 100.0, 5.0, "cgroup") and target.burst_us == 5000
    assert [level.group for level in target.levels] == ["/" + parent]
    assert target.stat_path == top / parent / "cpu.stat" and target.pressure
    assert target.usage_source.kind == "cpu.stat" and target.usage_source.path == own / "cpu.stat"
    meta = target.to_metadata()
    assert (meta["quota_group"], meta["cpus"], meta["burst_us"], meta["pressure"]) == \
        ("/" + parent, 0.2, 5000, True)
    assert meta["levels"] == [{"path": str(top / parent), "group": "/" + parent,
                               "quota_us": 20000, "period_us": 100000, "burst_us": 5000,
                               "cpus": 0.2}]
    assert json.loads(json.dumps(meta)) == meta


def test_every_quota_level_the_tightest_first(tmp_path: Path) -> None:
    proc, cpu, _acct = v1_host(tmp_path)
    v1_group(cpu / "kubepods", quota_us=-1)
    pod = v1_group(cpu / "kubepods" / "pod1", quota_us=20000)
    ctr = v1_group(cpu / "kubepods" / "pod1" / "ctr", quota_us=50000)
    target = resolve_cgroup(str(ctr), proc=proc)
    assert [(lv.directory, lv.limit.cpus) for lv in target.levels] == [(pod, 0.2), (ctr, 0.5)]
    assert target.limit == Limit(0.2, source="cgroup") and not target.pressure
    (ctr / "cpu.cfs_quota_us").write_text("10000\n")
    target = resolve_cgroup(str(ctr), proc=proc)
    assert [lv.directory for lv in target.levels] == [ctr, pod]
    assert target.to_metadata()["quota_group"] == "/kubepods/pod1/ctr"


def test_a_kubectl_failure_names_the_api_server_its_words_do_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a response cut short: kubectl's line names no server; the kubeconfig's current one is said
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "current-context": "b", "contexts": [{"name": "a", "context": {"cluster": "one"}},
                                             {"name": "b", "context": {"cluster": "two"}}],
        "clusters": [{"name": "one", "cluster": {"server": "https://10.0.0.1:6443"}},
                     {"name": "two", "cluster": {"server": "https://127.0.0.1:34713"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(config))
    proc, _pod, _container = k8s_host(tmp_path, 1, "cgroupfs", "burstable")
    cut = CommandResult(1, "", "error: unexpected error when reading response body. Please "
                        "retry. Original error: unexpected EOF\n")
    with pytest.raises(ServiceGroupError) as info:
        resolve_cgroup("k8s:shop/web", proc=proc, run=Runner({"kubectl": cut}))
    assert ("unexpected EOF; the API server at https://127.0.0.1:34713)" in str(info.value)
            and "10.0.0.1" not in str(info.value)), info.value
    # kubectl's own words naming it: not said twice
    refused = CommandResult(1, "", 'Unable to connect to the server: Get "https://127.0.0.1:'
                            '34713/api/v1/namespaces/shop/pods/web": dial tcp: connection '
                            'refused\n')
    with pytest.raises(ServiceGroupError) as info:
        resolve_cgroup("k8s:shop/web", proc=proc, run=Runner({"kubectl": refused}))
    assert "the API server at" not in str(info.value) and "34713" in str(info.value)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))   # no kubeconfig: nothing added
    with pytest.raises(ServiceGroupError) as info:
        resolve_cgroup("k8s:shop/web", proc=proc, run=Runner({"kubectl": cut}))
    assert "the API server at" not in str(info.value)


@pytest.mark.parametrize("spec, pod_uid, answer, expected", [
    ("k8s:shop/web", None, CommandResult(1, "", "connection refused\n"),
     "kubectl cannot tell pod shop/web's uid .*connection refused.*--pod-uid"),
    ("k8s:shop/web/app", UID, CommandResult(1, "", "connection refused\n"),
     "container app's id .*give the container id"),
    ("k8s:shop/web/db", None, kubectl_json(), "pod shop/web has no container db "
     r"\(containers: sidecar, app\)"),
    ("k8s:shop/web/app", None, kubectl_json(None), "container app of pod shop/web has no "
     "container id yet"),
    ("k8s:shop/web", None, CommandResult(1, "", 'Error from server (NotFound): pods "web" '
                                         'not found\n'), "no pod web in namespace shop "),
    ("k8s:shop/web", None, CommandResult(1, "", 'Error from server (Forbidden): pods "web" is '
                                         'forbidden: User "x" cannot get resource "pods"\n'),
     "kubectl may not read pod shop/web: 'get pods' in namespace shop is needed .*--pod-uid"),
    ("k8s:shop/web", None, CommandResult(1, "", 'E1125 10:57:56.921066   32327 memcache.go:265]'
                                         ' "Unhandled Error"\nThe connection to the server '
                                         'localhost:8080 was refused\n'),
     r"kubectl cannot tell pod shop/web's uid \(The connection to the server localhost:8080"),
    ("k8s:shop/web", None, CommandResult(127, "", "kubectl: command not found"),
     "kubectl: command not found .*--pod-uid"),
    ("k8s:shop/web", "not-a-uid", None, "pod uid must look like"),
    ("k8s:shop", None, None, "expected k8s:NAMESPACE/POD"),
    ("k8s:shop/web/app/x", None, None, "expected k8s:NAMESPACE/POD"),
    ("k8s:shop/web", "99999999-2222-3333-4444-555555555555", None,
     "no cgroup for pod shop/web .* is this the pod's node"),
    (f"k8s:shop/web/{'a' * 64}", UID, None, "container aaaaaaaaaaaa has no cgroup in"),
])
def test_k8s_errors_are_one_line(tmp_path: Path, spec: str, pod_uid: str | None,
                                 answer: CommandResult | None, expected: str) -> None:
    proc, _pod, _container = k8s_host(tmp_path, 1, "cgroupfs", "burstable")
    runner = Runner({} if answer is None else {"kubectl": answer})
    with pytest.raises(ServiceGroupError, match=expected) as info:
        resolve_cgroup(spec, pod_uid=pod_uid, proc=proc, run=runner)
    assert "\n" not in str(info.value)


def test_empty_and_unknown_targets(tmp_path: Path) -> None:
    proc, _top = v2_host(tmp_path)
    with pytest.raises(ServiceGroupError, match="TARGET is a cgroup directory, pid:PID"):
        resolve_cgroup("  ", proc=proc)
    with pytest.raises(ServiceGroupError, match="docker: needs a container name"):
        resolve_cgroup("docker:", proc=proc)
    with pytest.raises(ServiceGroupError, match="'podman:web': TARGET is"):
        resolve_cgroup("podman:web", proc=proc)


# ---- the real kernel -------------------------------------------------------------------------

@pytest.fixture
def sleeper_in_group() -> Iterator[tuple[Path, int]]:
    require_kernel_quota()
    group = create_group(Limit(0.3, burst_ms=10))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        move_pid(group, sleeper.pid)
        yield group, sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
        empty_group(group)
        remove_group(group)


@pytest.mark.root
def test_real_group_by_path_and_by_pid(sleeper_in_group: tuple[Path, int]) -> None:
    group, pid = sleeper_in_group
    by_path = resolve_cgroup(str(group))
    by_pid = resolve_cgroup(f"pid:{pid}")
    assert isinstance(by_path, ServiceGroup)
    assert by_path.directory == by_pid.directory == group
    assert by_path.group == by_pid.group and by_path.group.endswith(group.name)
    assert by_path.limit == Limit(0.3, 100.0, 10.0, "cgroup") and by_path.burst_us == 10000
    # a group made under the cpu hierarchy only (this machine: cpu and cpuacct apart)
    expected = "cpu.stat" if by_path.version == 2 else "proc"
    if (group / "cpuacct.usage").exists():
        expected = "cpuacct"
    assert by_path.usage_source.kind == expected
