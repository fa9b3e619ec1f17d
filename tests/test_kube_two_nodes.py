"""Two nodes (``make kube-node NODES=2``, the session's cluster: tests/kube.py): a second
kubelet joined to the first's control plane, with its own namespaces, containerd and cgroup
root. A Deployment of two burn-service replicas spreads one pod to each node; each pod's group
is under its own node's cgroup root with the limit's quota; a pod on node 1 reaches the pod on
node 2 by its IP; a ClusterIP Service answers each pod from both; the recorder's DaemonSet has a
Ready pod on each node."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubenode import node as kubenode
from kubenode import recorder
from kubenode.config import member
from tests.kube import pods_namespace, shipped_limit, toleration, wait_for

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

NAMESPACE = "tl-two-nodes"
CPU = Path("/sys/fs/cgroup/cpu")
FIRST, SECOND = member(1), member(2)
LIMIT = shipped_limit()   # k8s/deployment-limited.yaml's limits.cpu


def _deployment(replicas: int) -> list[dict]:  # type: ignore[type-arg]
    labels = {"app.kubernetes.io/name": "burn-spread"}
    pod_spec = {
        "terminationGracePeriodSeconds": 0,
        # no BURN_PORT=tcp://... from a Service's links: burn-service reads BURN_* settings
        "enableServiceLinks": False,
        "tolerations": [toleration()],   # node 2's in a test session (tests/kube.py)
        # one pod on each node: a second one on a node would make the skew 2
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": labels}}],
        "containers": [{
            "name": "burn", "image": "throttle-lab:latest", "imagePullPolicy": "Never",
            "ports": [{"name": "http", "containerPort": 7800}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                               "periodSeconds": 2},
            "resources": {"requests": {"cpu": f"{LIMIT.millicores}m", "memory": "128Mi"},
                          "limits": {"cpu": f"{LIMIT.millicores}m", "memory": "384Mi"}}}]}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "spread", "namespace": NAMESPACE},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": pod_spec}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "spread", "namespace": NAMESPACE},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "http"}]}},
    ]


@pytest.fixture(scope="module")
def two_nodes(kube_node: kubenode.Node, node_recorder: dict,  # type: ignore[type-arg]
              ) -> Iterator[kubenode.Node]:
    """The session's two nodes, the recorder on both, and this module's namespace."""
    with pods_namespace(kube_node, NAMESPACE):
        yield kube_node


def _pods(n: kubenode.Node) -> dict[str, dict]:  # type: ignore[type-arg]
    """The Deployment's pods by the name of their node."""
    items = json.loads(n.kubectl("-n", NAMESPACE, "get", "pods", "-l",
                                 "app.kubernetes.io/name=burn-spread", "-o", "json").stdout)
    return {pod["spec"]["nodeName"]: pod for pod in items["items"]
            if pod["metadata"].get("deletionTimestamp") is None}


def _get(n: kubenode.Node, pod: str, url: str,
         times: int = 1) -> list[dict]:  # type: ignore[type-arg]
    """GET ``url`` ``times`` times from inside ``pod`` (the service image's python); the
    JSON answers."""
    code = ("import json, urllib.request\n"
            f"print(json.dumps([json.load(urllib.request.urlopen({url!r}, timeout=10))"
            f" for _ in range({times})]))")
    out = n.kubectl("-n", NAMESPACE, "exec", pod, "--", "python", "-c", code, timeout=120)
    return json.loads(out.stdout)


def test_two_nodes_run_a_pod_each_reach_each_other_and_share_services(
        two_nodes: kubenode.Node) -> None:
    n = two_nodes
    nodes = json.loads(n.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    ready = {node["metadata"]["name"]: {c["type"]: c["status"]
                                        for c in node["status"]["conditions"]}["Ready"]
             for node in nodes}
    assert ready == {FIRST.name: "True", SECOND.name: "True"}
    addresses = {node["metadata"]["name"]: {a["type"]: a["address"]
                                            for a in node["status"]["addresses"]}["InternalIP"]
                 for node in nodes}
    assert addresses == {FIRST.name: FIRST.addr, SECOND.name: SECOND.addr}

    # the recorder's DaemonSet: a Ready agent on each node
    ds = json.loads(n.kubectl("-n", recorder.RECORDER_NAMESPACE, "get", "daemonset",
                              "recorder", "-o", "json").stdout)["status"]
    assert ds["desiredNumberScheduled"] == ds["numberReady"] == 2, ds
    agents = json.loads(n.kubectl("-n", recorder.RECORDER_NAMESPACE, "get", "pods",
                                  "-o", "json").stdout)["items"]
    assert {pod["spec"]["nodeName"] for pod in agents} == {FIRST.name, SECOND.name}

    n.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                    "items": _deployment(2)}))
    n.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/spread", "--timeout=300s",
              timeout=320)
    pods = wait_for("the Deployment's two pods, one on each node",
                    lambda: p if len(p := _pods(n)) == 2 else None, 60)
    assert set(pods) == {FIRST.name, SECOND.name}

    # each pod's group: under its own node's cgroup root, not the other's, with the quota
    uids = {}
    for m, other in ((FIRST, SECOND), (SECOND, FIRST)):
        uid = pods[m.name]["metadata"]["uid"]
        uids[m.name] = uid
        groups = list((CPU / m.cgroup_root / "kubepods").rglob(f"pod{uid}"))
        assert len(groups) == 1, groups
        assert not list((CPU / other.cgroup_root / "kubepods").rglob(f"pod{uid}"))
        print(f"{m.name}: {pods[m.name]['status']['podIP']}, {groups[0]}")
        assert int((groups[0] / "cpu.cfs_quota_us").read_text()) == LIMIT.quota_us
        assert pods[m.name]["status"]["podIP"].startswith(m.pod_cidr.rsplit(".", 1)[0] + ".")

    # a pod on node 1 reaches the pod on node 2 by its IP; the answer is from node 2's pod
    on_first = pods[FIRST.name]["metadata"]["name"]
    on_second = pods[SECOND.name]["metadata"]["name"]
    ip_second = pods[SECOND.name]["status"]["podIP"]
    answer, = _get(n, on_first, f"http://{ip_second}:7800/limits")
    assert answer["cgroup"]["group"].startswith(f"/{SECOND.cgroup_root}/")
    assert f"pod{uids[SECOND.name]}" in answer["cgroup"]["group"]
    assert answer["cgroup"]["quota_us"] == LIMIT.quota_us

    # the ClusterIP Service, by its DNS name (CoreDNS runs on node 1), from a pod on each node:
    # both pods answer (each request goes to one of the two: 40 miss one with odds of 2 ** -39)
    url = f"http://spread.{NAMESPACE}.svc.cluster.local/limits"
    for pod in (on_first, on_second):
        groups = [a["cgroup"]["group"] for a in _get(n, pod, url, times=40)]
        seen = {name for name, uid in uids.items() for group in groups if f"pod{uid}" in group}
        print(f"the Service from {pod}: " + ", ".join(
            f"{name} {sum(f'pod{uid}' in g for g in groups)}" for name, uid in uids.items()))
        assert seen == {FIRST.name, SECOND.name}, (pod, groups)

