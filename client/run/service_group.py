"""Which cgroup to watch during a run: ``--cgroup TARGET`` resolved to the cpu controller's
group of the service being timed (any service: Java, Go, nginx, Node, Python...).

TARGET is one of

- a cgroup directory: ``/sys/fs/cgroup/cpu/docker/<id>`` (v1), ``/sys/fs/cgroup/<group>`` (v2);
- ``pid:PID``: the cpu group of that process (``/proc/PID/cgroup``, mapped through *this*
  process's ``/proc/self/mountinfo``: the files are read from here, not from the target's
  mount namespace);
- ``docker:NAME_OR_ID``: a local container, by its main process (``docker inspect``);
- ``k8s:NAMESPACE/POD[/CONTAINER]``: on a Kubernetes node, the pod's (or one container's)
  group under ``kubepods``, for the cgroupfs and systemd drivers (``client.run.cgroup_lookup``).

The quota that throttles the group may be its own or an ancestor's (a Kubernetes pod's, a
systemd slice's): the kernel counts a throttle only in the ``cpu.stat`` of the group whose
quota it was, so every group from the target up to the hierarchy's root that holds a quota is
a :class:`QuotaLevel` to sample. The tightest is the quota in force (``ServiceGroup.limit``).
On cgroup v2 the target may lack the cpu controller (a container's group below a pod's
that has the quota): its usage still comes from its own ``cpu.stat``, its throttling from
above.

A target that cannot be watched raises :class:`ServiceGroupError` with one line that says why
(no such path/process/container, no cpu controller, not readable: root may be needed).

How the group's CPU *usage* is read (:class:`UsageSource`): v2 ``usage_usec`` in ``cpu.stat``;
v1 ``cpuacct.usage`` when the cpu and cpuacct controllers share the directory, or a cpuacct
group holds exactly the same processes (Docker makes ``/docker/<id>`` in both; a group of
another path is found from the processes' own ``/proc/PID/cgroup``); otherwise (a group made
under the cpu hierarchy only) from what the kernel keeps per process, ended threads and
reaped children included (``client.run.process_usage``).
"""

from __future__ import annotations

import re
import errno
import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.run.cgroup_lookup import (CommandRunner, KubectlMissing, LookupFailed,
                                      docker_container_pid,
                                      find_pod_directory, kubernetes_pod, parse_k8s_spec,
                                      run_command)
from cpuquota.cgroupfs import (CpuLimit, Mount, cpu_mounts, find_cpu_controller, is_cpu_mount,
                               map_group_path, parse_cpu_stat, parse_mountinfo, parse_proc_cgroup,
                               quota_levels)
from cpuquota.limit import NO_QUOTA, Limit, LimitError

__all__ = ["USAGE_KINDS", "USAGE_RESOLUTION_NS", "ServiceGroup", "ServiceGroupError", "NotHere", "QuotaLevel", "UsageSource",
           "combine_pods", "resolve_cgroup"]

# "schedstat" (the live threads' schedstat summed) is only read back from old runs: it lost
# every thread that ended between two samples
USAGE_KINDS = ("cpu.stat", "cpuacct", "proc", "schedstat")
# how fine each kind counts (ns); "proc": its reaped children come in clock ticks
USAGE_RESOLUTION_NS = {"cpu.stat": 1000, "cpuacct": 1, "proc": 1, "schedstat": 1}


class ServiceGroupError(ValueError):
    """A ``--cgroup`` target that cannot be watched; the message says why, in one line."""


class NotHere(ServiceGroupError):
    """A pod whose group is not on this machine (or this machine cannot look: no kubectl, no
    cgroup file system): its node's agent may be asked instead (``client.run.pod_reach``)."""


