"""A real single-node Kubernetes cluster (kubenode: the module `make kube-node` calls), in
namespaces of its own: the node Ready, the host untouched while it runs, the project's
manifests applied (both Deployments Ready, the Job completes and its reports and the pi page
through each Ingress show what issue 33 asks of the demo), and what the kubelet writes into
a pod's groups: a 200m limit is 20000 µs on the pod's group and on its container's, and an
in-place resize moves both to 50000 with no restart.

The node is one per session (fixture ``kube_node`` in conftest.py); on a laptop without root it
skips with the reason, under CI=true it must run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kubenode import node as kubenode
from kubenode.config import CGROUP_ROOT, CONTAINERD_VERSION, KUBE_VERSION, NODE_NAME
from kubenode.demo import STALL_US, pi_line, pi_pages
from kubenode.overlay import write_overlay
from kubenode.traefik import WEB_PORT
from tests.kube import BEFORE, NODE_PATHS, host_view, iptables_lines, shipped_limit, wait_for
from tests.support import ROOT

pytestmark = [pytest.mark.node, pytest.mark.timeout(2400)]

QUOTA_NS = "tl-kube-test"
CPU = Path("/sys/fs/cgroup/cpu")
LIMIT = shipped_limit()    # k8s/deployment-limited.yaml's limits.cpu (100m: 10 ms a period)
# Issue 33's "done when", for the demo as shipped: the limited Deployment's p90 at least
# STALL_MS (a request that meets the end of its quota waits up to period - quota, 90 ms at
# 100m, and with ~5 ms requests every other one does: the p90 is one of those; a busy machine
# only adds to it). The limitless one's latency moves with the machine: its report carries no
# throttling (benchmarks/two_quotas.py and docs/benchmarks.md have its p90).
STALL_MS = STALL_US / 1000


@pytest.fixture(scope="module")
def images(kube_node: kubenode.Node) -> dict[str, float]:
    """The project's service and client images in the node (built from docker/Dockerfile)."""
    seconds = kubenode.load_project_images(kube_node.lay, print, ROOT)
    print("images: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
    return seconds


def kubectl_json(node: kubenode.Node, *args: str) -> dict:  # type: ignore[type-arg]
    return json.loads(node.kubectl(*args, "-o", "json").stdout)


def test_the_node_is_ready_and_reports_the_pinned_version(kube_node: kubenode.Node) -> None:
    info = kubectl_json(kube_node, "get", "node", NODE_NAME)
    ready = {c["type"]: c["status"] for c in info["status"]["conditions"]}["Ready"]
    assert ready == "True"
    assert info["status"]["nodeInfo"]["kubeletVersion"] == KUBE_VERSION
    # the node's own containerd 2 from the cache, not the host's (Docker's)
    assert info["status"]["nodeInfo"]["containerRuntimeVersion"] == \
        f"containerd://{CONTAINERD_VERSION.lstrip('v')}"
    addresses = {a["type"]: a["address"] for a in info["status"]["addresses"]}
    assert addresses["InternalIP"] == "10.250.0.2"
    assert kubenode.is_up(kube_node)


def test_the_host_holds_nothing_of_the_node_while_it_runs(kube_node: kubenode.Node) -> None:
    """kube-proxy's and the CNI's rules exist, but only inside the node's namespace; the host's
    iptables have none, the global sysctls hold the host's values, and the paths the kubelet
    and containerd hard-code are not on the host."""
    view = host_view()
    assert view.iptables == () and iptables_lines() == []
    if BEFORE:  # the host's sysctls as before the node: the kubelet wrote none of them
        assert view.sysctls == BEFORE[0].sysctls
    inside = kube_node.ns("iptables-save").stdout
    assert inside.count("KUBE-") > 10  # the rules are there: this check can fail
    for key, wanted in {"kernel/panic_on_oops": "1", "vm/overcommit_memory": "1"}.items():
        seen_inside = kube_node.ns("cat", f"/proc/sys/{key}").stdout.strip()
        assert seen_inside == wanted  # what the kubelet reads inside
    # The files the kubelet, containerd and the CNI plugins keep under the paths they hard-code
    # (pod dirs, shim sockets, IP leases, pod logs) are inside the node, none on the host.
    holder = kube_node.need_holder()
    for path in NODE_PATHS:
        inside = _files(Path(f"/proc/{holder}/root{path}"))
        assert not inside & _files(Path(path)), path
        if path in ("/var/lib/kubelet", "/var/lib/cni", "/var/log/pods", "/run/containerd"):
            assert inside, f"nothing of the node under {path}: the check above proves nothing"
    host_lo = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True,
                             text=True, check=True).stdout
    assert "10.250." not in host_lo and "10.96." not in host_lo


