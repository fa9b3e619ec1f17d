"""k8s/recorder/: rendered by the real ``kubectl kustomize`` and validated object by object
against the real Kubernetes schemas (strict, offline), then checked for what a node recorder
must be: read-only /sys/fs/cgroup, no capabilities, no hostPID, bounded resources, timelines on
a hostPath, its HTTP port declared, only the pods of its node with the label, RBAC to watch
them; its Prometheus rules pass ``promtool check rules`` and ``promtool test rules``, its scrape
config ``promtool check config``."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import ROOT, require
from client.run import prometheus_query

pytestmark = pytest.mark.kubectl

K8S_VERSION = "1.30.0"
RECORDER = ROOT / "k8s" / "recorder"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl is not installed (it renders k8s/ with kustomize)")
    assert kubectl is not None
    out = subprocess.run([kubectl, "kustomize", str(RECORDER)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_valid_against_the_real_schema_strictly(docs: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Namespace",
                     "ServiceAccount"]
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


def test_the_daemonset_reads_cgroups_with_the_least_it_needs(docs: list[dict[str, Any]]) -> None:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert "hostPID" not in spec   # usage is read from the pods' groups, not their threads
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and "add" not in sc["capabilities"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert "privileged" not in sc
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    cgroup = mounts["/sys/fs/cgroup"]
    assert cgroup["readOnly"] is True
    assert volumes[cgroup["name"]]["hostPath"]["path"] == "/sys/fs/cgroup"
    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"]
           for e in container["env"]}
    timelines = mounts[env["TIMELINES"]]
    assert volumes[timelines["name"]]["hostPath"]["path"] == "/var/lib/throttle-lab/timelines"
    assert env["NODE_NAME"] == "spec.nodeName" and "=" in env["SELECTOR"]
    assert int(env["MAX_SIZE"]) > 0 and int(env["MAX_TOTAL"]) > int(env["MAX_SIZE"])
    assert container["image"].startswith("throttle-lab-agent")
    assert {"--source", "kube"} <= set(container["args"])
    (port,) = container["ports"]
    assert port["name"] == "metrics" and env["LISTEN"] == f":{port['containerPort']}"
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port["containerPort"])
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
    resources = container["resources"]
    assert resources["limits"]["cpu"] and resources["limits"]["memory"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    # The kubelet makes a hostPath directory as root: one init container, root with CAP_CHOWN
    # alone, gives it to the agent's user (the same image: --prepare-timelines) and exits.
    (init,) = spec["initContainers"]
    assert init["image"] == container["image"]
    owner = f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}"
    assert init["args"] == ["--prepare-timelines", owner, "--timelines", env["TIMELINES"]]
    isc = init["securityContext"]
    assert isc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert isc["allowPrivilegeEscalation"] is False and isc["readOnlyRootFilesystem"] is True
    assert [m["name"] for m in init["volumeMounts"]] == [timelines["name"]]
    assert "ports" not in init and init["resources"]["limits"]["cpu"]


def test_both_deployments_carry_the_label_the_agent_selects_on(docs: list[dict[str, Any]]) -> None:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    key, value = env["SELECTOR"].split("=")
    for name in ("limited", "limitless"):
        deployment = yaml.safe_load((ROOT / "k8s" / f"deployment-{name}.yaml").read_text())
        assert deployment["spec"]["template"]["metadata"]["labels"][key] == value, name


def test_the_users_rbac_reaches_the_agents_through_the_proxy_and_no_further() -> None:
    """k8s/recorder/user-rbac.yaml (what import --timeline k8s:NS/POD, cluster and advise
    --passive --k8s need), strictly valid: list pods and get pods/proxy in the recorder's
    namespace, get pods elsewhere, list the workloads, get services/proxy where Prometheus
    runs, patch pods/resize where a pod is advised on live; nothing else (its use on the real
    node: tests/test_agent_node.py, tests/test_cluster_kube.py)."""
    docs = [d for d in yaml.safe_load_all((RECORDER / "user-rbac.yaml").read_text()) if d]
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "throttle-lab-recorder"
    assert sorted((r["resources"][0], tuple(r["verbs"])) for r in role["rules"]) == [
        ("pods", ("list",)), ("pods/proxy", ("get",))]
    cluster = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert [(r["resources"], r["verbs"]) for r in cluster["throttle-lab-pod-reader"]["rules"]] \
        == [(["pods"], ["get"])]
    # cluster and advise --passive --k8s: list the workloads, their pods, HPAs and Services
    # (--replicas), read nothing else
    workloads = cluster["throttle-lab-workload-reader"]["rules"]
    assert all(r["verbs"] == ["list"] for r in workloads), workloads
    assert sorted(res for r in workloads for res in r["resources"]) == [
        "daemonsets", "deployments", "horizontalpodautoscalers", "pods", "replicasets",
        "services", "statefulsets", "verticalpodautoscalers"]
    # cluster --prometheus k8s:NS/SERVICE: get services/proxy, bound in Prometheus's namespace
    assert [(r["resources"], r["verbs"])
            for r in cluster["throttle-lab-prometheus-reader"]["rules"]] == [
        (["services/proxy"], ["get"])]
    # the live advise/sweep on a pod through its node's agent: patch pods/resize, bound in
    # the pod's namespace
    assert [(r["resources"], r["verbs"])
            for r in cluster["throttle-lab-pod-resizer"]["rules"]] == [
        (["pods/resize"], ["patch"]), (["verticalpodautoscalers"], ["list"])]
    assert set(cluster) == {"throttle-lab-pod-reader", "throttle-lab-workload-reader",
                            "throttle-lab-prometheus-reader", "throttle-lab-pod-resizer"}
    assert "user-rbac.yaml" not in (RECORDER / "kustomization.yaml").read_text()


def test_it_may_only_read_and_watch_pods(docs: list[dict[str, Any]]) -> None:
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "watch"]}]


def promtool() -> str:
    found = shutil.which("promtool")
    require(found is not None, "promtool is not installed (Debian prometheus: "
            "scripts/install-system-deps.sh)")
    assert found is not None
    return found


def test_promtool_accepts_the_rules_and_their_unit_tests() -> None:
    for argv in (["check", "rules", "rules.yaml"], ["test", "rules", "rules_test.yaml"]):
        result = subprocess.run([promtool(), *argv], cwd=RECORDER, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    groups = yaml.safe_load((RECORDER / "rules.yaml").read_text())["groups"]
    names = {r.get("record") or r.get("alert"): g.get("interval")
             for g in groups for r in g["rules"]}
    assert "throttle_lab:cpu_cfs_throttled_period_wait_seconds:p99_5m" in names
    assert "throttle_lab:cpu_cfs_throttled_periods:ratio_5m" in names
    # the rule cluster --prometheus reads over a long window, at the interval it assumes
    assert names[prometheus_query.USAGE_RULE] == f"{prometheus_query.USAGE_RULE_MS // 60_000}m"


def test_promtool_accepts_the_scrape_config(tmp_path: Any) -> None:
    """Debian's Prometheus is built without the Kubernetes service discovery, so the pod
    discovery is swapped for a static target; everything else (relabelling, rule files) is
    checked as shipped."""
    config = yaml.safe_load((RECORDER / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {
        "names": ["throttle-lab-recorder"]}}]
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"]
            if r.get("action") == "keep"}
    assert keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)] == \
        "throttle-lab-recorder"
    assert keep[("__meta_kubernetes_pod_container_port_name",)] == "metrics"
    job["static_configs"] = [{"targets": ["127.0.0.1:9742"]}]
    del job["kubernetes_sd_configs"]
    shutil.copy(RECORDER / "rules.yaml", tmp_path / "rules.yaml")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run([promtool(), "check", "config", "prometheus.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
