"""The node recorder (k8s/recorder/, the agent image built from this checkout) on the test node,
for the tests that use it (tests/test_agent_node.py, tests/test_agent_ingress.py): brought up
once for the session (the ``node_recorder`` fixture, tests/conftest.py) and taken down at its
end (with its namespace, and so the users' role bindings in it), a kubeconfig that holds only the user RBAC
of k8s/recorder/user-rbac.yaml, and a group's cpu.stat. The recorder records the labelled pods
of every namespace; each module's checks name its own namespace's pods."""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from kubenode import node as kubenode
from kubenode import project_images, recorder
from kubenode.config import NODE_NAME
from kubenode.context import containerd_addresses
from kubenode.images import has_image
from tests.support import ROOT

__all__ = ["RECORDER_NS", "cpu_stat", "exported_throttled", "kubectl_json", "recorder_up",
           "throttling", "user_kubeconfig"]

RECORDER_NS = recorder.RECORDER_NAMESPACE
USER_RBAC = ROOT / "k8s" / "recorder" / "user-rbac.yaml"


def kubectl_json(node: kubenode.Node, *args: str) -> Any:
    return json.loads(node.kubectl(*args, "-o", "json").stdout)


def cpu_stat(group: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in
                                   (group / "cpu.stat").read_text().splitlines())}


def throttling(group: Path) -> dict[str, int]:
    """The group's periods throttled and throttled time: what stops moving once it is idle
    (an idle service still wakes, so its periods and usage move)."""
    stat = cpu_stat(group)
    return {"nr_throttled": stat["nr_throttled"], "throttled_time": stat["throttled_time"]}


def exported_throttled(agent_ip: str, pod: str) -> int | None:
    """The periods throttled the agent at ``agent_ip`` last read for ``pod``'s group, as its
    /metrics exports them (None: it does not record the pod, or cannot be reached)."""
    name = "throttle_lab_cpu_cfs_throttled_periods_total{"
    try:
        text = httpx.get(f"http://{agent_ip}:9742/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(name) and 'level="pod"' in line and f'pod="{pod}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


@contextmanager
def recorder_up(node: kubenode.Node, overlay: Path) -> Iterator[dict[str, Any]]:
    """The recorder DaemonSet running (the project's images in the node first); yields the
    agent's running pod (its JSON). Afterwards the recorder, the user RBAC and the timelines
    are deleted (the recorder waited for: it writes the timelines until it ends)."""
    lay = node.lay
    if any(not has_image(address, project_images.SERVICE_IMAGE)
           for address in containerd_addresses(lay)):   # each node's
        kubenode.load_project_images(lay, print, ROOT)
    try:
        tag = recorder.deploy_recorder(node, ROOT, overlay, print)
        pods = kubectl_json(node, "-n", RECORDER_NS, "get", "pods", "-l",
                            "app.kubernetes.io/name=throttle-lab-recorder")["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"
                   and p["metadata"].get("deletionTimestamp") is None
                   and p["spec"].get("nodeName") == NODE_NAME]   # node 1's: its pods are there
        assert len(running) == 1, [p["metadata"]["name"] for p in pods]
        assert running[0]["spec"]["containers"][0]["image"] == tag
        yield running[0]
    finally:
        node.kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--wait=true",
                     "--timeout=120s", check=False, timeout=150)
        node.kubectl("delete", "-f", str(USER_RBAC), "--ignore-not-found", check=False)
        shutil.rmtree(lay.state / "recorder-timelines", ignore_errors=True)


def user_kubeconfig(node: kubenode.Node, path: Path, namespace: str) -> Path:
    """A kubeconfig for a service account of ``namespace`` that holds only the roles of
    k8s/recorder/user-rbac.yaml (bound as the file's comment says)."""
    node.kubectl("apply", "-f", str(USER_RBAC))
    node.kubectl("-n", namespace, "create", "serviceaccount", "timeline-user", check=False)
    node.kubectl("-n", RECORDER_NS, "create", "rolebinding", f"{namespace}-timelines",
                 "--role=throttle-lab-timeline-reader",
                 f"--serviceaccount={namespace}:timeline-user", check=False)
    node.kubectl("-n", namespace, "create", "rolebinding", f"{namespace}-pods",
                 "--clusterrole=throttle-lab-pod-reader",
                 f"--serviceaccount={namespace}:timeline-user", check=False)
    user = f"system:serviceaccount:{namespace}:timeline-user"
    assert node.kubectl("auth", "can-i", "get", "pods", "--subresource=proxy", "-n", RECORDER_NS,
                        f"--as={user}").stdout.strip() == "yes"
    assert node.kubectl("auth", "can-i", "get", "nodes", f"--as={user}",
                        check=False).stdout.strip() == "no"
    token = node.kubectl("-n", namespace, "create", "token", "timeline-user").stdout.strip()
    cluster = yaml.safe_load(node.lay.kubeconfig.read_text())["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "timeline-user", "user": {"token": token}}],
        "contexts": [{"name": "user", "context": {"cluster": cluster["name"],
                                                  "user": "timeline-user"}}],
        "current-context": "user"}))
    return path
