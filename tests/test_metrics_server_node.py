"""The resource metrics API on the project's node (kubenode's metrics-server step): what the
HPA controller and ``kubectl top`` read. A pod that spins at its CPU limit 3 s in 7; the API's usage of
it against what the kernel counted in its container's group (cpuacct.usage) over the same
window, the one the API names (its ``timestamp`` and ``window``).

The node is one per session (``kube_node``); on a laptop without root this skips with the
reason, under CI=true it must run.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubenode import images as node_images
from kubenode import node as kubenode
from kubenode.config import CGROUP_ROOT
from kubenode.project_images import SERVICE_IMAGE
from tests.kube import pods_namespace, wait_for
from tests.support import ROOT

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

NAMESPACE = "tl-metrics-test"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
LIMIT_M = 200             # the spinning pod's limits.cpu, millicores
SAMPLE_S = 0.25           # how often the test reads the container's cpuacct.usage
# How far the kubelet's stamp of a sample may be from the instant the kernel's counter was
# read for it (the CRI's stats are read, then stamped): each end of the API's window is taken
# anywhere that far from its stamp (the stamp itself is whole seconds, one more).
STAMP_SKEW_S = 1.0


# The pod's load: 3 s spinning (at the limit), 4 s asleep, over and over; a 7 s cycle against
# the 15 s resolution, so a window taken at another place would count another share of it.
SPIN = """import time
while True:
    t = time.monotonic()
    while time.monotonic() - t < 3:
        pass
    time.sleep(4)
"""


def spinner() -> dict[str, object]:
    """One pod spinning on one thread part of the time (:data:`SPIN`), limited to
    :data:`LIMIT_M`."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "spin", "namespace": NAMESPACE},
        "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
                 "containers": [{
                     "name": "spin", "image": SERVICE_IMAGE, "imagePullPolicy": "Never",
                     "command": ["python", "-c", SPIN],
                     "resources": {"requests": {"cpu": f"{LIMIT_M}m", "memory": "64Mi"},
                                   "limits": {"cpu": f"{LIMIT_M}m", "memory": "64Mi"}}}]}}


