"""The node as the steps see it: its places, its processes, and how to ask it things (kubectl,
commands in its namespaces, listening sockets read from /proc). Each node of the cluster
(node 1, or one joined to it) is a :class:`Node` with its :class:`~kubenode.config.Member`."""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from kubenode import host
from kubenode.config import MAX_NODES, Layout, Member, member
from kubenode.proc import read_pidfile, run, start_daemon, stop_pidfile

__all__ = ["Node", "BIND_MOUNTS", "Log", "REFUSALS", "containerd_addresses", "refusal"]

Log = Callable[[str], None]

# What a daemon's log says when it refuses the host, and the one line that says what to do.
REFUSALS = {
    "kubelet is configured to not run on a host using cgroup v1": (
        "the kubelet refuses this host's cgroup v1 (failCgroupV1, true by default from "
        "Kubernetes 1.35 on): give its KubeletConfiguration failCgroupV1: false, as kubenode "
        "does on a v1 host, or run the node on a cgroup v2 host"),
}


def refusal(name: str, log_text: str) -> str | None:
    """The one line for a daemon that exited because it refuses the host (None: another
    reason; its log's last lines say it)."""
    for said, line in REFUSALS.items():
        if said in log_text:
            return f"{name} exited: {line}"
    return None

# The paths that the kubelet, containerd and the CNI plugins hard-code: inside the node's mount
# namespace each is a bind mount of a directory of the node's own (state dir -> path).
BIND_MOUNTS = {
    "mnt/var-lib-kubelet": "/var/lib/kubelet",
    "mnt/var-lib-cni": "/var/lib/cni",
    "mnt/var-log": "/var/log",
    "mnt/run-containerd": "/run/containerd",
    "mnt/run-netns": "/run/netns",
}


@dataclass
class Node:
    lay: Layout
    log: Log = print
    timings: dict[str, float] = field(default_factory=dict)
    member: Member = field(default_factory=lambda: member(1))

    # --- places ---------------------------------------------------------------------------
    @property
    def home(self) -> Path:
        return self.member.home(self.lay)

    def p(self, *parts: str) -> Path:
        return self.home.joinpath(*parts)

    def other(self, index: int) -> "Node":
        """Node ``index`` of the same cluster (node 1: the control plane's)."""
        return Node(self.lay, self.log, member=member(index))

    @property
    def pidfile_holder(self) -> Path:
        return self.p("pids", "holder.pid")

    @property
    def holder(self) -> int | None:
        return host.holder_pid(self.pidfile_holder)

    def need_holder(self) -> int:
        pid = self.holder
        if pid is None:
            raise RuntimeError(f"{self.member.name}'s holder process is not running")
        return pid

    @property
    def containerd_address(self) -> str:
        return str(self.p("containerd", "containerd.sock"))

    def bin(self, name: str) -> str:
        return str(self.lay.kube_bin / name)

    # --- helpers --------------------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        return run([self.bin("kubectl"), "--kubeconfig", str(self.lay.kubeconfig), *args],
                   check=check, timeout=timeout, input=input)

    def ns(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([*host.nsenter(self.need_holder()), *cmd], check=check)

    def daemon(self, name: str, cmd: Sequence[str]) -> None:
        start_daemon([*host.nsenter(self.need_holder()), *cmd],
                     pidfile=self.p("pids", f"{name}.pid"), logfile=self.p("logs", f"{name}.log"))

    def daemon_alive(self, name: str) -> bool:
        return read_pidfile(self.p("pids", f"{name}.pid")) is not None

    def stop(self, name: str, timeout: float = 20.0) -> None:
        stop_pidfile(self.p("pids", f"{name}.pid"), timeout=timeout)

    def listening(self, port: int) -> bool:
        """A TCP socket in LISTEN on ``port`` in the node's network namespace (read from
        /proc/<holder>/net/tcp{,6}: no packet sent)."""
        holder = self.holder
        if holder is None:
            return False
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{holder}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
        return False

    def wait(self, what: str, ready: Callable[[], bool], timeout: float, *,
             daemon: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if daemon is not None and not self.daemon_alive(daemon):
                raise RuntimeError(refusal(daemon, self.log_tail(daemon, 50))
                                   or f"{daemon} exited: {self.log_tail(daemon)}")
            if time.monotonic() > deadline:
                tail = f": {self.log_tail(daemon)}" if daemon else ""
                raise RuntimeError(f"{what} not ready after {timeout:.0f} s{tail}")
            time.sleep(0.25)

    def log_tail(self, name: str, lines: int = 6) -> str:
        try:
            text = self.p("logs", f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def api_ready(self) -> bool:
        if not self.lay.kubeconfig.exists() or not (self.lay.kube_bin / "kubectl").exists():
            return False
        try:
            return self.kubectl("get", "--raw", "/readyz", check=False,
                                timeout=10).stdout.strip() == "ok"
        except subprocess.TimeoutExpired:
            return False

    def node_ready(self) -> bool:
        if not self.api_ready():
            return False
        out = self.kubectl("get", "node", self.member.name, "-o",
                           'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                           check=False).stdout
        return out.strip() == "True"

    def deployment_ready(self, namespace: str, name: str) -> bool:
        if not self.api_ready():
            return False
        out = self.kubectl("-n", namespace, "get", "deployment", name, "-o",
                           "jsonpath={.status.readyReplicas}/{.spec.replicas}",
                           check=False).stdout.strip()
        ready, _, want = out.partition("/")
        return bool(ready) and ready == want


def containerd_addresses(lay: Layout) -> list[str]:
    """The socket of every node's containerd that runs (node 1's first): where images go."""
    nodes = [Node(lay, member=member(i)) for i in range(1, MAX_NODES + 1)]
    return [n.containerd_address for n in nodes if n.daemon_alive("containerd")]
