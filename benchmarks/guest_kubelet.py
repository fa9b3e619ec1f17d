"""A real kubelet in the cgroup v2 guest (qemu, TCG) on the host's API server: seconds from the
boot to its Node Ready, one pod Running, the pod's ``cpu.max`` read inside.

    flock /tmp/kube.lock flock /tmp/guest.lock .venv/bin/python -m benchmarks.guest_kubelet

The host's node comes up (``kubenode up``) and goes down at the end. The guest (``vng --network
user``, its address set by hand once its NIC shows up, eth0 or enp0s11: DHCP under TCG could start before it; qemu's NAT reaches the API server at the node's address, named in its certificate; the
node's cache given read-only, ``--rodir``, since the guest's /var hides it) runs containerd
(native snapshotter under /tmp, the pause image imported, a bridge CNI) and a kubelet as node
``guest`` (cgroupfs: the guest has no systemd), its client certificate signed by the node's CA.
The pod, the Node object and the guest are removed at the end, also when a stage did not come
within ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.support import BIN, describe_load, keep_record, run_main

if TYPE_CHECKING:
    from kubenode.config import Layout

NAME = "guest"            # the guest's Node
POD = "guest-pause"
POD_CIDR = "10.245.0.0/24"   # the guest's own pods' range (not the cluster's)
GUEST_IP = "10.0.2.15"    # the guest's address on qemu's user network (10.0.2.2: its gateway)
LIMIT_CPU = "200m"        # the pod's CPU limit: cpu.max "20000 100000"
STAGES = ("guest booted", "containerd ready", "pause image imported", "kubelet started",
          "node registered", "node Ready", "pod Running", "cpu.max read")


def _guest_files(share: Path, lay: Layout) -> None:
    """The guest's configuration in the share: containerd's, the CNI's, the kubelet's, its
    kubeconfig, and the script the guest runs."""
    from kubenode.config import API_PORT, NODE_ADDR
    from kubenode.files import PAUSE_IMAGE
    from kubenode.pki import Cert, join_pki

    join_pki(lay.state / "pki", share / "pki",
             (Cert("kubelet", f"/O=system:nodes/CN=system:node:{NAME}"),))
    base = Path("/tmp/gk")
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    images = "plugins.'io.containerd.cri.v1.images'"
    containerd_dir = lay.containerd_dir
    (share / "containerd.toml").write_text(f"""version = 4
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
  snapshotter = "native"
