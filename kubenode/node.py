"""The node: its steps (data), and ``up``, ``down`` and ``status`` over them.

``make kube-node``/``make kube-down``, ``python -m kubenode`` and the tests' session fixture all
call :func:`up` and :func:`down` here. ``up`` reuses a node whose every step checks out, cleans a
half-started one first, then runs the steps; ``down`` runs every undo (reverse order), stopping
each process by its pid, and removes what the node made on the host.

``up(nodes=2)`` (``make kube-node NODES=2``) joins more nodes to node 1's control plane: each
with its own holder (network and mount namespaces), containerd, kubelet, kube-proxy and cgroup
root, its steps :func:`steps` of its index (node 1's own step functions, on that node). ``down``
takes the joined nodes down first, then node 1.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from kubenode import build, daemons, files, host, images, pki
from kubenode.addons import METRICS_APISERVICE, coredns_manifests, metrics_server_manifests
from kubenode.config import (CLUSTER_CIDR, HOST_ADDR, LINK_CIDR, MAX_NODES, METRICS_SERVER_PORT,
                             NODE_ADDR, POD_CIDR, SERVICE_CIDR, VETH_HOST, VETH_NODE, Layout, layout, member)
from kubenode.context import BIND_MOUNTS, Log, Node, containerd_addresses
from kubenode.proc import ns_inode, pids_in_namespace, read_pidfile, run, start_daemon, stop_pid
from kubenode.steps import Step, pending, run_down, run_up, updatable
from kubenode.traefik import MANIFEST_ANNOTATION, manifest_digest, traefik_manifests

__all__ = ["Node", "STEPS", "JOINING_STEPS", "steps", "up", "down", "status", "shell_exports",
           "is_up", "reusable", "leftovers", "joined", "leave",
           "load_project_images", "status_json", "traefik_log_dir", "cpu_manager_policy"]

# --- the steps ----------------------------------------------------------------------------

STATE_DIRS = ("pki", "logs", "pids", "containerd", "cni/net.d", "etcd", "sysctl",
              *BIND_MOUNTS)


def _state_ok(n: Node) -> bool:
    return n.p(".node").exists() and all(n.p(d).is_dir() for d in STATE_DIRS)


def _state_do(n: Node) -> None:
    for d in STATE_DIRS:
        n.p(d).mkdir(parents=True, exist_ok=True)
    n.lay.state.chmod(0o700)
    n.p(".node").write_text(f"throttle-lab node state, made {time.ctime()}\n")


def _state_undo(n: Node) -> None:
    if not n.home.exists():
        return
    if host.holder_pid(n.pidfile_holder) is not None:
        raise RuntimeError("the holder still runs; state directory kept")
    shutil.rmtree(n.home)


KUBECONFIGS = ("admin", "kubelet", "controller-manager", "scheduler", "kube-proxy",
               "metrics-server")


def _config_files(n: Node) -> dict[Path, str]:
    m = n.member
    users = KUBECONFIGS if m.control_plane else ("kubelet", "kube-proxy")
    out = {n.p(f"{user}.kubeconfig"): files.kubeconfig(n.lay, user, m=m) for user in users}
    out[n.p("containerd", "config.toml")] = files.containerd_toml(n.lay, m)
    out[n.p("kubelet.json")] = files.kubelet_config(n.lay, m, cgroup_v1=host.cgroup_v1())
    out[n.p("kube-proxy.json")] = files.kube_proxy_config(n.lay, m)
    out[n.p("cni", "net.d", "10-throttle-lab.conflist")] = files.cni_conflist(m.pod_cidr)
    out[n.p("resolv.conf")] = "# the throttle-lab node has no upstream resolver\n"
    for key, value in files.KUBELET_SYSCTLS.items():
        out[n.p("sysctl", key.replace("/", "."))] = value + "\n"
    return out


def _configs_ok(n: Node) -> bool:
    return all(path.exists() and path.read_text() == text
               for path, text in _config_files(n).items())


def _configs_do(n: Node) -> None:
    for path, text in _config_files(n).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _mountpoints_ok(n: Node) -> bool:
    return all(Path(target).is_dir() for target in BIND_MOUNTS.values())


def _mountpoints_do(n: Node) -> None:
    """The bind mounts need their mount points on the host's filesystem; those that did not
    exist are made and listed, so that ``down`` removes exactly those."""
    made = []
    for target in BIND_MOUNTS.values():
        path = Path(target)
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for path in reversed(missing):
            path.mkdir()
            made.append(str(path))
    with open(n.p("made-mountpoints"), "a") as out:
        out.writelines(line + "\n" for line in made)


def _mountpoints_undo(n: Node) -> None:
    listed = n.p("made-mountpoints")
    if not listed.exists():
        return
    left = []   # one that is not empty stops neither the others nor the rest of down
    for line in reversed(listed.read_text().split()):
        try:
            Path(line).rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:   # someone else's files in it (seen: dockerd's /run/containerd/s)
            left.append(f"{line}: {exc.strerror}")
    listed.unlink()
    if left:
        raise OSError("mount points made by the node but not removed: " + "; ".join(left))


def _holder_do(n: Node) -> None:
    start_daemon(["unshare", "--net", "--mount", "--propagation", "slave", "--",
                  "sleep", "infinity"], pidfile=n.pidfile_holder,
                 logfile=n.p("logs", "holder.log"))
    n.wait("the holder's namespaces", lambda: n.holder is not None, 10)


def _holder_undo(n: Node) -> None:
    """End every process left in the node's namespaces (containerd's shims), then the holder:
    with it go the network namespace (bridge, veths, routes, iptables rules) and the mount
    namespace (every bind mount, every container mount)."""
    found = read_pidfile(n.pidfile_holder)
    if found is None:
        n.pidfile_holder.unlink(missing_ok=True)
        return
    pid, started = found
    me = os.getpid()
    for kind in ("mnt", "net"):
        inode = ns_inode(pid, kind)
        if inode is None or inode == ns_inode(me, kind):
            continue
        for other in pids_in_namespace(kind, inode):
            if other not in (pid, me):
                stop_pid(other, timeout=0.0)
    stop_pid(pid, started, timeout=5)
    n.pidfile_holder.unlink(missing_ok=True)


def _same_file(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _mounts_ok(n: Node) -> bool:
    holder = n.holder
    if holder is None:
        return False
    root = Path(f"/proc/{holder}/root")
    binds = all(_same_file(root / target.lstrip("/"), n.p(src))
                for src, target in BIND_MOUNTS.items())
    sysctls = all(_same_file(root / "proc/sys" / key, n.p("sysctl", key.replace("/", ".")))
                  for key in files.KUBELET_SYSCTLS)
    if not n.member.control_plane:
        return binds and sysctls
    try:  # etcd's tmpfs: another device than the directory below it
        etcd = (root / str(n.p("etcd")).lstrip("/")).stat().st_dev != n.p("etcd").stat().st_dev
    except OSError:
        etcd = False
    return binds and sysctls and etcd


def _mounts_do(n: Node) -> None:
    """Inside the node's mount namespace only: the bind mounts over the hard-coded paths, a
    file with the kubelet's own value over each global sysctl it would write (the host's
    values are never touched), and on node 1 a tmpfs for etcd's data (fsync on a busy disk is
    slow)."""
    for src, target in BIND_MOUNTS.items():
        n.ns("mount", "--bind", str(n.p(src)), target)
    for key in files.KUBELET_SYSCTLS:
        n.ns("mount", "--bind", str(n.p("sysctl", key.replace("/", "."))), f"/proc/sys/{key}")
    if n.member.control_plane:
        n.ns("mount", "-t", "tmpfs", "-o", "size=1g,mode=0700", "tmpfs-tlnode-etcd",
             str(n.p("etcd")))


def _network_ok(n: Node) -> bool:
    holder = n.holder
    if holder is None:
        return False
    host_addr = run(["ip", "-o", "-4", "addr", "show", "dev", VETH_HOST], check=False).stdout
    host_route = run(["ip", "-4", "route", "show", POD_CIDR], check=False).stdout
    inside = n.ns("ip", "-o", "-4", "addr", "show", "dev", VETH_NODE, check=False).stdout
    routes = n.ns("ip", "-4", "route", "show", SERVICE_CIDR, check=False).stdout
    return (f"{HOST_ADDR}/30" in host_addr and f"via {NODE_ADDR}" in host_route
            and f"{NODE_ADDR}/30" in inside and VETH_NODE in routes)


def _network_do(n: Node) -> None:
    """A veth pair: the host end (10.250.0.1/30) stays, the node end (10.250.0.2/30) moves into
    the node's namespace. Inside: lo up, a route for the ClusterIP range (a locally started
    connection to a ClusterIP needs one before kube-proxy's DNAT), no default route. On the
    host: the pods' range via the node."""
    holder = n.need_holder()
    run(["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NODE])
    run(["ip", "link", "set", VETH_NODE, "netns", str(holder)])
    run(["ip", "addr", "add", f"{HOST_ADDR}/30", "dev", VETH_HOST])
    run(["ip", "link", "set", VETH_HOST, "up"])
    n.ns("ip", "link", "set", "lo", "up")
    n.ns("ip", "addr", "add", f"{NODE_ADDR}/30", "dev", VETH_NODE)
    n.ns("ip", "link", "set", VETH_NODE, "up")
    n.ns("ip", "route", "add", SERVICE_CIDR, "dev", VETH_NODE)
    run(["ip", "route", "add", POD_CIDR, "via", NODE_ADDR, "dev", VETH_HOST])


def _network_undo(n: Node) -> None:
    # Deleting the host end deletes the pair (and its address and the route through it).
    if run(["ip", "link", "show", VETH_HOST], check=False).returncode == 0:
        run(["ip", "link", "del", VETH_HOST])


def _link_ok(n: Node) -> bool:
    """A joined node's link to node 1, its addresses and the routes through node 1."""
    m, first = n.member, n.other(1)
    if n.holder is None or first.holder is None:
        return False
    outer = first.ns("ip", "-o", "-4", "addr", "show", "dev", m.link_outer, check=False).stdout
    to_pods = first.ns("ip", "-4", "route", "show", m.pod_cidr, check=False).stdout
    inner = n.ns("ip", "-o", "-4", "addr", "show", "dev", m.link_inner, check=False).stdout
    to_cluster = n.ns("ip", "-4", "route", "show", CLUSTER_CIDR, check=False).stdout
    from_host = run(["ip", "-4", "route", "show", m.pod_cidr], check=False).stdout
    return (f"{m.gateway}/30" in outer and f"via {m.addr}" in to_pods
            and f"{m.addr}/30" in inner and f"via {m.gateway}" in to_cluster
            and f"via {NODE_ADDR}" in from_host)


def _link_do(n: Node) -> None:
    """A veth pair between node 1's network namespace and this node's: node 1 routes. Node 1:
    this node's pod range via its address. This node: the other nodes' pods, the links (node
    1's address, the API server's; the host) via node 1, the ClusterIP range on its link (as
    node 1's). The host: this node's pod range via node 1, as node 1's own. Forwarding on in
    both namespaces (their own sysctl, not the host's)."""
    m, first = n.member, n.other(1)
    holder, first_holder = n.need_holder(), first.need_holder()
    run(["ip", "link", "add", m.link_outer, "type", "veth", "peer", "name", m.link_inner])
    run(["ip", "link", "set", m.link_outer, "netns", str(first_holder)])
    run(["ip", "link", "set", m.link_inner, "netns", str(holder)])
    first.ns("ip", "addr", "add", f"{m.gateway}/30", "dev", m.link_outer)
    first.ns("ip", "link", "set", m.link_outer, "up")
    first.ns("sysctl", "-qw", "net.ipv4.ip_forward=1")
    first.ns("ip", "route", "replace", m.pod_cidr, "via", m.addr, "dev", m.link_outer)
    n.ns("ip", "link", "set", "lo", "up")
    n.ns("ip", "addr", "add", f"{m.addr}/30", "dev", m.link_inner)
    n.ns("ip", "link", "set", m.link_inner, "up")
    n.ns("sysctl", "-qw", "net.ipv4.ip_forward=1")
    n.ns("ip", "route", "add", CLUSTER_CIDR, "via", m.gateway, "dev", m.link_inner)
    n.ns("ip", "route", "add", LINK_CIDR, "via", m.gateway, "dev", m.link_inner)
    n.ns("ip", "route", "add", SERVICE_CIDR, "dev", m.link_inner)
    run(["ip", "route", "replace", m.pod_cidr, "via", NODE_ADDR, "dev", VETH_HOST])


def _link_undo(n: Node) -> None:
    """The host's route, then the pair from node 1's end (its routes go with it; this node's
    end would go with its holder anyway)."""
    m, first = n.member, n.other(1)
    if run(["ip", "-4", "route", "show", m.pod_cidr], check=False).stdout.strip():
        run(["ip", "route", "del", m.pod_cidr])
    if first.holder is not None and first.ns("ip", "link", "show", m.link_outer,
                                             check=False).returncode == 0:
        first.ns("ip", "link", "del", m.link_outer)


def _daemon_step(name: str, cmd: Callable[[Node], Sequence[str]], ready: Callable[[Node], bool],
                 timeout: float, undo: Callable[[Node], None] | None = None) -> Step[Node]:
    def do(n: Node) -> None:
        n.stop(name)
        n.daemon(name, cmd(n))
        n.wait(name, lambda: ready(n), timeout, daemon=name)

    return Step(name, check=lambda n: n.daemon_alive(name) and ready(n), do=do,
                undo=undo or (lambda n: n.stop(name)))


def _containerd_ready(n: Node) -> bool:
    return Path(n.containerd_address).is_socket() and run(
        [images.ctr_binary(), "--address", n.containerd_address, "version"], check=False,
        timeout=10).returncode == 0


def _kill_pods(n: Node) -> None:
    """SIGKILL every process in the node's cgroup root (the pods), until none is left."""
    deadline = time.monotonic() + 30
    while pids := host.cgroup_root_procs(n.member.cgroup_root):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods' processes left: {pids[:10]}")
        time.sleep(0.1)


def _containerd_undo(n: Node) -> None:
    _kill_pods(n)
    n.stop("containerd")


def _kubelet_undo(n: Node) -> None:
    n.stop("kubelet")
    _kill_pods(n)


def _archives(n: Node) -> dict[str, Callable[[], Path]]:
    cache = n.lay.cache / "images"

    def pause() -> Path:
        return images.single_binary_archive(n.lay.pause_bin, files.PAUSE_IMAGE,
                                            cache / "pause.tar", entrypoint=["/pause"])

    def coredns() -> Path:
        return images.single_binary_archive(n.lay.coredns_bin, files.COREDNS_IMAGE,
                                            cache / "coredns.tar", entrypoint=["/coredns"])

    def traefik() -> Path:
        return images.single_binary_archive(n.lay.traefik_bin, files.TRAEFIK_IMAGE,
                                            cache / "traefik.tar", entrypoint=["/traefik"])

    return {files.PAUSE_IMAGE: pause, files.COREDNS_IMAGE: coredns, files.TRAEFIK_IMAGE: traefik}


def _system_images_ok(n: Node) -> bool:
    if not n.daemon_alive("containerd"):
        return False
    have = images.ctr_images(n.containerd_address)
    return all(images.ctr_ref(tag) in have for tag in _archives(n))


def _system_images_do(n: Node) -> None:
    for make in _archives(n).values():
        images.ctr_import(n.containerd_address, make())


def _coredns_do(n: Node) -> None:
    n.kubectl("apply", "-f", "-", input=coredns_manifests())
    n.wait("CoreDNS", lambda: n.deployment_ready("kube-system", "coredns"), 180)


def traefik_log_dir(lay: Layout) -> Path:
    """Where Traefik writes its JSON access log, read from the host (the node's state dir)."""
    return lay.path("traefik")


def _traefik_ok(n: Node) -> bool:
    """Ready, and applied from these manifests (their digest on the Deployment), the rollout
    done (an update replaces the pod; the old one is gone)."""
    if not n.deployment_ready("kube-system", "traefik"):
        return False
    out = n.kubectl("-n", "kube-system", "get", "deployment", "traefik", "-o", "json",
                    check=False)
    if out.returncode != 0:
        return False
    info = json.loads(out.stdout)
    status = info.get("status", {})
    return (info["metadata"].get("annotations", {}).get(MANIFEST_ANNOTATION) ==
            manifest_digest(traefik_log_dir(n.lay))
            and status.get("observedGeneration") == info["metadata"].get("generation")
            and status.get("updatedReplicas") == status.get("replicas") == 1)


def _traefik_do(n: Node) -> None:
    """Apply (or re-apply: the Deployment rolls to a new pod, the node's daemons go on)."""
    log_dir = traefik_log_dir(n.lay)
    log_dir.mkdir(mode=0o755, exist_ok=True)
    n.kubectl("apply", "-f", "-", input=traefik_manifests(log_dir))
    n.kubectl("-n", "kube-system", "rollout", "status", "deployment/traefik", "--timeout=180s",
              timeout=200)
    n.wait("Traefik", lambda: _traefik_ok(n), 180)


def _metrics_api_ok(n: Node) -> bool:
    """The APIService ``v1beta1.metrics.k8s.io`` Available: the API server reaches
    metrics-server and metrics-server answers it."""
    if not n.api_ready():
        return False
    out = n.kubectl("get", "apiservice", METRICS_APISERVICE, "-o",
                    'jsonpath={.status.conditions[?(@.type=="Available")].status}',
                    check=False).stdout
    return out.strip() == "True"


def _metrics_server_ok(n: Node) -> bool:
    return (n.daemon_alive("metrics-server") and n.listening(METRICS_SERVER_PORT)
            and _metrics_api_ok(n))


def _metrics_server_do(n: Node) -> None:
    """metrics-server's API objects applied (its rights first: it reads the front proxy's CA
    from kube-system as it starts; the Service and EndpointSlice naming the node's address,
    the APIService), then metrics-server started in node 1's namespaces."""
    bundle = base64.b64encode(n.p("pki", "ca.crt").read_bytes()).decode()
    n.kubectl("apply", "-f", "-", input=metrics_server_manifests(bundle))
    n.stop("metrics-server")
    n.daemon("metrics-server", daemons.metrics_server_cmd(n))
    n.wait("metrics-server", lambda: n.listening(METRICS_SERVER_PORT), 60,
           daemon="metrics-server")
    n.wait("the metrics API", lambda: _metrics_api_ok(n), 120, daemon="metrics-server")


def _cgroup_root_undo(n: Node) -> None:
    _kill_pods(n)
    host.remove_cgroup_root(n.member.cgroup_root)


def _ready(port: int) -> Callable[[Node], bool]:
    return lambda n: n.listening(port)


# The steps every node has (node 1's, and each joined node's on that node).
STATE = Step("state directory", _state_ok, _state_do, _state_undo)
CONFIGS = Step("config files", _configs_ok, _configs_do)
CGROUP_ROOT_STEP = Step("cgroup root", lambda n: host.cgroup_root_ready(n.member.cgroup_root),
                        lambda n: host.make_cgroup_root(n.member.cgroup_root), _cgroup_root_undo,
                        update=True)
HOLDER = Step("holder", lambda n: n.holder is not None, _holder_do, _holder_undo)
MOUNTS = Step("mounts", _mounts_ok, _mounts_do)
CONTAINERD = _daemon_step("containerd", daemons.containerd_cmd, _containerd_ready, 60,
                          _containerd_undo)
SYSTEM_IMAGES = Step("system images", _system_images_ok, _system_images_do)
KUBELET = _daemon_step("kubelet", daemons.kubelet_cmd, Node.node_ready, 180, _kubelet_undo)
KUBE_PROXY = _daemon_step("kube-proxy", daemons.proxy_cmd, _ready(10256), 60)

STEPS: list[Step[Node]] = [
    Step("build kubernetes", check=lambda n: (n.lay.kube_bin / ".complete").exists(),
         do=lambda n: None if build.build_kubernetes(n.lay, n.log) else None),
    Step("build containerd", check=lambda n: (n.lay.containerd_dir / ".complete").exists(),
         do=lambda n: None if build.build_containerd(n.lay, n.log) else None),
    Step("build runc", check=lambda n: (n.lay.runc_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_runc(n.lay, n.log) else None),
    Step("build coredns", check=lambda n: (n.lay.coredns_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_coredns(n.lay, n.log) else None),
    Step("build pause", check=lambda n: (n.lay.pause_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_pause(n.lay, n.log) else None),
    Step("build traefik", check=lambda n: (n.lay.traefik_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_traefik(n.lay, n.log) else None),
    Step("build metrics-server",
         check=lambda n: (n.lay.metrics_server_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_metrics_server(n.lay, n.log) else None),
    STATE,
    Step("certificates", lambda n: pki.pki_complete(n.p("pki")),
         lambda n: pki.make_pki(n.p("pki"))),
    CONFIGS,
    CGROUP_ROOT_STEP,
    Step("mount points", _mountpoints_ok, _mountpoints_do, _mountpoints_undo),
    HOLDER,
    MOUNTS,
    Step("network", _network_ok, _network_do, _network_undo),
    CONTAINERD,
    SYSTEM_IMAGES,
    _daemon_step("etcd", daemons.etcd_cmd, _ready(2379), 60),
    _daemon_step("kube-apiserver", daemons.apiserver_cmd, Node.api_ready, 180),
    _daemon_step("kube-controller-manager", daemons.controller_manager_cmd, _ready(10257), 120),
    _daemon_step("kube-scheduler", daemons.scheduler_cmd, _ready(10259), 120),
    KUBELET,
    KUBE_PROXY,
    Step("metrics-server", _metrics_server_ok, _metrics_server_do,
         lambda n: n.stop("metrics-server")),
    Step("coredns", lambda n: n.deployment_ready("kube-system", "coredns"), _coredns_do,
         update=True),
    Step("traefik", _traefik_ok, _traefik_do, update=True),
]

# A node joined to node 1: node 1 built everything and made the mount points; its certificates
# are signed by node 1's CA; its link goes to node 1's namespace.
JOINING_STEPS: list[Step[Node]] = [
    STATE,
    Step("certificates", lambda n: pki.pki_complete(n.p("pki"), pki.joining_certs(n.member),
                                                    ca=False),
         lambda n: pki.join_pki(n.other(1).p("pki"), n.p("pki"), pki.joining_certs(n.member))),
    CONFIGS,
    CGROUP_ROOT_STEP,
    HOLDER,
    MOUNTS,
    Step("link to node 1", _link_ok, _link_do, _link_undo),
    CONTAINERD,
    SYSTEM_IMAGES,
    KUBELET,
    KUBE_PROXY,
]


def steps(index: int) -> list[Step[Node]]:
    """Node ``index``'s steps: node 1's make the cluster, the others' join it."""
    return STEPS if member(index).control_plane else JOINING_STEPS


# --- the commands -------------------------------------------------------------------------

def is_up(node: Node) -> bool:
    return not pending(STEPS, node)


def reusable(node: Node) -> bool:
    """Up, or up but for steps that ``up`` does in place on the running node (a changed
    add-on): its holder lives and only ``update`` steps are pending."""
    return node.holder is not None and updatable(STEPS, node) is not None


def leftovers(node: Node) -> list[str]:
    """What of a node exists on the host (empty: nothing; the builds do not count); for node 1,
    of every node joined to it too."""
    m = node.member
    out = []
    if node.home.exists():
        out.append(f"state directory {node.home}")
    if node.holder is not None:
        out.append(f"{m.name}'s holder pid {node.holder}")
    if m.control_plane and run(["ip", "link", "show", VETH_HOST], check=False).returncode == 0:
        out.append(f"link {VETH_HOST}")
    if not m.control_plane and run(["ip", "-4", "route", "show", m.pod_cidr],
                                   check=False).stdout.strip():
        out.append(f"route {m.pod_cidr}")
    out += [f"cgroup {p}" for p in host.cgroup_root_paths(m.cgroup_root) if p.exists()]
    if m.control_plane:
        for index in range(2, MAX_NODES + 1):
            out += leftovers(node.other(index))
    return out


def joined(lay: Layout) -> list[Node]:
    """The nodes joined to node 1 of which anything is on the host, in the order they joined."""
    first = Node(lay, lambda _: None)
    return [n for n in (first.other(i) for i in range(2, MAX_NODES + 1)) if leftovers(n)]


def shell_exports(lay: Layout) -> str:
    return (f"export KUBECONFIG={lay.kubeconfig}\n"
            f"export PATH={lay.kube_bin}:$PATH\n")


@contextmanager
def _locked(lay: Layout) -> Iterator[None]:
    """One ``up`` or ``down`` at a time on this host (a lock file in the build cache)."""
    lay.cache.mkdir(parents=True, exist_ok=True)
    with open(lay.cache / ".node.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up(lay: Layout | None = None, log: Log = print, nodes: int = 1) -> Node:
    """Node 1 up, and nodes 2 to ``nodes`` joined to it; return node 1. Nodes already joined
    beyond ``nodes`` are left as they are (``down`` takes them down)."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes: 1 to {MAX_NODES}, not {nodes}")
    node = Node(lay or layout(), log)
    _require_root()
    if host.cgroup_v1():
        log(files.FAIL_CGROUP_V1_NOTE)
    with _locked(node.lay):
        _up(node, log)
        for index in range(2, nodes + 1):
            _join(node.other(index), log)
        return node


def _join(node: Node, log: Log) -> None:
    name = node.member.name
    if not pending(JOINING_STEPS, node):
        log(f"{name} already up: reused")
        return
    if leftovers(node):
        log(f"a half-started {name} is here: cleaning it first")
        run_down(JOINING_STEPS, node, log)
    log(f"{name} joins {node.other(1).member.name}")
    t0 = time.monotonic()
    node.timings = run_up(JOINING_STEPS, node, log)
    log(f"{name} up in {time.monotonic() - t0:.1f} s")


def _up(node: Node, log: Log) -> Node:
    if is_up(node):
        log("node already up: reused")
        return node
    if node.holder is not None and (names := updatable(STEPS, node)):
        log("node up: updating " + ", ".join(names) + " in place")
        node.timings = run_up(STEPS, node, log)
        return node
    if leftovers(node):
        log("a half-started node is here: cleaning it first")
        _down(node, log)
    t0 = time.monotonic()
    node.timings = run_up(STEPS, node, log)
    node.timings["total"] = time.monotonic() - t0
    log(f"node up in {node.timings['total']:.1f} s")
    return node


def down(lay: Layout | None = None, log: Log = print) -> dict[str, float]:
    node = Node(lay or layout(), log)
    _require_root()
    with _locked(node.lay):
        return _down(node, log)


def leave(lay: Layout | None = None, index: int = 2, log: Log = print) -> None:
    """Node ``index`` (not 1) down, node 1 and the others left running."""
    node = Node(lay or layout(), log).other(index)
    if node.member.control_plane:
        raise ValueError("node 1 holds the control plane: down takes it down with the rest")
    _require_root()
    with _locked(node.lay):
        run_down(JOINING_STEPS, node, log)
        # its Node object too: the API server would keep a NotReady node, and its pods
        node.kubectl("delete", "node", node.member.name, "--ignore-not-found", "--wait=false",
                     check=False)
        left = leftovers(node)
        if left:
            raise RuntimeError(f"after {node.member.name} left, still here: " + ", ".join(left))


def _down(node: Node, log: Log) -> dict[str, float]:
    t0 = time.monotonic()
    for other in reversed(joined(node.lay)):
        log(f"{other.member.name} down")
        try:
            run_down(JOINING_STEPS, other, log)
        except RuntimeError as exc:   # node 1 goes down all the same; leftovers() names it
            log(str(exc))
    seconds = run_down(STEPS, node, log)
    seconds["total"] = time.monotonic() - t0
    slow = {name: s for name, s in seconds.items() if s >= 1.0 and name != "total"}
    if slow:
        log("teardown: " + ", ".join(f"{name} {s:.1f} s" for name, s in slow.items()))
    left = leftovers(node)
    if left:
        raise RuntimeError("after down, still here: " + ", ".join(left))
    return seconds


def status(lay: Layout | None = None) -> dict[str, object]:
    node = Node(lay or layout(), lambda _: None)
    todo = pending(STEPS, node)
    pids = {}
    for pidfile in sorted(node.p("pids").glob("*.pid")) if node.p("pids").is_dir() else []:
        found = read_pidfile(pidfile)
        pids[pidfile.stem] = found[0] if found else None
    others = {n.member.name: {"up": not pending(JOINING_STEPS, n),
                              "pending": pending(JOINING_STEPS, n)}
              for n in joined(node.lay)}
    return {"up": not todo, "pending": todo, "pids": pids, "leftovers": leftovers(node),
            "kubeconfig": str(node.lay.kubeconfig), "joined": others}


def build_project_images(lay: Layout, log: Log = print,
                         root: Path | None = None) -> dict[str, float]:
    """Build the project's service and client images and the agent's image (no node): what
    a start then finds in Docker's cache; return the seconds of each part."""
    from kubenode import project_images, recorder

    root = root or Path(__file__).resolve().parent.parent
    with project_images.docker_engine(log):
        seconds = project_images.build_project_images(root, log)
        t0 = time.monotonic()
        recorder.build_agent_image(lay, root, log)
        seconds["agent"] = time.monotonic() - t0
    return seconds


def load_project_images(lay: Layout | None = None, log: Log = print,
                        root: Path | None = None) -> dict[str, float]:
    """Build the project's service and client images and import them into the running node
    (into each node's containerd)."""
    from kubenode import project_images

    node = Node(lay or layout(), log)
    if not node.daemon_alive("containerd"):
        raise RuntimeError("the node is not up (make kube-node)")
    root = root or Path(__file__).resolve().parent.parent
    tags = [project_images.SERVICE_IMAGE, project_images.CLIENT_IMAGE]
    # The Docker engine may be shared: one that another user stops mid-way is started again
    # (by docker_engine, which then stops its own by pid) and the work redone from its cache.
    for attempt in range(3):
        try:
            with project_images.docker_engine(log):
                seconds = project_images.build_project_images(root, log)
                t0 = time.monotonic()
                for address in containerd_addresses(node.lay):
                    project_images.import_images(address, tags, log)
                seconds["import"] = time.monotonic() - t0
                return seconds
        except RuntimeError:
            if attempt == 2 or project_images.engine_answers():
                raise
            log("the Docker engine went away: again")
    raise AssertionError("unreachable")


KUBELET_HEALTHZ = 10248   # the kubelet's default healthz port (127.0.0.1, its node's netns)


def cpu_manager_policy(lay: Layout | None = None, index: int = 2, policy: str = "static",
                       log: Log = print) -> None:
    """Node ``index``'s kubelet restarted with the CPU manager ``policy`` (``static``: 100m,
    so CPU 0, reserved, exclusive CPUs for Guaranteed integer-CPU containers; ``none``: the node's
    default), its ``cpu_manager_state`` removed first (the kubelet refuses a state file of
    another policy); returns once it serves again and its node is Ready. Only where a test
    asks, and put back by it (``none``): the other tests run under the default."""
    if policy not in ("static", "none"):
        raise ValueError(f"a CPU manager policy is static or none, not {policy!r}")
    lay = lay or layout()
    n = Node(lay, log, member=member(index))
    if not n.daemon_alive("kubelet"):
        raise RuntimeError(f"node {n.member.name}'s kubelet is not running")
    n.stop("kubelet")
    n.wait("the kubelet stopped", lambda: not n.listening(KUBELET_HEALTHZ), 30)
    n.p("mnt", "var-lib-kubelet", "cpu_manager_state").unlink(missing_ok=True)
    n.p("kubelet.json").write_text(files.kubelet_config(lay, n.member,
                                                        cgroup_v1=host.cgroup_v1(),
                                                        static_cpus=policy == "static"))
    n.daemon("kubelet", daemons.kubelet_cmd(n))
    n.wait("the kubelet", lambda: n.listening(KUBELET_HEALTHZ) and n.node_ready(), 180,
           daemon="kubelet")
    log(f"[kubenode] node {n.member.name}: kubelet restarted with cpuManagerPolicy {policy}")


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the node needs root (namespaces, cgroups, mounts)")


def status_json(lay: Layout | None = None) -> str:
    return json.dumps(status(lay), indent=2)

