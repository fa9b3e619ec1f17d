"""``cluster --prometheus k8s:NS/prometheus`` on the project's node (marker ``node``): Prometheus
runs in a pod, as the API server's service proxy needs (it proxies a Service only to pod
endpoints): Debian's binary from the host (a ``hostPath``) in the project's service image (it
needs the libc that image has), scraping node 1's agent (the session's recorder) every second.
A Deployment of one labelled pod limited to 100m is loaded from the host; its row, read by a
user who holds only the roles of k8s/recorder/user-rbac.yaml (with
throttle-lab-prometheus-reader in Prometheus's namespace), counts the periods throttled and
the throttled time the pod group's own ``cpu.stat`` counted between the scrapes, as
tests/test_cluster_prometheus.py checks against Prometheus on loopback."""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from client.analysis.cluster_prometheus import FROM_AGENTS
from kubenode import node as kubenode
from kubenode import project_images
from kubenode.config import CGROUP_ROOT
from tests.kube import busy_deployment, pods_namespace, wait_for
from tests.prometheus_support import last_scraped, quiet
from tests.recorder_support import kubectl_json, throttling, user_kubeconfig
from tests.support import http_timing

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

NS = "tl-prometheus-test"
CPU = Path("/sys/fs/cgroup/cpu")
ITERATIONS = 30000     # ~30 ms of CPU a request: three 100m quotas
REQUESTS = 6
QUIET_BEFORE_LOAD_S = 15
WORKLOAD = f"{NS}/deployment/busy"
AGENT_PORT = 9742      # the DaemonSet's containerPort "metrics"
IN_POD = "/opt/prometheus/prometheus"


def prometheus(agent: str) -> list[dict[str, Any]]:
    """A ConfigMap (the scrape job of k8s/recorder/prometheus.yml, its targets static: the
    agent at ``agent``), Prometheus's pod and its Service (one unnamed port, so that
    ``k8s:NS/prometheus`` names it without a port)."""
    config = {"global": {"scrape_interval": "1s"},
              "scrape_configs": [{"job_name": "throttle-lab-recorder", "honor_labels": True,
                                  "static_configs": [{"targets": [agent]}]}]}
    labels = {"app": "prometheus"}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prometheus"},
         "data": {"prometheus.yml": yaml.safe_dump(config)}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prometheus", "labels": labels},
         "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                  "containers": [{
                      "name": "prometheus", "image": project_images.SERVICE_IMAGE,
                      "imagePullPolicy": "Never",
                      "command": [IN_POD, "--config.file=/etc/prometheus/prometheus.yml",
                                  "--storage.tsdb.path=/tmp/data",
                                  "--web.listen-address=:9090"],
                      "ports": [{"containerPort": 9090}],
                      "readinessProbe": {"httpGet": {"path": "/-/ready", "port": 9090},
                                         "periodSeconds": 1},
                      "volumeMounts": [
                          {"name": "binary", "mountPath": IN_POD, "readOnly": True},
                          {"name": "config", "mountPath": "/etc/prometheus"}]}],
                  "volumes": [
                      {"name": "binary", "hostPath": {"path": shutil.which("prometheus") or
                                                      "/usr/bin/prometheus", "type": "File"}},
                      {"name": "config", "configMap": {"name": "prometheus"}}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "prometheus"},
         "spec": {"selector": labels, "ports": [{"port": 9090, "targetPort": 9090}]}},
    ]


@dataclass
class Scraped:
    kubeconfig: Path
    start: float               # unix seconds: Prometheus holds ``before``, the load not begun
    load: float                # unix seconds: the load begins
    until: float               # unix seconds: Prometheus holds ``after``
    before: dict[str, int]     # the pod group's throttling, quiet, around the load
    after: dict[str, int]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _holds(base: str, selector: str, value: float) -> bool:
    try:
        held = last_scraped(base, selector)
    except (httpx.HTTPError, KeyError, ValueError):
        return False
    return held is not None and math.isclose(held, value, rel_tol=1e-12, abs_tol=1e-9)


