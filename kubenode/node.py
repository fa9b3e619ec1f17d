"""The node: its steps (data), and ``up``, ``down`` and ``status`` over them.

``make kube-node``/``make kube-down``, ``python -m kubenode`` and the tests' session fixture all
call :func:`up` and :func:`down` here. ``up`` reuses a node whose every step checks out, cleans a
half-started one first, then runs the steps; ``down`` runs every undo (reverse order), stopping
each process by its pid, and removes what the node made on the host.
"""
from __future__ import annotations

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
from kubenode.addons import coredns_manifests
from kubenode.config import (HOST_ADDR, NODE_ADDR, POD_CIDR, SERVICE_CIDR, VETH_HOST, VETH_NODE,
                             Layout, layout)
from kubenode.context import BIND_MOUNTS, Log, Node
from kubenode.proc import ns_inode, pids_in_namespace, read_pidfile, run, start_daemon, stop_pid
from kubenode.steps import Step, pending, run_down, run_up, updatable
from kubenode.traefik import MANIFEST_ANNOTATION, manifest_digest, traefik_manifests

__all__ = ["Node", "STEPS", "up", "down", "status", "shell_exports", "is_up", "reusable",
           "leftovers",
           "load_project_images", "status_json", "traefik_log_dir"]

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
    if not n.lay.state.exists():
        return
    if host.holder_pid(n.pidfile_holder) is not None:
        raise RuntimeError("the holder still runs; state directory kept")
    shutil.rmtree(n.lay.state)


KUBECONFIGS = ("admin", "kubelet", "controller-manager", "scheduler", "kube-proxy")


def _config_files(n: Node) -> dict[Path, str]:
    out = {n.p(f"{user}.kubeconfig"): files.kubeconfig(n.lay, user) for user in KUBECONFIGS}
    out[n.p("containerd", "config.toml")] = files.containerd_toml(n.lay)
    out[n.p("kubelet.json")] = files.kubelet_config(n.lay)
    out[n.p("kube-proxy.json")] = files.kube_proxy_config(n.lay)
    out[n.p("cni", "net.d", "10-throttle-lab.conflist")] = files.cni_conflist()
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
    try:  # etcd's tmpfs: another device than the directory below it
        etcd = (root / str(n.p("etcd")).lstrip("/")).stat().st_dev != n.p("etcd").stat().st_dev
    except OSError:
        etcd = False
    return binds and sysctls and etcd


def _mounts_do(n: Node) -> None:
    """Inside the node's mount namespace only: the bind mounts over the hard-coded paths, a
    file with the kubelet's own value over each global sysctl it would write (the host's
    values are never touched), and a tmpfs for etcd's data (fsync on a busy disk is slow)."""
    for src, target in BIND_MOUNTS.items():
        n.ns("mount", "--bind", str(n.p(src)), target)
    for key in files.KUBELET_SYSCTLS:
        n.ns("mount", "--bind", str(n.p("sysctl", key.replace("/", "."))), f"/proc/sys/{key}")
    n.ns("mount", "-t", "tmpfs", "-o", "size=1g,mode=0700", "tmpfs-tlnode-etcd", str(n.p("etcd")))


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
        ["ctr", "--address", n.containerd_address, "version"], check=False,
        timeout=10).returncode == 0


def _kill_pods(n: Node) -> None:
    """SIGKILL every process in the node's cgroup root (the pods), until none is left."""
    deadline = time.monotonic() + 30
    while pids := host.cgroup_root_procs():
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


def _image_ref(tag: str) -> str:
    """containerd's name for an imported ``name:tag`` (docker's normalisation)."""
    return tag if "/" in tag.split(":")[0] and "." in tag.split("/")[0] else (
        "docker.io/library/" + tag if "/" not in tag else "docker.io/" + tag)


def _system_images_ok(n: Node) -> bool:
    if not n.daemon_alive("containerd"):
        return False
    have = images.ctr_images(n.containerd_address)
    return all(_image_ref(tag) in have for tag in _archives(n))


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


def _cgroup_root_undo(n: Node) -> None:
    _kill_pods(n)
    host.remove_cgroup_root()


def _ready(port: int) -> Callable[[Node], bool]:
    return lambda n: n.listening(port)


