"""Find a container's or a Kubernetes pod's cgroup: ask ``docker``/``kubectl`` (through an
injectable command runner) and search the cgroup hierarchy for the pod's group.

Kubernetes puts a pod's group under ``kubepods`` by QoS class, named by the pod UID, and each
container's group below the pod's, named by the container id. Two cgroup drivers name them:

=============  ================================================================================
cgroupfs       ``/kubepods/pod<uid>/<id>`` (Guaranteed: no QoS level),
               ``/kubepods/burstable/pod<uid>/<id>``, ``/kubepods/besteffort/pod<uid>/<id>``
systemd        ``/kubepods.slice/kubepods-pod<uid_>.slice/cri-containerd-<id>.scope``,
               ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
               docker-<id>.scope`` (``uid_``: the UID with ``_`` for ``-``; ``crio-<id>.scope``
               for CRI-O, beside its monitor's ``crio-conmon-<id>.scope``, which is passed
               over); plain Docker with systemd: ``/system.slice/docker-<id>.scope``
=============  ================================================================================

Both on cgroup v1 (below ``/sys/fs/cgroup/cpu``) and v2 (below ``/sys/fs/cgroup``); the
``kubepods`` root may sit a few levels down (kind, k3s, a kubelet ``--cgroup-root``).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.run.kube_api import current_server

__all__ = ["CommandResult", "CommandRunner", "KubectlMissing", "LookupFailed", "docker_container_pid",
           "find_pod_directory", "kubernetes_pod", "parse_k8s_spec", "run_command"]

KUBEPODS_DEPTH = 3       # how deep below a hierarchy's root the kubepods group may be
_UID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                  r"[0-9a-fA-F]{12}$")
_HEX_ID = re.compile(r"^[0-9a-f]{12,64}$")
_KLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")   # client-go's log line prefix
_MONITORS = ("crio-conmon-",)   # a runtime's sibling group named by the same container id


class LookupFailed(ValueError):
    """docker/kubectl or the hierarchy could not say where the group is (one line)."""


class KubectlMissing(LookupFailed):
    """No kubectl on this machine (then a pod's group is not looked for here)."""


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str

    def first_error_line(self) -> str:
        lines = [line.strip() for line in (self.stderr or self.stdout).splitlines() if
                 line.strip()]
        return lines[0] if lines else f"exit status {self.returncode}"


CommandRunner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str], timeout: float = 20.0) -> CommandResult:
    """Run a command, capture its output (127 when it is not installed, 124 on timeout)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]} did not answer within {timeout:g} s")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


# ---- Docker --------------------------------------------------------------------------------

def docker_container_pid(name: str, run: CommandRunner) -> int:
    """The host pid of a running local container's main process."""
    result = run(["docker", "inspect", "--type", "container", "--format",
                  "{{.Id}} {{.State.Pid}} {{.State.Running}}", name])
    if result.returncode != 0:
        line = result.first_error_line()
        lowered = line.lower()
        if result.returncode == 127:
            raise LookupFailed("docker: command not found (docker:NAME needs the Docker client)")
        if "cannot connect to the docker daemon" in lowered or "daemon running" in lowered:
            raise LookupFailed(f"Docker is not running (cannot connect to the Docker daemon) "
                               f"for docker:{name}")
        if "no such" in lowered:
            raise LookupFailed(f"no such container: {name}")
        if "permission denied" in lowered:
            raise LookupFailed(f"docker inspect {name}: permission denied (root or the docker "
                               "group may be needed)")
        raise LookupFailed(f"docker inspect {name} failed: {line}")
    fields = result.stdout.split()
    if len(fields) != 3 or not fields[1].isdigit():
        raise LookupFailed(f"docker inspect {name}: unexpected answer {result.stdout.strip()!r}")
    if fields[2] != "true" or int(fields[1]) <= 0:
        raise LookupFailed(f"container {name} is not running")
    return int(fields[1])


# ---- Kubernetes ----------------------------------------------------------------------------

def parse_k8s_spec(spec: str) -> tuple[str, str, str | None]:
    """``k8s:NAMESPACE/POD[/CONTAINER]`` -> (namespace, pod, container or None)."""
    body = spec.split(":", 1)[1]
    parts = body.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise LookupFailed(f"{spec}: expected k8s:NAMESPACE/POD or k8s:NAMESPACE/POD/CONTAINER")
    return parts[0], parts[1], (parts[2] if len(parts) == 3 else None)


