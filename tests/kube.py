"""The cluster for the tests: two nodes per session (kubenode.node, the module
``make kube-node NODES=2`` calls), and what the host looks like before, during and after it.

Node 2 carries the taint :data:`SECOND_NODE_TAINT` for the session: a pod lands there only when
it tolerates it (the recorder's DaemonSet does, and the two-node modules' pods), so the modules
that read a pod's files under node 1's cgroup root find their pods there.

A cluster that was already up when the session started is reused and left up (node 2 joined to
it if it was not, the taint taken off again); one started here is taken down at the end, and
the host must then look as it did before (checked in the fixture's teardown: a difference is an
error of the session).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from client.run.limiters.kubernetes import cpu_cores
from cpuquota.limit import Limit
from kubenode import files, host, node, project_images
from kubenode.config import NODE_NAME, VETH_HOST, layout, member
from kubenode.steps import pending
from tests.support import ROOT, require

__all__ = ["BEFORE", "HostView", "busy_deployment", "host_view", "missing_node_tools", "NODES", "SECOND_NODE_TAINT",
           "node_session", "require_node_tools", "iptables_lines", "toleration",
           "wait_for", "NODE_PATHS", "live_pods", "namespace_gone", "one_live_pod", "namespaced_overlay", "pods_namespace",
           "shipped_limit"]

# (containerd, its shim, ctr and runc are the node's own, built into the cache.)
TOOLS = ("etcd", "conntrack", "iptables", "unshare", "nsenter",
         "openssl", "gcc", "ip", "docker")
# Paths a node without its bind mounts would leave on the host.
NODE_PATHS = ("/var/lib/kubelet", "/var/lib/cni", "/run/netns", "/run/containerd",
              "/var/log/pods", "/var/log/containers")
# The session's nodes: the tests put workloads on both (issue 47).
NODES = 2
# Node 2's taint in a test session: only pods that tolerate it land there (the module docstring).
SECOND_NODE_TAINT = "throttle-lab.test/second-node"
# Host sysctls the kubelet or kube-proxy would write if the node were not in namespaces of its own.
HOST_SYSCTLS = [*files.KUBELET_SYSCTLS, "net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet",
                "net/netfilter/nf_conntrack_max"]


def shipped_limit() -> Limit:
    """The limited Deployment's CPU limit as k8s/deployment-limited.yaml ships it (its
    ``limits.cpu``; the kubelet writes it as the quota of the pod's group and its container's):
    the one place the node tests take it from."""
    doc = yaml.safe_load((ROOT / "k8s" / "deployment-limited.yaml").read_text())
    cpus = cpu_cores(doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"])
    assert cpus is not None
    return Limit(cpus)


def missing_node_tools() -> str | None:
    """Why the node cannot come up on this host, or None."""
    if not sys.platform.startswith("linux"):
        return "the node needs Linux namespaces and cgroups"
    if os.geteuid() != 0:
        return "the node needs root (namespaces, cgroups, mounts)"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} not found (scripts/install-system-deps.sh installs the node's parts)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "no CNI plugins in /usr/lib/cni (containernetworking-plugins)"
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        return "no Go toolchain: the node's Kubernetes is built from the Go module proxy"
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        return "the node's tests read cgroup v1 quota files (cpu controller at /sys/fs/cgroup/cpu)"
    return None


def require_node_tools() -> None:
    missing = missing_node_tools()
    require(missing is None, str(missing))


def iptables_lines(prefixes: tuple[str, ...] = ("KUBE-", "CNI-")) -> list[str]:
    """Lines of the host's iptables (every backend installed) naming the cluster's chains."""
    out: list[str] = []
    for tool in ("iptables-save", "iptables-legacy-save", "iptables-nft-save"):
        if shutil.which(tool):
            text = subprocess.run([tool], capture_output=True, text=True, timeout=60).stdout
            out += [line for line in text.splitlines() if any(p in line for p in prefixes)]
    return out


@dataclass(frozen=True)
class HostView:
    sysctls: dict[str, str]
    iptables: tuple[str, ...]
    mounts: tuple[str, ...]          # mount points of the node's (state dir, its paths)
    groups: tuple[str, ...]          # the cgroup root in any hierarchy, kubepods anywhere at top
    links: tuple[str, ...]           # the node's links seen on the host
    paths: tuple[str, ...]           # NODE_PATHS that exist
    processes: tuple[str, ...]       # processes running the node's programs


# The host as the session found it, before the node came up (node_session fills it).
BEFORE: list[HostView] = []


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "(absent)"


def host_view() -> HostView:
    lay = layout()
    sysctls = {key: _read(Path("/proc/sys") / key) for key in HOST_SYSCTLS}
    watched = (str(lay.state), *NODE_PATHS)
    mounts = tuple(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                   if line.split()[4].startswith(watched))
    roots = [member(i).cgroup_root for i in range(1, NODES + 1)]
    groups = tuple(str(mount / name) for _, mount in host.cgroup_mounts()
                   for name in (*roots, "kubepods") if (mount / name).exists())
    links = tuple(name for name in os.listdir("/sys/class/net")
                  if name in (VETH_HOST, "cni0") or name.startswith("tlnode"))
    paths = tuple(p for p in NODE_PATHS if Path(p).exists())
    processes = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:  # the node's programs, or anything started with its state directory (its
            # containerd and the shims: the host's own containerd, docker's, does not count)
            exe = os.readlink(f"/proc/{entry}/exe")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if exe.startswith((str(lay.kube_bin), str(lay.containerd_dir), str(lay.runc_bin))) \
                or str(lay.state) in cmdline:
            processes.append(f"{entry} {cmdline.strip()[:100]}")
    return HostView(sysctls, tuple(iptables_lines()), mounts, groups, links, paths,
                    tuple(sorted(set(processes))))


def wait_for(what: str, ready, timeout: float, interval: float = 1.0):  # type: ignore[no-untyped-def]
    """Poll ``ready()`` until it returns something true; return that, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s")
        time.sleep(interval)