STEPS: list[Step[Node]] = [
    Step("build kubernetes", check=lambda n: (n.lay.kube_bin / ".complete").exists(),
         do=lambda n: None if build.build_kubernetes(n.lay, n.log) else None),
    Step("build coredns", check=lambda n: (n.lay.coredns_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_coredns(n.lay, n.log) else None),
    Step("build pause", check=lambda n: (n.lay.pause_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_pause(n.lay, n.log) else None),
    Step("build traefik", check=lambda n: (n.lay.traefik_bin.parent / ".complete").exists(),
         do=lambda n: None if build.build_traefik(n.lay, n.log) else None),
    Step("state directory", _state_ok, _state_do, _state_undo),
    Step("certificates", lambda n: pki.pki_complete(n.p("pki")),
         lambda n: pki.make_pki(n.p("pki"))),
    Step("config files", _configs_ok, _configs_do),
    Step("cgroup root", lambda n: host.cgroup_root_ready(), lambda n: host.make_cgroup_root(),
         _cgroup_root_undo, update=True),
    Step("mount points", _mountpoints_ok, _mountpoints_do, _mountpoints_undo),
    Step("holder", lambda n: n.holder is not None, _holder_do, _holder_undo),
    Step("mounts", _mounts_ok, _mounts_do),
    Step("network", _network_ok, _network_do, _network_undo),
    _daemon_step("containerd", daemons.containerd_cmd, _containerd_ready, 60, _containerd_undo),
    Step("system images", _system_images_ok, _system_images_do),
    _daemon_step("etcd", daemons.etcd_cmd, _ready(2379), 60),
    _daemon_step("kube-apiserver", daemons.apiserver_cmd, Node.api_ready, 180),
    _daemon_step("kube-controller-manager", daemons.controller_manager_cmd, _ready(10257), 120),
    _daemon_step("kube-scheduler", daemons.scheduler_cmd, _ready(10259), 120),
    _daemon_step("kubelet", daemons.kubelet_cmd, Node.node_ready, 180, _kubelet_undo),
    _daemon_step("kube-proxy", daemons.proxy_cmd, _ready(10256), 60),
    Step("coredns", lambda n: n.deployment_ready("kube-system", "coredns"), _coredns_do,
         update=True),
    Step("traefik", _traefik_ok, _traefik_do, update=True),
]


# --- the commands -------------------------------------------------------------------------

def is_up(node: Node) -> bool:
    return not pending(STEPS, node)


def reusable(node: Node) -> bool:
    """Up, or up but for steps that ``up`` does in place on the running node (a changed
    add-on): its holder lives and only ``update`` steps are pending."""
    return node.holder is not None and updatable(STEPS, node) is not None


def leftovers(node: Node) -> list[str]:
    """What of a node exists on the host (empty: nothing; the builds do not count)."""
    out = []
    if node.lay.state.exists():
        out.append(f"state directory {node.lay.state}")
    if node.holder is not None:
        out.append(f"holder pid {node.holder}")
    if run(["ip", "link", "show", VETH_HOST], check=False).returncode == 0:
        out.append(f"link {VETH_HOST}")
    out += [f"cgroup {p}" for p in host.cgroup_root_paths() if p.exists()]
    return out


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


def up(lay: Layout | None = None, log: Log = print) -> Node:
    node = Node(lay or layout(), log)
    _require_root()
    with _locked(node.lay):
        return _up(node, log)


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


def _down(node: Node, log: Log) -> dict[str, float]:
    t0 = time.monotonic()
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
    return {"up": not todo, "pending": todo, "pids": pids, "leftovers": leftovers(node),
            "kubeconfig": str(node.lay.kubeconfig)}


def load_project_images(lay: Layout | None = None, log: Log = print,
                        root: Path | None = None) -> dict[str, float]:
    """Build the project's service and client images and import them into the running node."""
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
                project_images.import_images(node.containerd_address, tags, log)
                seconds["import"] = time.monotonic() - t0
                return seconds
        except RuntimeError:
            if attempt == 2 or project_images.engine_answers():
                raise
            log("the Docker engine went away: again")
    raise AssertionError("unreachable")


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the node needs root (namespaces, cgroups, mounts)")


def status_json(lay: Layout | None = None) -> str:
    return json.dumps(status(lay), indent=2)