@dataclass(frozen=True)
class UsageSource:
    """Where the group's CPU usage comes from. ``kind``: ``cpu.stat`` (v2 ``usage_usec``,
    ``path`` = the cpu.stat file), ``cpuacct`` (v1 ``cpuacct.usage``, ``path`` = that file) or
    ``proc`` (``path`` = the group directory whose processes, and its descendants', are
    read from ``proc``: ``client.run.process_usage``)."""

    kind: str
    path: Path
    proc: Path = Path("/proc")

    def __post_init__(self) -> None:
        if self.kind not in USAGE_KINDS:
            raise ValueError(f"usage source must be one of {', '.join(USAGE_KINDS)} "
                             f"(got {self.kind!r})")

    def describe(self) -> str:
        """Where the figure comes from, in a few words, for the report and the metadata."""
        if self.kind == "cpu.stat":
            return f"usage_usec of {self.path}"
        if self.kind == "cpuacct":
            return f"{self.path}"
        return (f"the CPU clocks of the processes in {self.path} (ended threads included) "
                "and their reaped children (/proc/PID/stat cutime+cstime)")

    def to_metadata(self) -> dict[str, Any]:
        """``cgroup.usage`` of the run's metadata (``unknown``: why the run's usage cannot
        be known, filled in when the run ends; None: it is the kernel's count)."""
        return {"source": self.kind, "counter": self.describe(),
                "resolution_ns": USAGE_RESOLUTION_NS[self.kind], "unknown": None}


@dataclass(frozen=True)
class PodsUsage(UsageSource):
    """The usage of several pods' groups summed (``combine_pods``): each pod's own source."""

    sources: tuple[UsageSource, ...] = ()

    def describe(self) -> str:
        return (f"the sum over {len(self.sources)} pods of: "
                + "; ".join(source.describe() for source in self.sources))


@dataclass(frozen=True)
class QuotaLevel:
    """A group at or above the target that holds a quota: its throttling counters are in
    ``directory``/cpu.stat."""

    directory: Path
    group: str
    limit: Limit
    burst_us: int | None = None

    @property
    def stat_path(self) -> Path:
        return self.directory / "cpu.stat"

    def to_metadata(self) -> dict[str, Any]:
        return {"path": str(self.directory), "group": self.group,
                "quota_us": self.limit.quota_us, "period_us": self.limit.period_us,
                "burst_us": self.burst_us, "cpus": round(self.limit.cpus, 6)}


@dataclass(frozen=True)
class ServiceGroup:
    """The cpu controller's group of the service under test."""

    spec: str                 # what the user gave: a path, pid:N, docker:NAME, k8s:NS/POD[/C]
    directory: Path           # the group's directory (its usage, cpu.pressure)
    version: int              # 1 or 2
    group: str                # the group's path in its hierarchy, e.g. /docker/<id>
    limit: Limit | None       # the quota in force: the tightest of ``levels`` (None: no quota)
    usage_source: UsageSource
    burst_us: int | None = None   # that quota's burst as read (None: the kernel has no burst)
    # the groups with a quota, the one in force first, then the others nearest first
    levels: tuple[QuotaLevel, ...] = ()
    pressure: bool = False    # the group has cpu.pressure (PSI, cgroup v2)
    # the sum over several pods (``combine_pods``): each pod's own target; () for one group
    pods: tuple[ServiceGroup, ...] = ()

    @property
    def no_limit(self) -> str | None:
        """One line when no quota on the group or above can throttle it (None: one can):
        what the user is to know before reading its figures."""
        if self.levels:
            return None
        if self.group in ("", "/"):
            return (f"{self.spec} is in the root cgroup /: {NO_QUOTA} (none is claimed; its "
                    "CPU figures are the whole machine's)")
        why = (" (exclusive CPUs under the static CPU manager get none, whatever limits.cpu "
               "says)" if self.spec.startswith("k8s:") else "")
        return (f"{self.spec} is in cgroup {self.group}: {NO_QUOTA}, none on it or above "
                f"(none is claimed){why}")

    @property
    def stat_path(self) -> Path:
        """The cpu.stat whose counters are the timeline's: the quota in force's group's."""
        return self.levels[0].stat_path if self.levels else self.directory / "cpu.stat"

    def to_metadata(self) -> dict[str, Any]:
        """What the run's metadata says about the watched group (JSON-ready): the quota
        fields are the quota in force's, ``quota_group`` the group that holds it."""
        limit = self.limit
        return {"spec": self.spec, "path": str(self.directory), "group": self.group,
                "version": self.version,
                "quota_us": limit.quota_us if limit else None,
                "period_us": limit.period_us if limit else None,
                "burst_us": self.burst_us,
                "cpus": round(limit.cpus, 6) if limit else None,
                "usage_source": self.usage_source.kind,
                "usage": self.usage_source.to_metadata(),
                "quota_group": self.levels[0].group if self.levels else None,
                "levels": [level.to_metadata() for level in self.levels],
                "pressure": self.pressure,
                **({"pods": [pod.to_metadata() for pod in self.pods]} if self.pods else {})}