def kubernetes_pod(namespace: str, pod: str, container: str | None, pod_uid: str | None,
                   run: CommandRunner) -> tuple[str, str | None, bool]:
    """(pod UID, container id or None, whether the pod-level limit binds it: :func:`pod_level_binds`):
    ``--pod-uid`` when given, else ``kubectl get pod``
    (the API server that the user's kubeconfig names: run from anywhere that reaches it);
    a container's id from ``.status.containerStatuses`` (or CONTAINER itself when it is a
    hex container id, so no kubectl is needed).

    A pod named without a container, asked through kubectl, that runs exactly one container
    gives that container's id: the kubelet sets the limit on both the pod's group and the
    container's, and the kernel counts a throttle in the group whose quota ran out, so the
    container's group (with the pod's above it as a second quota level) is the one to watch.
    A pod of several containers is watched at the pod's group (name a container to read its
    own quota too); with ``--pod-uid`` and no kubectl, the pod's group."""
    direct_id = container if container and _HEX_ID.match(container) else None
    need_kubectl = pod_uid is None or (container is not None and direct_id is None)
    document: dict[str, Any] = {}
    if need_kubectl:
        result = run(["kubectl", "get", "pod", "-n", namespace, pod, "-o", "json"])
        if result.returncode != 0:
            raise LookupFailed(_kubectl_failure(result, namespace, pod, container, pod_uid))
        try:
            document = json.loads(result.stdout)
        except ValueError:
            raise LookupFailed(f"kubectl get pod {namespace}/{pod}: not JSON") from None
    uid = pod_uid or str(document.get("metadata", {}).get("uid") or "")
    if not _UID.match(uid):
        raise LookupFailed(f"pod uid must look like 8-4-4-4-12 hex digits (got {uid!r})")
    if container is None:
        statuses = document.get("status", {}).get("containerStatuses") or []
        if len(statuses) == 1 and statuses[0].get("containerID"):
            return (uid.lower(), str(statuses[0]["containerID"]).split("://", 1)[-1],
                    pod_level_binds(document, statuses[0].get("name")))
        return uid.lower(), None, pod_level_binds(document, None)
    cid = direct_id or _container_id(document, namespace, pod, container)
    named = next((str(s.get("name")) for s in document.get("status", {}).get(
        "containerStatuses") or [] if str(s.get("containerID") or "").endswith(cid)), container)
    return uid.lower(), cid, pod_level_binds(document, named)


def pod_level_binds(document: dict[str, Any], container: str | None) -> bool:
    """Whether the pod's pod-level CPU limit (``spec.resources.limits.cpu``, KEP-2837) is the
    one that binds ``container`` (None: the pod's group, every container): set, and the
    container has no cpu limit of its own or one equal to it. The kubelet writes the pod's
    limit on a container without one too, so the two groups hold the same quota: the spec
    says which it is (``client.run.limiters.kubernetes.binding_level`` alike)."""
    spec = document.get("spec") or {}
    pod_level = _millicores(((spec.get("resources") or {}).get("limits") or {}).get("cpu"))
    if pod_level is None:
        return False
    for c in spec.get("containers") or []:
        if container is not None and c.get("name") != container:
            continue
        own = _millicores(((c.get("resources") or {}).get("limits") or {}).get("cpu"))
        if own is not None and own < pod_level:
            return False
    return True


def _millicores(quantity: Any) -> int | None:
    """``"300m"`` -> 300, ``"0.5"`` -> 500; None for none or what is not a CPU quantity."""
    if quantity is None:
        return None
    text = str(quantity).strip()
    try:
        return round(float(text[:-1])) if text.endswith("m") else round(float(text) * 1000)
    except ValueError:
        return None


