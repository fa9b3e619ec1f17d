"""The node's configuration files, rendered as text from the layout (pure: no I/O here)."""
from __future__ import annotations

import json

from kubenode.config import (API_PORT, CLUSTER_CIDR, DNS_SERVICE_IP, NODE_ADDR, POD_CIDR, Layout,
                             Member, member)

__all__ = ["kubeconfig", "FAIL_CGROUP_V1_NOTE", "containerd_toml", "kubelet_config", "kube_proxy_config", "cni_conflist",
           "KUBELET_SYSCTLS", "PAUSE_IMAGE", "COREDNS_IMAGE", "TRAEFIK_IMAGE"]

# Local image names (no registry host: these images are imported, never pulled).
PAUSE_IMAGE = "throttle-lab-pause:3.10.1"
COREDNS_IMAGE = "throttle-lab-coredns:v1.15.0"
TRAEFIK_IMAGE = "throttle-lab-traefik:v3.6.12"

# The global sysctls the kubelet sets when they differ from these values (pkg/kubelet/cm,
# setupKernelTunables). Inside the node's mount namespace a file holding each value is
# bind-mounted over its /proc/sys path, so the kubelet finds what it wants and writes nothing.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


FIRST = member(1)

# The line ``up`` prints on a cgroup v1 host.
FAIL_CGROUP_V1_NOTE = ("kubelet: failCgroupV1 is false: this host has cgroup v1, which "
                       "Kubernetes 1.35+ refuses unless told")


def kubeconfig(lay: Layout, user: str, *, server: str | None = None, m: Member = FIRST) -> str:
    """A kubeconfig for one of the node's client certificates (``pki/<user>.crt``); every
    node's talks to node 1's API server."""
    pki = m.home(lay) / "pki"
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "throttle-lab", "cluster": {
            "server": server or f"https://{NODE_ADDR}:{API_PORT}",
            "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                          "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "throttle-lab", "context": {"cluster": "throttle-lab",
                                                          "user": user}}],
        "current-context": "throttle-lab",
    }
    return json.dumps(doc, indent=2) + "\n"


def containerd_toml(lay: Layout, m: Member = FIRST) -> str:
    """containerd 2 of the node's own (config version 4, containerd 2.3+'s: as version 3, the
    CRI plugin is split into ``io.containerd.cri.v1.images`` and ``io.containerd.cri.v1.runtime``;
    a version 3 file is migrated at each start, with a warning; the sockets are the server
    plugins' settings, no longer ``[grpc]`` and ``[ttrpc]``): root, state and sockets under
    the state directory; the shim and runc from the cache (``runtime_path``,
    ``BinaryName``), not the host's; cgroupfs; ``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE
    in a sandbox: the pause container's -998 would be refused). Nothing on the host's paths:
    no NRI socket (``/var/run/nri``, one per host), the ``opt`` directory in the state."""
    base = m.home(lay) / "containerd"
    images = "plugins.'io.containerd.cri.v1.images'"
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    runc = f"{runtime}.containerd.runtimes.runc"
    return f"""version = 4
root = "{base / 'root'}"
state = "{base / 'state'}"

[plugins.'io.containerd.server.v1.grpc']
  address = "{base / 'containerd.sock'}"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "{base / 'containerd.sock.ttrpc'}"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.internal.v1.opt']
  path = "{base / 'opt'}"

[{images}]
  snapshotter = "overlayfs"

[{images}.pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[{runtime}]
  restrict_oom_score_adj = true
  enable_selinux = false

[{runtime}.containerd]
  default_runtime_name = "runc"

[{runc}]
  runtime_type = "io.containerd.runc.v2"
  runtime_path = "{lay.containerd_dir / 'containerd-shim-runc-v2'}"

[{runc}.options]
  BinaryName = "{lay.runc_bin}"
  SystemdCgroup = false

[{runtime}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{m.home(lay) / 'cni' / 'net.d'}"
"""


def kubelet_config(lay: Layout, m: Member = FIRST, *, cgroup_v1: bool = False,
                   static_cpus: bool = False) -> str:
    """The kubelet's configuration; on a cgroup v1 host (``cgroup_v1``) ``failCgroupV1: false``,
    since the kubelet refuses v1 by default from 1.35 on (KEP-5573). ``static_cpus``: the
    static CPU manager, 100m (so CPU 0) reserved for the system (a Guaranteed container with an
    integer CPU request gets CPUs of its own and, since 1.33, no CFS quota); only where a test asks
    (:func:`kubenode.node.cpu_manager_policy`)."""
    home = m.home(lay)
    pki = home / "pki"
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "address": m.addr,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{m.cgroup_root}",
        "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": f"unix://{home / 'containerd' / 'containerd.sock'}",
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": "cluster.local",
        "resolvConf": str(home / "resolv.conf"),
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "podCIDR": m.pod_cidr,
        "maxPods": lay.max_pods,   # config.MAX_PODS unless THROTTLE_LAB_KUBE_MAX_PODS
        "serializeImagePulls": False,
        # A busy shared disk must not evict the node's pods: only a nearly full one does.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%", "nodefs.inodesFree": "2%"},
        "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
        "fileCheckFrequency": "5s", "syncFrequency": "10s",
        "nodeStatusReportFrequency": "10s",
    }
    if cgroup_v1:
        doc["failCgroupV1"] = False
    if static_cpus:
        doc["cpuManagerPolicy"] = "static"
        # the static policy needs a reservation: 100m keeps CPU 0 out of the exclusive pool
        # and 1.9 CPUs allocatable, room for one 1-CPU pod beside the agent's requests
        doc["systemReserved"] = {"cpu": "100m"}
    return json.dumps(doc, indent=2) + "\n"


def kube_proxy_config(lay: Layout, m: Member = FIRST) -> str:
    doc = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(m.home(lay) / "kube-proxy.kubeconfig")},
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        # 0: leave nf_conntrack_max alone (global, and not writable from the node's namespace).
        "conntrack": {"maxPerCore": 0},
        "bindAddress": "0.0.0.0",
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    }
    return json.dumps(doc, indent=2) + "\n"


def cni_conflist(pod_cidr: str = POD_CIDR) -> str:
    doc = {
        "cniVersion": "0.4.0", "name": "throttle-lab",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(doc, indent=2) + "\n"