@pytest.fixture(scope="module")
def spinning(kube_node: kubenode.Node) -> Iterator[Path]:
    """The pod running; yields its container's cpuacct group."""
    have = node_images.ctr_images(kube_node.containerd_address)
    if not any(name.endswith("/" + SERVICE_IMAGE) for name in have):   # containerd's name
        kubenode.load_project_images(kube_node.lay, print, ROOT)
    with pods_namespace(kube_node, NAMESPACE):
        kube_node.kubectl("apply", "-f", "-", input=json.dumps(spinner()))
        kube_node.kubectl("-n", NAMESPACE, "wait", "pod/spin", "--for=condition=Ready",
                          "--timeout=120s", timeout=140)
        info = json.loads(kube_node.kubectl("-n", NAMESPACE, "get", "pod", "spin", "-o",
                                            "json").stdout)
        uid = info["metadata"]["uid"]
        cid = info["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        # Guaranteed: requests = limits for CPU and memory
        group = CPUACCT / CGROUP_ROOT / "kubepods" / f"pod{uid}" / cid
        assert (group / "cpuacct.usage").exists(), group
        yield group


def pod_metrics(n: kubenode.Node) -> dict | None:  # type: ignore[type-arg]
    out = n.kubectl("get", "--raw",
                    f"/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods", check=False)
    if out.returncode != 0:
        return None
    items = json.loads(out.stdout).get("items") or []
    return next((i for i in items if i["metadata"]["name"] == "spin"), None)


def nanocores(quantity: str) -> float:
    units = {"n": 1.0, "u": 1e3, "m": 1e6}
    if quantity[-1] in units:
        return float(quantity[:-1]) * units[quantity[-1]]
    return float(quantity) * 1e9


def seconds(duration: str) -> float:
    """A Go duration as the API prints a window (``15.032s``, ``1m0.5s``)."""
    total, number = 0.0, ""
    for ch in duration:
        if ch.isdigit() or ch == ".":
            number += ch
        else:
            total += float(number) * {"h": 3600, "m": 60, "s": 1}[ch]
            number = ""
    return total


def usage_between(samples: list[tuple[float, int]], lo: float, hi: float) -> float:
    """CPU (cores) the samples (wall time, cpuacct.usage ns) count over ``[lo, hi]``,
    interpolated between the samples around each end."""
    def at(t: float) -> float:
        for (t0, u0), (t1, u1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return u0 + (u1 - u0) * (t - t0) / (t1 - t0)
        raise AssertionError(f"{t:.2f} is outside the samples "
                             f"({samples[0][0]:.2f} to {samples[-1][0]:.2f})")
    return (at(hi) - at(lo)) / 1e9 / (hi - lo)


def test_the_metrics_api_gives_the_pods_usage_the_kernel_counted(
        kube_node: kubenode.Node, spinning: Path) -> None:
    """``kubectl get --raw /apis/metrics.k8s.io/v1beta1/namespaces/NS/pods``: the pod's CPU
    over the window the API names is what the container's cpuacct.usage counted over it,
    within the two ends' stamps (at most :data:`STAMP_SKEW_S` apart each, at most the limit's
    CPU in them); and ``kubectl top pods`` prints it."""
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.time(), int((spinning / "cpuacct.usage").read_text())))
            stop.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        began = time.time()
        # a window that starts after the sampling did (a second after: the stamp's
        # truncation, and the skew), then samples past its end
        found = wait_for("the pod's metrics, a window after the sampling began",
                         lambda: (m := pod_metrics(kube_node)) is not None and
                         _epoch(m["timestamp"]) - seconds(m["window"])
                         > began + STAMP_SKEW_S + 1 and m, 120, interval=2.0)
        time.sleep(STAMP_SKEW_S + 1 + 2 * SAMPLE_S)
    finally:
        stop.set()
        sampler.join()
    stamp = _epoch(found["timestamp"])   # whole seconds: the window ends in [stamp, stamp + 1)
    window = seconds(found["window"])
    api = sum(nanocores(c["usage"]["cpu"]) for c in found["containers"]) / 1e9
    # the kernel's figure for every end the stamp allows, 0.1 s apart
    ends = [stamp - STAMP_SKEW_S + k / 10 for k in range(int(10 * (1 + 2 * STAMP_SKEW_S)) + 1)]
    kernel = [usage_between(samples, end - window, end) for end in ends]
    # one period's quota at each end: where in a period a window begins or ends
    slack = 2 * LIMIT_M / 1000 * 0.1 / window
    print(f"metrics API: {api * 1000:.1f}m over {window:.3f} s to {found['timestamp']}; "
          f"the container's cpuacct.usage over the same window: {min(kernel) * 1000:.1f}m to "
          f"{max(kernel) * 1000:.1f}m for the ends the stamp allows (+-{slack * 1000:.1f}m "
          f"for the periods at the ends; limit {LIMIT_M}m)")
    nearest = min(range(len(ends)), key=lambda k: abs(kernel[k] - api))
    print(f"nearest: the window ending {ends[nearest] - stamp:+.1f} s from the stamp, "
          f"{kernel[nearest] * 1000:.1f}m")
    assert min(kernel) - slack <= api <= max(kernel) + slack
    assert min(kernel) > 0.2 * LIMIT_M / 1000   # it spins: the comparison is of a real load
    top = kube_node.kubectl("top", "pods", "-n", NAMESPACE, "--no-headers").stdout.split()
    assert top[0] == "spin" and top[1].endswith("m"), top


def _epoch(stamp: str) -> float:
    """An RFC 3339 UTC stamp (``2026-12-02T05:44:25Z``) as seconds since the epoch."""
    import calendar

    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