def toleration() -> dict[str, str]:
    """The toleration a pod spec lists to be placed on node 2 in a test session."""
    return {"key": SECOND_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def _log(msg: str) -> None:
    print(f"[kubenode] {msg}", flush=True)


def node_session() -> Iterator[node.Node]:
    """Bring the two nodes up (or reuse them), yield node 1, take them down if they were started
    in this session and check that the host looks as before."""
    require_node_tools()
    lay = layout()
    probe = node.Node(lay, lambda _: None)
    reused = node.reusable(probe)   # up, or up but for add-ons that up() updates in place
    joined = reused and bool(pending(node.steps(2), probe.other(2)))
    before = host_view()
    BEFORE.clear()
    BEFORE.append(before)
    t0 = time.monotonic()
    the_node = node.up(lay, log=_log, nodes=NODES)
    second = member(2).name
    wait_for(f"{second} registered", lambda: the_node.kubectl(
        "get", "node", second, check=False).returncode == 0, 120)
    the_node.kubectl("taint", "node", second, f"{SECOND_NODE_TAINT}=tests:NoSchedule",
                     "--overwrite")
    print(f"[kubenode] {NODES} nodes {'reused' if reused else 'up'} in "
          f"{time.monotonic() - t0:.1f} s ({NODE_NAME}, {second})", flush=True)
    try:
        yield the_node
    finally:
        if reused and joined:   # node 2 joined here: it leaves, node 1 stays as it was
            node.leave(lay, 2, log=_log)
        elif reused:
            the_node.kubectl("taint", "node", second, f"{SECOND_NODE_TAINT}-", check=False)
        if not reused:
            t0 = time.monotonic()
            node.down(lay, log=_log)
            print(f"[kubenode] node down in {time.monotonic() - t0:.1f} s", flush=True)
            after = host_view()
            diff = {field: (getattr(before, field), getattr(after, field))
                    for field in before.__dataclass_fields__
                    if getattr(before, field) != getattr(after, field)}
            assert not diff, f"the host after the node differs from before: {diff}"


def live_pods(node: node.Node, namespace: str, component: str) -> list[dict[str, Any]]:
    """The pods labelled ``app.kubernetes.io/component=<component>`` in ``namespace`` that are
    not being deleted, by name."""
    out = node.kubectl("-n", namespace, "get", "pod", "-l",
                       f"app.kubernetes.io/component={component}", "-o", "json")
    pods = [p for p in json.loads(out.stdout)["items"]
            if not p["metadata"].get("deletionTimestamp")]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def one_live_pod(node: node.Node, namespace: str, component: str) -> dict[str, Any]:
    """The one such pod (an assert names them when there is not exactly one)."""
    pods = live_pods(node, namespace, component)
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def namespace_gone(node: node.Node, namespace: str, timeout: float = 180) -> None:
    """Wait until ``namespace`` is not Terminating any more (one deleted without waiting, by
    an earlier module or run, must be gone before it is made again)."""
    wait_for(f"namespace {namespace} from an earlier run gone", lambda: "Terminating" not in
             node.kubectl("get", "namespace", namespace, check=False).stdout, timeout)


@contextmanager
def pods_namespace(the_node: node.Node, namespace: str) -> Iterator[str]:
    """``namespace`` for a module's pods, deleted afterwards without waiting for its pods to
    end (the next module's are in a namespace of their own; the node's end, or
    :func:`namespace_gone` at the next start, sees to the rest)."""
    namespace_gone(the_node, namespace)
    the_node.kubectl("create", "namespace", namespace, check=False)
    try:
        yield namespace
    finally:
        the_node.kubectl("delete", "namespace", namespace, "--wait=false", check=False,
                         timeout=60)


def namespaced_overlay(k8s: Path, directory: Path, namespace: str,
                       deletions: list[tuple[str, str, str]], patches: str = "") -> Path:
    """A kustomize overlay in ``directory``: ``k8s/`` moved into ``namespace``, the objects
    ``deletions`` names (apiVersion, kind, name; name "*" for every one of the kind) deleted,
    and ``patches`` (more entries of the ``patches:`` list, YAML) after them."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = "".join(
        (f"""  - target:
      kind: {kind}
    patch: |-
      $patch: delete
      apiVersion: {api}
      kind: {kind}
      metadata:
        name: any
""" if name == "*" else f"""  - patch: |-
      $patch: delete
      apiVersion: {api}
      kind: {kind}
      metadata:
        name: {name}
""") for api, kind, name in deletions)
    (directory / "kustomization.yaml").write_text(f"""apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {namespace}
resources:
  - {os.path.relpath(k8s, directory)}
patches:
{entries}{patches}""")
    return directory


def busy_deployment(namespace: str) -> dict[str, Any]:
    """A Deployment ``busy`` of one pod the recorder records (labelled), the project's service
    image limited to 100m."""
    labels = {"app": "busy", "throttle-lab/record": "true"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "busy", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "busy"}},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                     "containers": [{
                         "name": "main", "image": project_images.SERVICE_IMAGE,
                         "imagePullPolicy": "Never",
                         "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                       "limits": {"cpu": "100m", "memory": "256Mi"}}}]}}}}