[{images}.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[{runtime}]
  enable_selinux = false
[{runtime}.containerd]
  default_runtime_name = "runc"
[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  runtime_path = "{containerd_dir / 'containerd-shim-runc-v2'}"
[{runtime}.containerd.runtimes.runc.options]
  BinaryName = "{lay.runc_bin}"
  SystemdCgroup = false
[{runtime}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{share / 'cni'}"
""")
    (share / "cni").mkdir()
    (share / "cni" / "10-guest.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": "guest", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                      "dataDir": str(base / "cni")}}]}))
    (share / "resolv.conf").write_text("# no resolver in the guest\n")
    (share / "kubelet.json").write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(share / "pki" / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": f"unix://{base / 'containerd.sock'}",
        "resolvConf": str(share / "resolv.conf"), "failSwapOn": False,
        "podCIDR": POD_CIDR, "maxPods": 10,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
        "fileCheckFrequency": "5s", "syncFrequency": "10s",
        "nodeStatusReportFrequency": "10s", "nodeStatusUpdateFrequency": "10s"}, indent=2))
    pki = share / "pki"
    (share / "kubelet.kubeconfig").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": f"https://{NODE_ADDR}:{API_PORT}",
                                               "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "k", "user": {"client-certificate": str(pki / "kubelet.crt"),
                                         "client-key": str(pki / "kubelet.key")}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "k"}}],
        "current-context": "t"}))
    kube_bin = lay.kube_bin
    ctr = shlex.join([str(containerd_dir / "ctr"), "--address", str(base / "containerd.sock")])
    s = shlex.quote(str(share))
    cache_dir = lay.cache
    (share / "guest.sh").write_text(f"""#!/bin/sh
touch {s}/booted
mkdir -p {base} /var/lib/kubelet
modprobe virtio_net; n=0   # its name: eth0 or enp0s<slot>, as udev renames it or not
until NIC=$(ls /sys/class/net | grep -v '^lo$' | head -1); [ -n "$NIC" ] || [ $n -ge 120 ]; do
  sleep 0.5; n=$((n+1)); done
ip link set "$NIC" up && ip addr add {GUEST_IP}/24 dev "$NIC" && ip route add default via 10.0.2.2
ip -o -4 addr > {s}/addr.txt 2>&1; ip route >> {s}/addr.txt 2>&1
modprobe bridge; modprobe veth
echo "+cpu +memory +pids +cpuset +io" > /sys/fs/cgroup/cgroup.subtree_control 2>{s}/subtree.err
{shlex.quote(str(containerd_dir / 'containerd'))} --config {s}/containerd.toml \
  > {s}/containerd.log 2>&1 &
CONTAINERD=$!
until {ctr} version > /dev/null 2>&1; do sleep 1; done
touch {s}/containerd_ready
{ctr} -n k8s.io images import {shlex.quote(str(cache_dir / 'images' / 'pause.tar'))} \
  > {s}/import.log 2>&1
touch {s}/imported
{shlex.quote(str(kube_bin / 'kubelet'))} --config {s}/kubelet.json \
  --kubeconfig {s}/kubelet.kubeconfig --hostname-override {NAME} --node-ip {GUEST_IP} \
  > {s}/kubelet.log 2>&1 &
KUBELET=$!
touch {s}/kubelet_started
while [ ! -e {s}/stop ]; do
  for f in $(find /sys/fs/cgroup/kubepods* -name cpu.max 2>/dev/null); do
    echo "$f $(cat $f)"; done > {s}/cpu_max.tmp; mv {s}/cpu_max.tmp {s}/cpu_max.txt
  sleep 3
done
kill $KUBELET; sleep 2; kill $CONTAINERD
""")


def _kernel(boot: Path = Path("/boot")) -> Path | None:
    """The newest ``vmlinuz-<version>`` in /boot, as tests/guest.py boots."""
    kernels = sorted(boot.glob("vmlinuz-*"),
                     key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)])
    return kernels[-1] if kernels else None


def _missing() -> str | None:
    """Why the guest cannot boot here (None: it can)."""
    kernel = _kernel()
    if not (BIN / "vng").exists():
        return "virtme-ng (vng) is not installed in the venv (pip install -e '.[test]')"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (scripts/install-system-deps.sh)"
    if kernel is None or not os.access(kernel, os.R_OK):
        return "no readable kernel in /boot (linux-image-amd64; root)"
    return None


def _age(path: Path, start_wall: float) -> float | None:
    """When the guest made ``path`` (the share's server stamps it on the host's clock)."""
    return path.stat().st_mtime - start_wall if path.exists() else None


def _node_state(kubectl: Sequence[str]) -> tuple[bool, bool]:
    """(registered, Ready) for the guest's Node, seen from the host."""
    out = subprocess.run([*kubectl, "get", "node", NAME, "-o", "json"], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        return False, False
    conditions = json.loads(out.stdout).get("status", {}).get("conditions", [])
    return True, any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _pod(kubectl: Sequence[str]) -> dict[str, object]:
    out = subprocess.run([*kubectl, "get", "pod", POD, "-o", "json"], capture_output=True,
                         text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds of guest time before giving up (default 600)")
    args = parser.parse_args(argv)
    from kubenode import node
    from kubenode.config import layout

    missing = _missing()
    if missing:
        print(f"guest_kubelet: {missing}")
        return 2
    lay = layout()
    print(describe_load("before"))
    up_start = time.monotonic()
    node.up(lay, log=lambda line: None)
    print(f"host node up: {time.monotonic() - up_start:.0f} s")
    kubectl = [str(lay.kube_bin / "kubectl"), "--kubeconfig", str(lay.kubeconfig)]
    share = Path(tempfile.mkdtemp(prefix="guest-kubelet-", dir="/tmp"))
    times: dict[str, float | None] = {stage: None for stage in STAGES}
    proc = None
    blocked = ""
    cpu_max: dict[str, str] = {}
    try:
        _guest_files(share, lay)
        kernel = _kernel()
        argv_ = [str(BIN / "vng"), "--run", str(kernel), "--force-9p", "--disable-kvm",
                 "--cpus", "2", "--memory", "2G", "--user", "root", "--network", "user", "--no-dhcp",
                 f"--rodir={lay.cache}", f"--rwdir={share}", "--exec", f"sh {share / 'guest.sh'}"]
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        start_wall, start = time.time(), time.monotonic()
        proc = subprocess.Popen(argv_, env=env, stdin=subprocess.DEVNULL,
                                stdout=open(share / "vng.log", "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        pod_made = False
        container, pod_uid, running_wall = "", "", 0.0
        while time.monotonic() - start < args.limit and proc.poll() is None:
            for stage, marker in (("guest booted", "booted"),
                                  ("containerd ready", "containerd_ready"),
                                  ("pause image imported", "imported"),
                                  ("kubelet started", "kubelet_started")):
                if times[stage] is None:
                    times[stage] = _age(share / marker, start_wall)
            if times["kubelet started"] is not None and times["node Ready"] is None:
                registered, ready = _node_state(kubectl)
                now = time.monotonic() - start
                if registered and times["node registered"] is None:
                    times["node registered"] = now
                if ready:
                    times["node Ready"] = now
            if times["node registered"] is not None and not pod_made:
                subprocess.run([*kubectl, "apply", "-f", "-"], check=True, text=True,
                               capture_output=True, timeout=60, input=json.dumps({
                                   "apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": POD, "namespace": "default"},
                                   "spec": {"nodeName": NAME, "containers": [{
                                       "name": "pause", "image": "throttle-lab-pause:3.10.1",
                                       "imagePullPolicy": "Never",
                                       "resources": {"limits": {"cpu": LIMIT_CPU,
                                                                "memory": "32Mi"}}}],
                                       "tolerations": [{"operator": "Exists"}]}}))
                pod_made = True
            if pod_made and times["pod Running"] is None:
                status = _pod(kubectl).get("status", {})
                assert isinstance(status, dict)
                if status.get("phase") == "Running":
                    times["pod Running"] = time.monotonic() - start
                    running_wall = time.time()
                    pod_uid = str(_pod(kubectl)["metadata"]["uid"])  # type: ignore[index]
                    container = status["containerStatuses"][0]["containerID"].split("//")[-1]
            dump = share / "cpu_max.txt"
            # a dump the guest wrote after the pod was Running (runc makes the group, then
            # writes its cpu.max: a dump from between reads "max")
            if container and dump.exists() and dump.stat().st_mtime > running_wall + 1:
                found = {line.split()[0]: " ".join(line.split()[1:])
                         for line in dump.read_text().splitlines() if pod_uid in line}
                mine = [v for k, v in found.items() if container in k]
                if mine:
                    times["cpu.max read"] = time.monotonic() - start
                    pod_max = next((v for k, v in found.items()
                                    if k.endswith(f"pod{pod_uid}/cpu.max")), "none")
                    cpu_max = {"container": mine[0], "pod": pod_max}
                    print(f"cpu.max in the guest (limit {LIMIT_CPU}): the container's "
                          f"{mine[0]}, the pod's {pod_max}")
                    break
            time.sleep(2)
        guest_s = time.monotonic() - start
        left = [s for s in STAGES if times[s] is None]
        if left:
            blocked = (f"stopped at '{left[0]}' after {guest_s:.0f} s"
                       + (" (the guest exited)" if proc.poll() is not None else ""))
    finally:
        (share / "stop").touch()
        subprocess.run([*kubectl, "delete", "pod", POD, "--force", "--grace-period=0",
                        "--ignore-not-found"], capture_output=True, timeout=60)
        if proc is not None:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        subprocess.run([*kubectl, "delete", "node", NAME, "--ignore-not-found"],
                       capture_output=True, timeout=60)
        node.down(lay, log=lambda line: None)
    if blocked:
        print(f"the guest's files and logs: {share}")
    else:
        shutil.rmtree(share)
    print()
    print("| stage | seconds from the boot |\n|---|---:|")
    for stage in STAGES:
        value = times[stage]
        print(f"| {stage} | {'—' if value is None else f'{value:.0f}'} |")
    print(f"\n{blocked or 'one pod ran in the guest within the limit'} "
          f"(limit {args.limit:.0f} s of guest time)")
    print(describe_load("after"))
    keep_record("guest_kubelet", {"stages_s": times, "limit_s": args.limit, "cpu_max": cpu_max,
                                  "blocked": blocked})
    return 0


if __name__ == "__main__":
    run_main(main)
