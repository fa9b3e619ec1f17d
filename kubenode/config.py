"""Where the node lives, what it is built from, and its addresses: one place for every constant."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KUBE_VERSION", "COREDNS_VERSION", "TRAEFIK_VERSION", "KUBE_BINARIES", "Layout",
           "layout", "HOST_ADDR", "NODE_ADDR", "VETH_HOST", "VETH_NODE", "POD_CIDR",
           "SERVICE_CIDR", "CLUSTER_CIDR", "API_SERVICE_IP", "DNS_SERVICE_IP", "NODE_NAME",
           "CGROUP_ROOT", "API_PORT"]

KUBE_VERSION = "v1.33.13"
COREDNS_VERSION = "v1.15.0"
TRAEFIK_VERSION = "v3.6.12"
KUBE_BINARIES = ("kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 "kubectl", "kube-proxy")

# The node's network: a veth pair between the host and the node's own network namespace.
HOST_ADDR = "10.250.0.1"
NODE_ADDR = "10.250.0.2"
VETH_HOST = "tlnode-h"
VETH_NODE = "tlnode-n"
POD_CIDR = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/12"
API_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
API_PORT = 6443
NODE_NAME = "throttle-lab-node"
# The kubelet's cgroupRoot: the pods' groups live under /<root>/kubepods/... in every hierarchy.
CGROUP_ROOT = "tlnode"


@dataclass(frozen=True)
class Layout:
    """The directories: ``cache`` (builds, kept across nodes) and ``state`` (one node's life)."""

    cache: Path
    state: Path

    @property
    def kube_dir(self) -> Path:
        return self.cache / f"kube-{KUBE_VERSION}"

    @property
    def kube_bin(self) -> Path:
        return self.kube_dir / "bin"

    @property
    def coredns_bin(self) -> Path:
        return self.cache / f"coredns-{COREDNS_VERSION}" / "coredns"

    @property
    def traefik_bin(self) -> Path:
        return self.cache / f"traefik-{TRAEFIK_VERSION}" / "traefik"

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
    (defaults outside any checkout, so every worktree and CI run shares one build)."""
    cache = Path(os.environ.get("THROTTLE_LAB_KUBE_CACHE", "/var/cache/throttle-lab"))
    state = Path(os.environ.get("THROTTLE_LAB_KUBE_STATE", "/var/lib/throttle-lab-node"))
    return Layout(cache=cache, state=state)