@pytest.fixture(scope="module")
def quota_namespace(kube_node: kubenode.Node, images: dict[str, float]) -> Iterator[str]:
    kube_node.kubectl("create", "namespace", QUOTA_NS, check=False)
    yield QUOTA_NS
    kube_node.kubectl("delete", "namespace", QUOTA_NS, "--wait=false", check=False)


def _files(root: Path) -> set[str]:
    """Every non-directory below ``root``, relative to it."""
    out = set()
    for dirpath, _, names in os.walk(root):
        out.update(os.path.relpath(os.path.join(dirpath, n), root) for n in names)
    return out


def _quota(path: Path) -> int:
    return int((path / "cpu.cfs_quota_us").read_text())


def test_a_cpu_limit_is_the_quota_of_the_pod_and_its_container_and_resizes_in_place(
        kube_node: kubenode.Node, quota_namespace: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "burn", "namespace": quota_namespace},
           "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
               "name": "burn", "image": "throttle-lab:latest", "imagePullPolicy": "Never",
               "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                             "limits": {"cpu": "200m", "memory": "256Mi"}}}]}}
    kube_node.kubectl("apply", "-f", "-", input=json.dumps(pod))
    kube_node.kubectl("-n", quota_namespace, "wait", "--for=condition=Ready", "pod/burn",
                      "--timeout=180s", timeout=200)
    info = kubectl_json(kube_node, "-n", quota_namespace, "get", "pod", "burn")
    uid = info["metadata"]["uid"]
    cid = info["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    pod_group = CPU / CGROUP_ROOT / "kubepods" / "burstable" / f"pod{uid}"
    container_group = pod_group / cid
    assert _quota(pod_group) == 20000
    assert _quota(container_group) == 20000
    assert (pod_group / "cpu.cfs_period_us").read_text().strip() == "100000"

    kube_node.kubectl("-n", quota_namespace, "patch", "pod", "burn", "--subresource", "resize",
                      "-p", json.dumps({"spec": {"containers": [
                          {"name": "burn", "resources": {"limits": {"cpu": "500m"}}}]}}))
    wait_for("quota 50000 on the pod's and the container's group",
             lambda: _quota(pod_group) == 50000 and _quota(container_group) == 50000, 120)
    after = kubectl_json(kube_node, "-n", quota_namespace, "get", "pod", "burn")
    status = after["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0
    assert status["containerID"].endswith(cid)


@pytest.fixture(scope="module")
def applied(kube_node: kubenode.Node, images: dict[str, float],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubenode.Node]:
    """``k8s/`` applied, through an overlay that only sets the Ingress class of the node's
    controller (Traefik)."""
    overlay = write_overlay(tmp_path_factory.mktemp("overlay"), ROOT / "k8s")
    # a Job's template cannot change, and `make kube-demo` leaves its own (holding its raw data
    # for the copy): it is deleted first, as the demo does, so that this one runs
    kube_node.kubectl("-n", "throttle-lab", "delete", "job", "http-timing", "--ignore-not-found",
                      "--cascade=foreground", "--timeout=120s", timeout=150)
    kube_node.kubectl("apply", "-k", str(overlay), timeout=120)
    yield kube_node
    kube_node.kubectl("delete", "-k", str(overlay), "--wait=false", check=False, timeout=120)


def test_the_projects_manifests_give_two_ready_deployments(applied: kubenode.Node) -> None:
    for name in ("limited", "limitless"):
        applied.kubectl("-n", "throttle-lab", "rollout", "status", f"deployment/{name}",
                        "--timeout=300s", timeout=320)
        assert applied.deployment_ready("throttle-lab", name)


def test_each_ingress_answers_through_traefik(applied: kubenode.Node) -> None:
    """From the host, through the veth, to Traefik's pod: each Ingress host reaches its own
    Deployment (the service names itself in /limits), an unknown host gets 404."""
    for name in ("limited", "limitless"):
        applied.kubectl("-n", "throttle-lab", "rollout", "status", f"deployment/{name}",
                        "--timeout=300s", timeout=320)
    pod_ip = applied.kubectl("-n", "kube-system", "get", "pod", "-l",
                             "app.kubernetes.io/name=traefik", "-o",
                             "jsonpath={.items[0].status.podIP}").stdout.strip()
    assert pod_ip.startswith("10.244.0.")
    base = f"http://{pod_ip}:{WEB_PORT}"

    def answer(host: str, path: str) -> httpx.Response | None:
        try:
            return httpx.get(base + path, headers={"Host": host}, timeout=10)
        except httpx.HTTPError:
            return None

    quotas = {}
    for name in ("limited", "limitless"):
        host = f"{name}.throttle-lab.localhost"
        # Traefik picks up a new Ingress within seconds: until then 404
        reply = wait_for(f"{host} through Traefik",
                         lambda: (r := answer(host, "/limits")) is not None
                         and r.status_code == 200 and r, 120)
        quotas[name] = reply.json()["cgroup"]["quota_us"]
    assert quotas["limited"] == LIMIT.quota_us
    assert quotas["limitless"] in (None, -1, "max")
    unknown = answer("nobody.throttle-lab.localhost", "/limits")
    assert unknown is not None and unknown.status_code == 404


def test_the_job_completes_and_prints_both_reports(applied: kubenode.Node) -> None:
    """The Job's two reports, judged as issue 33 judges the demo: the limited p90 is a quota's
    wait, the limitless p90 is not; the limited run's delayed requests are its slow ones."""
    applied.kubectl("-n", "throttle-lab", "wait", "--for=condition=complete", "job/http-timing",
                    "--timeout=900s", timeout=920)
    log = applied.kubectl("-n", "throttle-lab", "logs", "job/http-timing", timeout=60).stdout
    print(log)
    assert "run: limited (" in log and "run: limitless (" in log
    latencies = re.findall(r"run: (\w+) [^\n]*\n(?:[^\n]*\n)*?latency ms: p50 ([0-9.]+)"
                           r"\s+p90 ([0-9.]+)\s+p99 ([0-9.]+).*errors (\d+) of (\d+)", log)
    assert [name for name, *_ in latencies] == ["limited", "limitless"], log
    figures = {}
    for name, p50, p90, p99, errors, total in latencies:
        assert 0 < float(p50) <= float(p90) <= float(p99)
        assert errors == "0" and total == "200"
        figures[name] = float(p50), float(p90)
    assert figures["limited"][1] >= STALL_MS, figures      # the p90 waited for a period
    limited_part, limitless_part = log.split("run: limitless", 1)
    delayed = re.search(r"delayed by throttling: (\d+) of (\d+) requests", limited_part)
    assert delayed is not None, log
    assert int(delayed.group(1)) >= 0.1 * int(delayed.group(2)), log   # the p90 among them
    # no quota, no throttling claim, however slow a busy machine made some of its requests
    assert all(int(n) == 0 for n in
               re.findall(r"delayed by throttling: (\d+) of", limitless_part)), log


def test_the_pi_page_through_the_limited_ingress_stops_and_the_limitless_one_does_not(
        applied: kubenode.Node) -> None:
    """``make kube-demo``'s last step: the pi page (/api/pi) through each Ingress (Traefik),
    the same counter for both (~150 ms of CPU, calibrated on the limitless one). Through the
    limited one the kernel's rule shows: at most one quota of CPU a period, so the loop took at
    least a period per quota it used, and the page's own gaps hold that wait. How the wait
    splits into gaps is the kernel's doing (the pod's and the container's period timers, the
    per-CPU slices): ``make kube-demo`` counts the gaps of 50 ms or more, docs/benchmarks.md
    has its figures. Through the limitless one the page waits less."""
    for name in ("limited", "limitless"):
        applied.kubectl("-n", "throttle-lab", "rollout", "status", f"deployment/{name}",
                        "--timeout=300s", timeout=320)
    counter, pages = pi_pages(applied)
    for name, body in pages.items():
        print(pi_line(name, counter, body))
    limited, limitless = pages["limited"], pages["limitless"]
    assert limited["counter"] == limitless["counter"] == counter
    quotas_used = limited["cpu_ns"] / LIMIT.quota_ns
    assert quotas_used > 4, limited["cpu_ns"]        # the page is long enough to say anything
    # C ns of CPU at q a period P take at least P * (C / q - 1); one more quota of margin for
    # what the per-CPU slices carry over a period's end (the other threads' CPU only adds)
    least_wait_ns = LIMIT.period_ns * (quotas_used - 2) - limited["cpu_ns"]
    figures = (limited["wall_ns"], limited["cpu_ns"], limited["pauses"], least_wait_ns)
    assert limited["wall_ns"] - limited["cpu_ns"] >= least_wait_ns, figures
    assert limited["pauses"]["total_us"] * 1000 >= least_wait_ns, figures   # the page saw it
    # the limitless page meets the same machine, without the quota's wait
    assert limitless["pauses"]["total_us"] < limited["pauses"]["total_us"], (
        limitless["pauses"], limited["pauses"])