def combine_pods(spec: str, pods: list[ServiceGroup]) -> ServiceGroup:
    """Several pods' groups (a Deployment's running pods, resized alike) as one target whose
    samples are the sums over the pods (``client.run.cgroup_sampler.PodsReader``): usage,
    ``nr_periods``, ``nr_throttled`` and throttled time of each quota level, level by level,
    and each level's quota summed (N pods at 0.3 CPU: 0.6 CPU over N periods of 100 ms each
    period), so usage and quota stay comparable. No PSI (a stall summed over groups is no
    group's pressure). ``ServiceGroupError`` when the pods' groups are not alike."""
    if not pods:
        raise ServiceGroupError(f"{spec}: no pod to watch")
    first = pods[0]
    for pod in pods[1:]:
        if (pod.version, len(pod.levels), pod.usage_source.kind) != \
                (first.version, len(first.levels), first.usage_source.kind) or \
                [lv.limit.period_us for lv in pod.levels] != \
                [lv.limit.period_us for lv in first.levels]:
            raise ServiceGroupError(f"{spec}: the pods' groups differ ({first.spec}: "
                                    f"{len(first.levels)} quota level(s); {pod.spec}: "
                                    f"{len(pod.levels)}): they cannot be summed")
    count = len(pods)
    levels = tuple(QuotaLevel(level.directory, f"{level.group} (+{count - 1} pod(s): the sum)",
                              Limit(sum(p.levels[k].limit.quota_us for p in pods)
                                    / level.limit.period_us, level.limit.period_ms, 0.0,
                                    level.limit.source),
                              level.burst_us)
                   for k, level in enumerate(first.levels))
    usage = PodsUsage(first.usage_source.kind, first.usage_source.path,
                      first.usage_source.proc, tuple(p.usage_source for p in pods))
    return ServiceGroup(spec, first.directory, first.version,
                        f"{first.group} (+{count - 1} pod(s): the sum)",
                        levels[0].limit if levels else None, usage, first.burst_us, levels,
                        False, tuple(pods))


