"""Where the node lives, what it is built from, and its addresses: one place for every constant."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KUBE_VERSION", "CONTAINERD_VERSION", "RUNC_VERSION", "CONTAINERD_BINARIES", "COREDNS_VERSION", "TRAEFIK_VERSION", "METRICS_SERVER_VERSION", "METRICS_SERVER_PORT", "KUBE_BINARIES", "Layout",
           "layout", "HOST_ADDR", "NODE_ADDR", "VETH_HOST", "VETH_NODE", "POD_CIDR",
           "SERVICE_CIDR", "CLUSTER_CIDR", "API_SERVICE_IP", "DNS_SERVICE_IP", "NODE_NAME",
           "CGROUP_ROOT", "API_PORT", "MAX_NODES", "MAX_PODS", "MAX_PODS_CEILING", "LINK_CIDR", "Member", "member"]

KUBE_VERSION = "v1.37.2"
# containerd 2 and runc, built from the module proxy like Kubernetes (Debian's containerd 1.6
# stays for Docker's engine; the node runs these).
CONTAINERD_VERSION = "v2.4.2"
RUNC_VERSION = "v1.5.3"
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
COREDNS_VERSION = "v1.15.0"
TRAEFIK_VERSION = "v3.6.12"
# The resource metrics API (metrics.k8s.io) the cluster's HPA controller reads: metrics-server,
# a host process in node 1's namespaces, listening on the node's address.
METRICS_SERVER_VERSION = "v0.8.0"
METRICS_SERVER_PORT = 4443
KUBE_BINARIES = ("kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 "kubectl", "kube-proxy")

# The node's network: a veth pair between the host and the node's own network namespace.
HOST_ADDR = "10.250.0.1"
NODE_ADDR = "10.250.0.2"
VETH_HOST = "tlnode-h"
VETH_NODE = "tlnode-n"
POD_CIDR = "10.244.0.0/24"
# each kubelet's maxPods: 100 idle pods for the agent's cost benchmark beside the demo and
# system pods (a node's pod range, a /24, holds 253 addresses; pods past that run in the
# node's network, hostNetwork); THROTTLE_LAB_KUBE_MAX_PODS sets another, up to the ceiling
MAX_PODS = 150
MAX_PODS_CEILING = 1000
CLUSTER_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/12"
API_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
API_PORT = 6443
NODE_NAME = "throttle-lab-node"
# The kubelet's cgroupRoot: the pods' groups live under /<root>/kubepods/... in every hierarchy.
CGROUP_ROOT = "tlnode"

# More nodes (``make kube-node NODES=2``): node i >= 2 is a kubelet joined to node 1's control
# plane. Its link is a veth pair between node 1's network namespace and its own, in
# 10.250.0.<4(i-1)>/30 (node 1's end .<4(i-1)+1>, its own .<4(i-1)+2>): node 1 routes between
# the nodes, so the host's forwarding and iptables stay as they are.
MAX_NODES = 8
LINK_CIDR = "10.250.0.0/24"    # every node's link: node 1's to the host, the others' to node 1


@dataclass(frozen=True)
class Member:
    """One node of the cluster: node 1 holds the control plane, each one a kubelet."""

    index: int

    @property
    def control_plane(self) -> bool:
        return self.index == 1

    @property
    def name(self) -> str:
        return NODE_NAME if self.index == 1 else f"{NODE_NAME}-{self.index}"

    @property
    def addr(self) -> str:
        return NODE_ADDR if self.index == 1 else f"10.250.0.{4 * (self.index - 1) + 2}"

    @property
    def gateway(self) -> str:
        """The other end of the node's link: the host for node 1, node 1 for the others."""
        return HOST_ADDR if self.index == 1 else f"10.250.0.{4 * (self.index - 1) + 1}"

    @property
    def link_outer(self) -> str:
        """The link's end on the host (node 1) or in node 1's namespace (the others)."""
        return VETH_HOST if self.index == 1 else f"tlnode{self.index}-h"

    @property
    def link_inner(self) -> str:
        return VETH_NODE if self.index == 1 else f"tlnode{self.index}-n"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index - 1}.0/24"

    @property
    def cgroup_root(self) -> str:
        return CGROUP_ROOT if self.index == 1 else f"{CGROUP_ROOT}{self.index}"

    def home(self, lay: "Layout") -> Path:
        """The node's state directory: the layout's (node 1), or ``node-<i>`` in it."""
        return lay.state if self.index == 1 else lay.state / f"node-{self.index}"


def member(index: int) -> Member:
    if not 1 <= index <= MAX_NODES:
        raise ValueError(f"a node's index is 1 to {MAX_NODES}, not {index}")
    return Member(index)


@dataclass(frozen=True)
class Layout:
    """The directories: ``cache`` (builds, kept across nodes) and ``state`` (one node's life);
    ``max_pods``, each kubelet's ``maxPods``."""

    cache: Path
    state: Path
    max_pods: int = MAX_PODS

    @property
    def kube_dir(self) -> Path:
        return self.cache / f"kube-{KUBE_VERSION}"

    @property
    def kube_bin(self) -> Path:
        return self.kube_dir / "bin"

    @property
    def containerd_dir(self) -> Path:
        """``containerd`` and its shim ``containerd-shim-runc-v2``."""
        return self.cache / f"containerd-{CONTAINERD_VERSION}"

    @property
    def runc_bin(self) -> Path:
        return self.cache / f"runc-{RUNC_VERSION}" / "runc"

    @property
    def coredns_bin(self) -> Path:
        return self.cache / f"coredns-{COREDNS_VERSION}" / "coredns"

    @property
    def traefik_bin(self) -> Path:
        return self.cache / f"traefik-{TRAEFIK_VERSION}" / "traefik"

    @property
    def metrics_server_bin(self) -> Path:
        return self.cache / f"metrics-server-{METRICS_SERVER_VERSION}" / "metrics-server"

    @property
    def pause_bin(self) -> Path:
        return self.cache / f"pause-{KUBE_VERSION}" / "pause"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    def path(self, *parts: str) -> Path:
        return self.state.joinpath(*parts)


def layout() -> Layout:
    """The cache and state directories, from ``THROTTLE_LAB_KUBE_CACHE`` / ``THROTTLE_LAB_KUBE_STATE``
    (defaults outside any checkout, so every worktree and CI run shares one build), and the
    kubelets' ``maxPods`` from ``THROTTLE_LAB_KUBE_MAX_PODS`` (default :data:`MAX_PODS`; a
    benchmark's node of more pods); ``ValueError`` (one line) for a count that is not one."""
    cache = Path(os.environ.get("THROTTLE_LAB_KUBE_CACHE", "/var/cache/throttle-lab"))
    state = Path(os.environ.get("THROTTLE_LAB_KUBE_STATE", "/var/lib/throttle-lab-node"))
    text = os.environ.get("THROTTLE_LAB_KUBE_MAX_PODS", "").strip()
    if not text:
        return Layout(cache=cache, state=state)
    if not text.isdigit() or not 1 <= int(text) <= MAX_PODS_CEILING:
        raise ValueError(f"THROTTLE_LAB_KUBE_MAX_PODS={text}: a count of pods a node, 1 to "
                         f"{MAX_PODS_CEILING}")
    return Layout(cache=cache, state=state, max_pods=int(text))