def _kubectl_failure(result: CommandResult, namespace: str, pod: str, container: str | None,
                     pod_uid: str | None) -> str:
    """What a failed ``kubectl get pod`` means, in one line."""
    line = _kubectl_error_line(result)
    lowered = line.lower()
    hint = (" (or give the pod's uid with --pod-uid UID)" if pod_uid is None else
            " (or give the container id instead of its name: k8s:NS/POD/<id>)")
    if result.returncode == 127:
        raise KubectlMissing(f"kubectl: command not found (k8s:NS/POD asks kubectl for the "
                             f"pod){hint}")
    if "notfound" in lowered.replace(" ", "") or " not found" in lowered:
        return f"no pod {pod} in namespace {namespace} (kubectl: {line})"
    if "forbidden" in lowered or "unauthorized" in lowered:
        return (f"kubectl may not read pod {namespace}/{pod}: 'get pods' in namespace "
                f"{namespace} is needed ({line}){hint}")
    what = "uid" if pod_uid is None else f"container {container}'s id"
    server = current_server()   # kubectl's words may not name it (a response cut short)
    where = f"; the API server at {server}" if server and server not in line else ""
    return f"kubectl cannot tell pod {namespace}/{pod}'s {what} ({line}{where}){hint}"


def _kubectl_error_line(result: CommandResult) -> str:
    """kubectl's own message: its last line (client-go's log lines, ``E1125 10:57:56...``,
    come first when the server cannot be reached)."""
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines()
             if line.strip() and not _KLOG.match(line.strip())]
    return lines[-1] if lines else result.first_error_line()


def _container_id(document: dict[str, Any], namespace: str, pod: str, container: str) -> str:
    statuses = document.get("status", {}).get("containerStatuses") or []
    names = [str(s.get("name")) for s in statuses]
    for status in statuses:
        if status.get("name") == container:
            raw = str(status.get("containerID") or "")
            if not raw:
                raise LookupFailed(f"container {container} of pod {namespace}/{pod} has no "
                                   "container id yet (not running?)")
            return raw.split("://", 1)[-1]
    raise LookupFailed(f"pod {namespace}/{pod} has no container {container} "
                       f"(containers: {', '.join(names) or 'none reported yet'})")


def find_pod_directory(top: Path, uid: str, container_id: str | None) -> Path | None:
    """The pod's group (or its container's) below the hierarchy ``top``; None when the pod
    has no group here. ``LookupFailed`` when the pod is here but the container is not."""
    for kubepods in _kubepods_roots(top):
        pod_dir = _pod_below(kubepods, uid)
        if pod_dir is None:
            continue
        if container_id is None:
            return pod_dir
        found = _container_below(pod_dir, container_id)
        if found is None:
            raise LookupFailed(f"container {container_id[:12]} has no cgroup in {pod_dir} "
                               "(restarted or not started yet?)")
        return found
    return None


def _kubepods_roots(top: Path) -> list[Path]:
    roots: list[Path] = []
    level = [top]
    for _ in range(KUBEPODS_DEPTH):
        below: list[Path] = []
        for directory in level:
            for child in _subdirectories(directory):
                if child.name in ("kubepods", "kubepods.slice") or \
                        child.name.endswith("-kubepods.slice"):
                    roots.append(child)
                else:
                    below.append(child)
        level = below
    return roots


def _pod_below(kubepods: Path, uid: str) -> Path | None:
    """``pod<uid>`` (cgroupfs) or ``*-pod<uid_>.slice`` (systemd), directly below kubepods
    (Guaranteed) or below its QoS level (burstable, besteffort)."""
    names = {f"pod{uid}", f"pod{uid.replace('-', '_')}"}
    for qos in [kubepods, *_subdirectories(kubepods)]:
        for child in _subdirectories(qos):
            name = child.name
            if name in names or (name.endswith(".slice") and
                                 name[:-len(".slice")].rsplit("-", 1)[-1] in names):
                return child
    return None


def _container_below(pod_dir: Path, container_id: str) -> Path | None:
    for child in _subdirectories(pod_dir):
        name = child.name
        if name.startswith(_MONITORS):   # CRI-O's conmon for the container, not the container
            continue
        stem = name[:-len(".scope")] if name.endswith(".scope") else name
        bare = stem.rsplit("-", 1)[-1]   # cri-containerd-<id>, docker-<id>, crio-<id>
        if container_id in (stem, bare) or (len(container_id) >= 12 and
                                            bare.startswith(container_id)):
            return child
    return None


def _subdirectories(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return []