def resolve_cgroup(spec: str, *, pod_uid: str | None = None, proc: Path = Path("/proc"),
                   run: CommandRunner = run_command) -> ServiceGroup:
    """The group a ``--cgroup`` TARGET names (``ServiceGroupError`` in one line if none).

    ``proc`` is the proc file system to read (``proc/self/mountinfo`` says where the cgroup
    hierarchies are mounted, so fixture trees work); ``run`` runs ``docker``/``kubectl``."""
    spec = spec.strip()
    try:
        mountinfo = _read_mountinfo(proc)
    except ServiceGroupError as exc:
        if spec.startswith(("k8s:", "kubernetes:")):
            raise NotHere(str(exc)) from None
        raise
    mounts = parse_mountinfo(mountinfo)
    try:
        if spec.startswith("pid:"):
            return _from_pid(spec, _parse_pid(spec[4:], spec), proc, mountinfo)
        if spec.startswith("docker:"):
            name = spec[len("docker:"):]
            if not name:
                raise ServiceGroupError("docker: needs a container name or id (docker:NAME)")
            pid = docker_container_pid(name, run)
            return _from_pid(spec, pid, proc, mountinfo, who=f"container {name}")
        if spec.startswith(("k8s:", "kubernetes:")):
            return _from_k8s(spec, pod_uid, proc, mounts, run)
        if not spec or (re.match(r"^[A-Za-z][\w.-]*:", spec) and not Path(spec).exists()):
            raise ServiceGroupError(f"--cgroup {spec!r}: TARGET is a cgroup directory, pid:PID, "
                                    "docker:NAME or k8s:NAMESPACE/POD[/CONTAINER]")
        return _from_directory(spec, Path(spec), proc, mounts)
    except KubectlMissing as exc:
        raise NotHere(str(exc)) from None
    except LookupFailed as exc:
        raise ServiceGroupError(str(exc)) from None


# ---- the three ways in ---------------------------------------------------------------------

