"""``advise --k8s NS/deployment/limited --replicas 1,2`` on the project's node (kubenode;
marker ``node``): ``k8s/``'s limited Deployment (1 replica) in a namespace of its own
(``tl-replicas-test``), its Ingress on the node's Traefik, the load sent from the host to
Traefik's pod IP with the Ingress's Host header (Traefik spreads it over the pods).

Checked with the API's and the kernel's own words: while it ran the Deployment had 2 pods
(each run at N = 2 names both), and afterwards the Deployment's replica count is 1 again, its
one pod's resources are the shipped ones and its quota file reads the shipped limit
(``k8s/deployment-limited.yaml``), whatever the answer.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client.run.cgroup_lookup import find_pod_directory
from kubenode import node as kubenode
from kubenode.traefik import INGRESS_CLASS, WEB_PORT
from tests.kube import namespace_gone, namespaced_overlay, shipped_limit, wait_for
from tests.support import BIN, ROOT
from tests.test_commands_advise_k8s import CPU, _has_service_image

pytestmark = pytest.mark.node

NS = "tl-replicas-test"
HOST = f"limited.{NS}.localhost"
PATH = "/cpuBurnFlow?iterations=5000"
LIMIT = shipped_limit()


def pods(node: kubenode.Node) -> list[dict]:
    out = node.kubectl("-n", NS, "get", "pod", "-l", "app.kubernetes.io/component=limited",
                       "-o", "json")
    return sorted((p for p in json.loads(out.stdout)["items"]
                   if not p["metadata"].get("deletionTimestamp")),
                  key=lambda p: p["metadata"]["name"])


@pytest.fixture(scope="module")
def deployed(kube_node: kubenode.Node, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[kubenode.Node, str, dict[str, str]]]:
    if not _has_service_image(kube_node):
        kubenode.load_project_images(kube_node.lay, print, ROOT)
    made = namespaced_overlay(ROOT / "k8s", tmp_path_factory.mktemp("replicas-overlay"), NS, [
        ("batch/v1", "Job", "http-timing"), ("apps/v1", "Deployment", "limitless"),
        ("networking.k8s.io/v1", "Ingress", "limitless")], f"""  - target:
      kind: Ingress
      name: limited
    patch: |-
      - op: replace
        path: /spec/ingressClassName
        value: {INGRESS_CLASS}
      - op: replace
        path: /spec/rules/0/host
        value: {HOST}
""")
    namespace_gone(kube_node, NS)
    kube_node.kubectl("apply", "-k", str(made), timeout=120)
    try:
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/limited",
                          "--timeout=300s", timeout=320)
        traefik = kube_node.kubectl("-n", "kube-system", "get", "pod", "-l",
                                    "app.kubernetes.io/name=traefik", "--field-selector",
                                    "status.phase=Running", "-o",
                                    "jsonpath={.items[0].status.podIP}").stdout.strip()
        base = f"http://{traefik}:{WEB_PORT}"

        def answers() -> bool:
            try:
                return all(httpx.get(base + PATH, headers={"Host": HOST},
                                     timeout=2).status_code == 200 for _ in range(5))
            except httpx.HTTPError:
                return False

        wait_for(f"{HOST} through Traefik", answers, 120, 0.5)
        env = dict(os.environ, KUBECONFIG=str(kube_node.lay.kubeconfig),
                   PATH=f"{kube_node.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        yield kube_node, base, env
    finally:
        kube_node.kubectl("delete", "-k", str(made), "--wait=false", check=False, timeout=120)


def test_live_replicas_scale_to_each_count_and_put_everything_back(
        deployed: tuple[kubenode.Node, str, dict[str, str]], tmp_path: Path) -> None:
    import subprocess

    node, base, env = deployed
    before = pods(node)
    assert len(before) == 1
    resources = before[0]["spec"]["containers"][0]["resources"]
    began = time.monotonic()
    result = subprocess.run(
        [str(BIN / "http-timing"), "advise", "--k8s", f"{NS}/deployment/limited", "--url",
         base + PATH, "-H", f"Host: {HOST}", "--p99", "80", "--requests", "30",
         "--max-runs", "3", "--replicas", "1,2", "--name", "r", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    print(result.stderr[-6000:])
    print(f"live --replicas 1,2: {time.monotonic() - began:.0f} s")
    # put back, whatever the answer: the count, the pod's resources, its quota file
    scale = json.loads(node.kubectl("-n", NS, "get", "deployment", "limited", "-o",
                                    "json").stdout)
    assert scale["spec"]["replicas"] == 1
    after = pods(node)
    assert len(after) == 1
    assert after[0]["spec"]["containers"][0]["resources"] == resources
    group = find_pod_directory(CPU, after[0]["metadata"]["uid"], None)
    assert group is not None
    quota = int((group / "cpu.cfs_quota_us").read_text())
    assert quota == LIMIT.quota_us, (quota, LIMIT.quota_us)
    assert result.returncode in (0, 3), result.stderr[-3000:]
    answer = json.loads(result.stdout)
    rows = answer["replicas"]
    assert [r["replicas"] for r in rows] == [1, 2]
    assert [len(r["pods"]) for r in rows] == [1, 2]
    assert all(r["runs"] for r in rows)
    for row in rows:
        if row["met"]:
            assert row["total_cpus"] == pytest.approx(2 * row["cpus"] if row["replicas"] == 2
                                                      else row["cpus"])
    assert answer["restored"]["replicas"] == 1 and answer["restored"]["limits_as_before"]
    assert (tmp_path / answer["picture"]).stat().st_size > 10_000
    print(json.dumps([{k: r[k] for k in ("replicas", "cpus", "total_cpus", "p99_ms", "least")}
                      for r in rows]))
