"""k8s/recorder/: rendered by the real ``kubectl kustomize`` and validated object by object
against the real Kubernetes schemas (strict, offline), then checked for what a node recorder
must be: read-only /sys/fs/cgroup, hostPID, no capabilities, bounded resources, timelines on a
hostPath, only the pods of its node with the label; its script compiles and uses the CLI."""

from __future__ import annotations

import py_compile
import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import ROOT, require

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
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Namespace",
                     "ServiceAccount"]
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


def test_the_daemonset_reads_cgroups_with_the_least_it_needs(docs: list[dict[str, Any]]) -> None:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
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
    assert int(env["MAX_SIZE"]) > 0
    resources = container["resources"]
    assert resources["limits"]["cpu"] and resources["limits"]["memory"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]


def test_it_may_only_read_pods(docs: list[dict[str, Any]]) -> None:
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list"]}]


def test_the_script_compiles_and_runs_record_per_pod(tmp_path: Any) -> None:
    script = RECORDER / "recorder.py"
    py_compile.compile(str(script), cfile=str(tmp_path / "r.pyc"), doraise=True)
    text = script.read_text()
    assert '"http-timing", "record", f"k8s:{namespace}/{name}"' in text
    assert '"--pod-uid", uid' in text and "spec.nodeName=" in text