def _parse_pid(text: str, spec: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise ServiceGroupError(f"{spec}: pid: needs a process id, a number > 0 (pid:1234)")
    return int(text)


def _from_pid(spec: str, pid: int, proc: Path, mountinfo: str,
              who: str | None = None) -> ServiceGroup:
    try:
        text = (proc / str(pid) / "cgroup").read_text(encoding="ascii")
    except FileNotFoundError:
        if who is None:
            raise ServiceGroupError(f"no such process: {pid}") from None
        raise ServiceGroupError(f"{who}'s process {pid} is not on this machine (a remote "
                                "Docker engine, or Docker Desktop's VM?)") from None
    except OSError as exc:
        raise _unreadable(exc, proc / str(pid) / "cgroup") from None
    who = who or f"process {pid}"
    controller = find_cpu_controller(text, mountinfo)
    if controller is None or controller.group.startswith("/.."):
        if any(line.split(":", 2)[-1].startswith("/..") for line in text.splitlines()):
            raise ServiceGroupError(f"{who}'s cgroup is outside this process's cgroup "
                                    "namespace: run http-timing on the host (or in the same "
                                    "container)")
        raise ServiceGroupError(f"{who} has no cgroup cpu controller mounted here "
                                f"({proc}/{pid}/cgroup)")
    directory = map_group_path(controller.mount, controller.group)
    if directory is None:  # find_cpu_controller only returns mappable groups
        raise ServiceGroupError(f"{who}'s cgroup {controller.group} is not mounted here")
    return _build(spec, Path(directory), controller.version, controller.group, proc,
                  parse_mountinfo(mountinfo))


def _from_directory(spec: str, directory: Path, proc: Path, mounts: list[Mount]) -> ServiceGroup:
    try:
        is_dir = stat.S_ISDIR(directory.stat().st_mode)
    except FileNotFoundError:
        raise ServiceGroupError(f"no such cgroup directory: {directory}") from None
    except OSError as exc:
        raise _unreadable(exc, directory) from None
    if not is_dir:
        raise ServiceGroupError(f"{directory} is not a directory (give the cgroup's directory, "
                                "e.g. /sys/fs/cgroup/cpu/docker/<id>)")
    real = os.path.realpath(directory)
    mount = _mount_of(real, mounts)
    if mount is None:
        raise ServiceGroupError(f"{directory} is not in a cgroup file system (cgroup mounts: "
                                f"{', '.join(m.mount_point for m in mounts) or 'none found'})")
    if not is_cpu_mount(mount):
        kind = ",".join(o for o in mount.super_options if o not in ("rw", "ro"))
        raise ServiceGroupError(f"{directory} is in the cgroup v1 '{kind}' hierarchy, not the "
                                "cpu controller's (e.g. /sys/fs/cgroup/cpu/...)")
    relative = os.path.relpath(real, mount.mount_point)
    root = mount.root.rstrip("/")
    group = (root + ("" if relative == "." else "/" + relative)) or "/"
    version = 1 if mount.fstype == "cgroup" else 2
    return _build(spec, Path(real), version, group, proc, mounts)


def _from_k8s(spec: str, pod_uid: str | None, proc: Path, mounts: list[Mount],
              run: CommandRunner) -> ServiceGroup:
    namespace, pod, container = parse_k8s_spec(spec)
    uid, container_id, pod_level = kubernetes_pod(namespace, pod, container, pod_uid, run)
    errors: list[str] = []
    for mount in cpu_mounts(mounts):
        try:
            directory = find_pod_directory(Path(mount.mount_point), uid, container_id)
        except LookupFailed as exc:
            errors.append(str(exc))
            continue
        if directory is not None:
            relative = os.path.relpath(directory, mount.mount_point)
            group = mount.root.rstrip("/") + "/" + relative
            version = 1 if mount.fstype == "cgroup" else 2
            # a tie of the pod's and the container's quota is the pod level's where the
            # pod's spec says the limit is pod-level
            pod_dir = (directory.parent if container_id else directory) if pod_level else None
            return _build(spec, directory, version, group, proc, mounts, tie_to=pod_dir)
    if errors:
        raise ServiceGroupError(errors[0])
    where = ", ".join(m.mount_point for m in cpu_mounts(mounts)) or "no cpu hierarchy mounted"
    raise NotHere(f"no cgroup for pod {namespace}/{pod} (uid {uid}) under kubepods "
                            f"in {where}: is this the pod's node? (kubectl get pod -o wide)")


# ---- the group's files ---------------------------------------------------------------------

def _build(spec: str, directory: Path, version: int, group: str, proc: Path,
           mounts: list[Mount], tie_to: Path | None = None) -> ServiceGroup:
    """Check the group's cpu files are readable; find the quotas at and above it and its
    usage source. The group is named from the mount's root: in a cgroup namespace of its own
    (a pod on a cgroup v2 node) mountinfo gives the node's hierarchy, mounted in, the root
    ``/../../..``, and its groups are the node's ``/kubepods.slice/...``."""
    group = posixpath.normpath("/" + group.lstrip("/"))
    mount = _mount_of(str(directory), mounts)
    top = Path(mount.mount_point) if mount is not None else directory
    try:
        levels = _levels(quota_levels(directory, top, version, group), tie_to)
    except LimitError as exc:
        raise ServiceGroupError(f"{directory}: unexpected quota: {exc}") from None
    own_files = _exists(directory / ("cpu.cfs_quota_us" if version == 1 else "cpu.max"))
    if not own_files and not levels:
        if version == 2 and group in ("", "/"):
            why = "the root of cgroup v2 has no quota (give a group below it)"
        elif version == 2:
            why = ("the parent's cgroup.subtree_control does not enable 'cpu', and no group "
                   "above it has a quota")
        else:
            why = "no cpu.cfs_quota_us (CFS bandwidth control missing from this kernel?)"
        raise ServiceGroupError(f"no cpu controller in {directory}: {why}")
    try:
        stat_text = (directory / "cpu.stat").read_text(encoding="ascii")
    except OSError as exc:
        raise _unreadable(exc, directory) from None
    if parse_cpu_stat(stat_text, version) is None and (own_files or version == 1):
        raise ServiceGroupError(f"no throttling counters in {directory}/cpu.stat (no cpu "
                                "controller for this group)")
    usage = _usage_source(directory, version, group, stat_text, proc, mounts)
    first = levels[0] if levels else None
    return ServiceGroup(spec, directory, version, group, first.limit if first else None, usage,
                        first.burst_us if first else _own_burst(directory, version), levels,
                        version == 2 and _exists(directory / "cpu.pressure"))


def _levels(found: list[CpuLimit], tie_to: Path | None = None) -> tuple[QuotaLevel, ...]:
    """The quota levels, the tightest first (of equals, ``tie_to``'s where it is one of them:
    a pod whose limit is pod-level; else the nearest), then the rest nearest first."""
    levels = [QuotaLevel(Path(c.path), c.group or "/",
                         Limit(c.quota_us / c.period_us, c.period_us / 1000,
                               min(c.burst_us or 0, c.quota_us) / 1000, "cgroup"), c.burst_us)
              for c in found if c.quota_us is not None and c.period_us]
    if not levels:
        return ()
    tightest = min(levels, key=lambda level: level.limit.cpus)
    tied = [level for level in levels if level.directory == tie_to and
            level.limit.quota_us * tightest.limit.period_us ==
            tightest.limit.quota_us * level.limit.period_us]
    if tied:
        tightest = tied[0]
    return (tightest, *(level for level in levels if level is not tightest))


def _own_burst(directory: Path, version: int) -> int | None:
    try:
        return int((directory / ("cpu.cfs_burst_us" if version == 1 else "cpu.max.burst"))
                   .read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def _usage_source(directory: Path, version: int, group: str, stat_text: str, proc: Path,
                  mounts: list[Mount]) -> UsageSource:
    if version == 2 or "usage_usec" in stat_text:
        return UsageSource("cpu.stat", directory / "cpu.stat", proc)
    if (directory / "cpuacct.usage").exists():
        return UsageSource("cpuacct", directory / "cpuacct.usage", proc)
    procs = _subtree_procs(directory)
    for mount in mounts:
        if mount.fstype != "cgroup" or "cpuacct" not in mount.super_options:
            continue
        groups = {group} | _cpuacct_groups(procs or set(), proc)
        for candidate in sorted(groups):
            twin = map_group_path(mount, candidate)
            if twin is not None and Path(twin, "cpuacct.usage").exists() \
                    and (procs or candidate == group) and _subtree_procs(Path(twin)) == procs:
                return UsageSource("cpuacct", Path(twin, "cpuacct.usage"), proc)
    return UsageSource("proc", directory, proc)


def _cpuacct_groups(pids: set[int], proc: Path) -> set[str]:
    """The v1 cpuacct groups the processes are in (from their ``/proc/PID/cgroup``)."""
    found: set[str] = set()
    for pid in pids:
        try:
            text = (proc / str(pid) / "cgroup").read_text(encoding="ascii")
        except OSError:
            continue
        found.update(m.path for m in parse_proc_cgroup(text) if "cpuacct" in m.controllers)
    return found


def _subtree_procs(directory: Path) -> set[int] | None:
    """The processes of a group and its descendants (None if unreadable)."""
    found: set[int] = set()
    try:
        for here, _dirs, files in os.walk(directory):
            if "cgroup.procs" in files:
                text = Path(here, "cgroup.procs").read_text(encoding="ascii")
                found.update(int(p) for p in text.split())
    except (OSError, ValueError):
        return None
    return found


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a permission error is said as such, not as "missing"."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise _unreadable(exc, path) from None
    return True


def _unreadable(exc: OSError, path: Path) -> ServiceGroupError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ServiceGroupError(f"cannot read {path}: permission denied (reading another "
                                 "service's cgroup or process may need root)")
    return ServiceGroupError(f"cannot read {path}: {exc.strerror or exc}")


# ---- where the hierarchies are mounted -----------------------------------------------------

def _read_mountinfo(proc: Path) -> str:
    try:
        return (proc / "self" / "mountinfo").read_text(encoding="utf-8")
    except OSError as exc:
        raise ServiceGroupError(f"cannot read {proc}/self/mountinfo: "
                                f"{exc.strerror or exc}") from None


def _mount_of(real: str, mounts: list[Mount]) -> Mount | None:
    """The cgroup mount whose mount point holds ``real`` (the deepest one)."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/") or "/"
        if real == point or real.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) > len(best.mount_point):
                best = mount
    return best