@pytest.fixture(scope="module")
def scraped(kube_node: kubenode.Node, node_recorder: dict[str, Any],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (scripts/install-system-deps.sh)")
    with pods_namespace(kube_node, NS):
        agent = f"{node_recorder['status']['podIP']}:{AGENT_PORT}"
        items = [dict(item, metadata={**item["metadata"], "namespace": NS})
                 for item in [busy_deployment(NS), *prometheus(agent)]]
        kube_node.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": items}))
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/busy", "--timeout=180s",
                          timeout=200)
        kube_node.kubectl("-n", NS, "wait", "pod/prometheus", "--for=condition=Ready",
                          "--timeout=120s", timeout=140)
        (pod,) = kubectl_json(kube_node, "-n", NS, "get", "pods", "-l", "app=busy")["items"]
        (group,) = list((CPU / CGROUP_ROOT).rglob(f"pod{pod['metadata']['uid']}"))
        base = f"http://{pod['status']['podIP']}:7800"
        wait_for("the service in the pod", lambda: _healthy(base + "/healthz"), 60, 0.5)
        server = kubectl_json(kube_node, "-n", NS, "get", "pod", "prometheus")
        prom = f"http://{server['status']['podIP']}:9090"
        sel = f'{{namespace="{NS}",pod="{pod["metadata"]["name"]}",level="pod"}}'
        url = f"{base}/cpuBurnFlow?iterations={ITERATIONS}"
        with httpx.Client(timeout=30) as client:
            client.get(url)   # the first request's imports are not the load's
            before = quiet(lambda: throttling(group))
            wait_for("Prometheus holding the pod's periods throttled", lambda: _holds(
                prom, "throttle_lab_cpu_cfs_throttled_periods_total" + sel,
                before["nr_throttled"]), 60, 0.2)
            start = time.time()
            time.sleep(QUIET_BEFORE_LOAD_S)   # the window begins in here (the test's --until)
            load = time.time()
            for _ in range(REQUESTS):
                client.get(url)
        after = quiet(lambda: throttling(group))
        assert after["nr_throttled"] - before["nr_throttled"] >= REQUESTS, (before, after)
        for name, value in (("throttle_lab_cpu_cfs_throttled_periods_total",
                             after["nr_throttled"]),
                            ("throttle_lab_cpu_cfs_throttled_seconds_total",
                             after["throttled_time"] / 1e9)):
            wait_for(f"Prometheus holding {name}", lambda: _holds(prom, name + sel, value),
                     60, 0.2)
        until = time.time()
        kubeconfig = user_kubeconfig(kube_node, tmp_path_factory.mktemp("user") / "config", NS)
        account = f"--serviceaccount={NS}:timeline-user"
        for role in ("throttle-lab-workload-reader", "throttle-lab-prometheus-reader"):
            kube_node.kubectl("-n", NS, "create", "rolebinding", role, f"--clusterrole={role}",
                              account)
        yield Scraped(kubeconfig, start, load, until, before, after)


def test_the_rows_periods_throttled_are_what_cpu_stat_counted_between_the_scrapes(
        scraped: Scraped, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(scraped.kubeconfig))
    # the window: from the middle of the quiet before the load (Prometheus's samples there
    # are ``before``) to a time Prometheus held ``after``, however long the command takes
    since = round(scraped.until - (scraped.start + scraped.load) / 2)
    result = http_timing("cluster", "-n", NS, "--prometheus", f"k8s:{NS}/prometheus",
                         "--since", f"{since}s", "--until", f"{scraped.until:.3f}", "--json",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["since_s"], data["until"]) == (since, pytest.approx(scraped.until, abs=1e-3))
    assert f"/api/v1/namespaces/{NS}/services/prometheus/proxy" in data["source"]
    (row,) = data["workloads"]
    assert row["workload"] == WORKLOAD and row["limit_cpus"] == 0.1
    before, after = scraped.before, scraped.after
    assert row["periods_throttled"] == after["nr_throttled"] - before["nr_throttled"]
    assert row["throttled_ms"] == pytest.approx(
        (after["throttled_time"] - before["throttled_time"]) / 1e6, abs=1e-3)
    assert row["periods"] >= row["periods_throttled"]
    assert row["pods"] == 1 and row["missing"] == []
    # the window begins within the agents' hour: what needs each period is from their windows
    assert row["sources"]["added_delay"] == FROM_AGENTS, row["notes"]
