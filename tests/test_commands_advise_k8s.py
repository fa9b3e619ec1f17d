"""``advise``/``sweep`` on a Kubernetes Deployment's live pod (``--k8s NS/deployment/NAME``,
``--cgroup k8s:NS/POD``), on the project's node (kubenode; marker ``kube``): the project's
``k8s/`` in a namespace of its own (``tl-advise-test``, through a kustomize overlay that keeps
the limited Deployment and its Service), the load sent to the pod's IP through the node's veth.

- whichever outcome the machine's load leads to, the pod's resources, restart count and
  container id are as before (read with kubectl, not from the tool) and its quota is the
  shipped one; an answer agrees with its own runs and the pod's cpu.stat in them
  (tests/advise_support.py), a refusal is one line;
- a lost API server mid-run (a kubeconfig through a local TCP proxy that the test stops): the
  tool says it could not put the limit back and prints the kubectl command that does, which
  the test runs;
- SIGTERM or Ctrl-C (SIGINT) mid-sweep: the limit is put back;
- ``k8s/advise-rbac.yaml``: strictly valid, and the API grants exactly what it says; a user
  without it gets one line naming the verb and the resource.

Every figure is judged against what the same run measured.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from client.run.cgroup_lookup import find_pod_directory
from kubenode import node as kubenode
from kubenode.images import has_image
from kubenode.project_images import SERVICE_IMAGE
from tests.advise_support import advice, check_counted_by_the_group
from tests.kube import namespace_gone, namespaced_overlay, one_live_pod, shipped_limit, wait_for
from tests.support import BIN, ROOT, stop_by_pid

pytestmark = pytest.mark.node

NS = "tl-advise-test"
RBAC = ROOT / "k8s" / "advise-rbac.yaml"
URL = "http://{ip}:7800/cpuBurnFlow?iterations=5000"
CPU = Path("/sys/fs/cgroup/cpu")        # the node runs on cgroup v1 (tests/kube.py)
LIMIT = shipped_limit()                 # k8s/deployment-limited.yaml's limits.cpu: put back


def advise_overlay(k8s: Path, directory: Path, namespace: str) -> Path:
    """``k8s/`` moved into ``namespace``: the limited Deployment and the Services only (the
    Job, the limitless Deployment and the Ingresses deleted by patches)."""
    return namespaced_overlay(k8s, directory, namespace, [
        ("batch/v1", "Job", "http-timing"), ("apps/v1", "Deployment", "limitless"),
        ("networking.k8s.io/v1", "Ingress", "*")])


@dataclass
class Deployed:
    node: kubenode.Node
    env: dict[str, str]          # KUBECONFIG and kubectl on PATH, for http-timing

    def pod(self) -> dict[str, Any]:
        return one_live_pod(self.node, NS, "limited")

    def state(self) -> tuple[Any, ...]:
        """What must be as before: the container's resources (spec and status), restart
        count, container id, the pod's QoS class."""
        pod = self.pod()
        status = pod["status"]["containerStatuses"][0]
        return (pod["metadata"]["name"], pod["spec"]["containers"][0]["resources"],
                status.get("resources"), status["restartCount"], status["containerID"],
                pod["status"]["qosClass"])


def _has_service_image(node: kubenode.Node) -> bool:
    return has_image(node.containerd_address, SERVICE_IMAGE)


@pytest.fixture(scope="module")
def deployed(kube_node: kubenode.Node, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Deployed]:
    if not _has_service_image(kube_node):   # a node of its own (CI): the images from here
        kubenode.load_project_images(kube_node.lay, print, ROOT)
    overlay = advise_overlay(ROOT / "k8s", tmp_path_factory.mktemp("advise-overlay"), NS)
    namespace_gone(kube_node, NS)
    kube_node.kubectl("apply", "-k", str(overlay), timeout=120)
    try:
        kube_node.kubectl("-n", NS, "rollout", "status", "deployment/limited",
                          "--timeout=300s", timeout=320)
        env = dict(os.environ, KUBECONFIG=str(kube_node.lay.kubeconfig),
                   PATH=f"{kube_node.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        yield Deployed(kube_node, env)
    finally:
        kube_node.kubectl("delete", "-k", str(overlay), "--wait=false", check=False,
                          timeout=120)


def timed(deployed: Deployed, *args: str, cwd: Path, env: dict[str, str] | None = None,
          timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "http-timing"), *args], cwd=cwd,
                          env=env or deployed.env, capture_output=True, text=True,
                          timeout=timeout)


def quota_of(pod: dict[str, Any]) -> int:
    """The pod's quota as the kernel holds it (the pod's group below the node's kubepods)."""
    group = find_pod_directory(CPU, pod["metadata"]["uid"], None)
    assert group is not None
    return int((group / "cpu.cfs_quota_us").read_text())


def test_advise_a_deployments_pod_in_place(deployed: Deployed, tmp_path: Path) -> None:
    before = deployed.state()
    ip = deployed.pod()["status"]["podIP"]
    result = timed(deployed, "advise", "--k8s", f"{NS}/deployment/limited", "--url",
                   URL.format(ip=ip), "--p99", "80", "--requests", "60", "--profile-seconds",
                   "3", "--name", "k", "--json", cwd=tmp_path, timeout=900)
    print(result.stderr[-6000:])
    assert deployed.state() == before               # resources, restarts, container id
    assert quota_of(deployed.pod()) == LIMIT.quota_us
    answer = advice(result, tmp_path, "k")
    if answer is None:
        return      # refused after the profile (checked): the pod missed 80 ms at 2 CPUs
    inplace = answer["inplace"]
    assert inplace["kind"] == "k8s" and inplace["target"].startswith(f"k8s:{NS}/limited-")
    assert inplace["original"]["quota_us"] == inplace["left_at"]["quota_us"] == LIMIT.quota_us
    pod_name = before[0]
    assert inplace["unchanged"] == (f"pod {NS}/{pod_name}, container burn-service: restart "
                                    f"count 0 and container id "
                                    f"{before[4].split('://')[1][:12]} unchanged")
    # each run carries what the pod's cpu.stat counted, at the limit the resize set
    check_counted_by_the_group(answer, tmp_path, "k")
    profile = inplace["cgroup"][answer["runs"][0]["name"]]   # no limit for a pod: all CPUs
    assert profile["quota_cpus"] == pytest.approx(answer["search"]["ceiling_cpus"])
    if answer["recommended"] is None:
        return      # none met up to the ceiling (exit 3): checked against its runs
    permanent = "\n".join(inplace["permanent"])
    assert f"kubectl patch deployment limited -n {NS} --type strategic" in permanent
    assert "kind: Deployment" in permanent and "          - name: burn-service" in permanent


class Proxy:
    """A TCP proxy on 127.0.0.1 to the API server, stopped by the test (a lost connection)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=10)
            self.connections += [client, server]
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while not self.stopped.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    (b if source is a else a).sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                s.close()

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()
        for s in self.connections:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(timeout=5)


def kubeconfig_through(node: kubenode.Node, server: str, directory: Path,
                       token: str | None = None) -> Path:
    """The node's admin kubeconfig with another server address (or a token's user)."""
    config = yaml.safe_load(Path(node.lay.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = server
    if token is not None:
        config["users"][0]["user"] = {"token": token}
    path = directory / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def test_a_lost_api_server_says_what_it_could_not_restore(deployed: Deployed,
                                                           tmp_path: Path) -> None:
    before = deployed.state()
    pod = deployed.pod()
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    config = yaml.safe_load(Path(deployed.node.lay.kubeconfig).read_text())
    host, port = config["clusters"][0]["cluster"]["server"].removeprefix("https://").split(":")
    proxy = Proxy((host, int(port)))
    kubeconfig = kubeconfig_through(deployed.node, f"https://127.0.0.1:{proxy.port}", tmp_path)
    env = dict(deployed.env, KUBECONFIG=str(kubeconfig))
    proc = subprocess.Popen([str(BIN / "http-timing"), "sweep", "--cgroup",
                             f"k8s:{NS}/{name}", "--url", URL.format(ip=ip), "--cpus",
                             "0.5,0.4", "--requests", "1000"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:       # the first limit in force and its run under way
            seen.append(line)
            if line.startswith("[1/2]"):
                break
        wait_for("0.5 CPU in force", lambda: quota_of(deployed.pod()) == 50000, 60, 0.2)
        proxy.stop()
        out, err = proc.communicate(timeout=300)
    finally:
        proxy.stop()
        stop_by_pid(proc)
    text = "".join(seen) + out
    print(text[-3000:], err[-3000:])
    assert proc.returncode == 2
    line = next(x for x in text.splitlines() if "could NOT put the limit back" in x)
    assert f"lost the API server at https://127.0.0.1:{proxy.port}" in line
    hint = line[line.index("kubectl patch pod"):]
    assert hint.startswith(f"kubectl patch pod {name} -n {NS} --subresource resize --patch ")
    assert quota_of(deployed.pod()) in (50000, 40000)   # left as set: the API was gone
    # the printed command, as the user runs it (with a kubeconfig that reaches the server)
    subprocess.run(["bash", "-c", hint], env=deployed.env, check=True, timeout=60)
    # the error: one line naming the server it lost (what noticed first may be the API
    # client or kubectl, as the run was reading the pod)
    assert err.count("\n") == 1 and f"127.0.0.1:{proxy.port}" in err, err
    wait_for("the shipped limit back", lambda: quota_of(deployed.pod()) == LIMIT.quota_us, 60,
             0.2)
    # the kubelet writes the group first, the pod's status next
    wait_for("the pod as before", lambda: deployed.state() == before, 60, 0.2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_sweep_puts_the_limit_back(deployed: Deployed, tmp_path: Path,
                                                signum: int) -> None:
    before = deployed.state()
    pod = deployed.pod()
    proc = subprocess.Popen([str(BIN / "http-timing"), "sweep", "--k8s",
                             f"{NS}/deployment/limited", "--url",
                             URL.format(ip=pod["status"]["podIP"]), "--cpus", "0.7",
                             "--requests", "2000"], cwd=tmp_path, env=deployed.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("0.7 CPU in force", lambda: quota_of(deployed.pod()) == 70000, 120, 0.2)
        time.sleep(1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        stop_by_pid(proc)
    print(out[-2000:], err[-2000:])
    assert f"in place: restored: {LIMIT.cpus:g} CPU" in out
    assert "restart count 0 and container id" in out
    assert quota_of(deployed.pod()) == LIMIT.quota_us
    assert deployed.state() == before


def quotas_of(pod: dict[str, Any]) -> tuple[int, int]:
    """The kernel's ``cpu.cfs_quota_us`` of the pod's group and of its container's."""
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    container = find_pod_directory(CPU, pod["metadata"]["uid"], cid)
    assert container is not None
    return quota_of(pod), int((container / "cpu.cfs_quota_us").read_text())


def test_a_resize_by_another_mid_search_stops_it_and_puts_all_back(deployed: Deployed,
                                                                   tmp_path: Path) -> None:
    """Another controller (as a VPA's updater in InPlaceOrRecreate does) resizes the pod
    through pods/resize while advise's profile run is under way: one line naming what
    changed, exit 2, and spec, status and the kernel's quota files as before the search."""
    before, pod = deployed.state(), deployed.pod()
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    shipped = quotas_of(pod)
    print(f"quotas before (pod, container): {shipped}")
    assert shipped == (LIMIT.quota_us, LIMIT.quota_us)
    other = {"spec": {"containers": [{"name": "burn-service", "resources": {
        "limits": {"cpu": "900m"}, "requests": {"cpu": "900m"}}}]}}   # both, as a VPA moves them
    sent: list[tuple[int, int]] = []      # the tool's quotas when the other resize was sent
    failed: list[BaseException] = []

    def resize_meanwhile() -> None:
        try:   # the tool's first resize in force (the profile's), its run under way
            seen = wait_for("the tool's resize", lambda: (q := quotas_of(deployed.pod()))[0]
                            != LIMIT.quota_us and q, 120, 0.1)
            time.sleep(1.0)
            sent.append(seen)
            deployed.node.kubectl("-n", NS, "patch", "pod", name, "--subresource", "resize",
                                  "--patch", json.dumps(other))
        except BaseException as exc:   # said by the test below
            failed.append(exc)

    thread = threading.Thread(target=resize_meanwhile, daemon=True)
    thread.start()
    result = timed(deployed, "advise", "--k8s", f"{NS}/deployment/limited", "--url",
                   URL.format(ip=ip), "--p99", "80", "--requests", "60", "--profile-seconds",
                   "4", "--name", "v", cwd=tmp_path, timeout=600)
    thread.join(timeout=130)
    print(result.stdout[-3000:], result.stderr[-3000:])
    assert not failed, failed
    print(f"quotas when the other resize was sent (pod, container): {sent}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    line = lines[0]
    tool_m = sent[0][0] // 100   # the tool's limit in millicores, as its quota says
    assert "its limit changed during run v-advise-" in line, line
    assert f"container burn-service's limits.cpu {tool_m}m -> 900m" in line, line
    # the kubelet may not have written the new quota yet when the run ended
    assert "the quota (" not in line or "-> 90000/100000 µs" in line, line
    assert "a VPA's updater (InPlaceOrRecreate) or another controller" in line
    assert "--despite-vpa does not help here" in line
    assert f"in place: restored: {LIMIT.cpus:g} CPU" in result.stdout
    after = quotas_of(deployed.pod())
    print(f"quotas after (pod, container): {after}")
    assert after == shipped
    wait_for("the pod as before", lambda: deployed.state() == before, 60, 0.2)


def rbac_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def test_the_advise_rbac_is_strictly_valid_and_least() -> None:
    docs = rbac_docs()
    for d in docs:
        kubernetes_validate.validate(d, "1.30.0", strict=True)
    rules = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "Role"}
    assert rules == {
        "throttle-lab-advise": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
            {"apiGroups": ["autoscaling.k8s.io"], "resources": ["verticalpodautoscalers"],
             "verbs": ["list"]},
            # advise --replicas: the count changed and put back, and an HPA that would fight it
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "patch"]},
            {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
             "verbs": ["list"]},
            # advise --passive --replicas: how the pods' Service spreads the requests
            {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}],
        "throttle-lab-advise-apply": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}]}


def test_the_api_grants_what_the_role_says_and_a_missing_one_is_one_line(
        deployed: Deployed, tmp_path: Path) -> None:
    node = deployed.node
    node.kubectl("apply", "-n", NS, "-f", str(RBAC))
    sa = f"system:serviceaccount:{NS}:throttle-lab-advise"
    for verb, resource, allowed in (("get", "pods", "yes"), ("list", "pods", "yes"),
                                    ("patch", "pods --subresource resize", "yes"),
                                    ("patch", "deployments", "yes"), ("delete", "pods", "no"),
                                    ("patch", "pods", "no"), ("get", "secrets", "no"),
                                    ("patch", "deployments --subresource scale", "yes"),
                                    ("list", "horizontalpodautoscalers", "yes"),
                                    ("list", "services", "yes"), ("get", "services", "no"),
                                    ("delete", "deployments", "no")):
        got = node.kubectl("auth", "can-i", "-n", NS, "--as", sa, verb, *resource.split(),
                           check=False).stdout.strip()
        assert got == allowed, (verb, resource)
    # a user with none of it: one line naming the verb and the resource
    node.kubectl("create", "serviceaccount", "-n", NS, "nobody", check=False)
    token = node.kubectl("create", "token", "-n", NS, "nobody").stdout.strip()
    config = yaml.safe_load(Path(node.lay.kubeconfig).read_text())
    kubeconfig = kubeconfig_through(node, config["clusters"][0]["cluster"]["server"], tmp_path,
                                    token)
    result = timed(deployed, "sweep", "--k8s", f"{NS}/deployment/limited", "--url",
                   "http://127.0.0.1:9/", "--cpus", "0.5", cwd=tmp_path,
                   env=dict(deployed.env, KUBECONFIG=str(kubeconfig)), timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"http-timing: no permission: list pods in namespace {NS} "
                                     "(the Role in k8s/advise-rbac.yaml grants what advise "
                                     "needs)")


def test_apply_patches_the_deployment(deployed: Deployed, monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    """``--apply``'s patch (the limiter's, as advise calls it at the end) through the real API:
    the Deployment's template gets the limit, its request kept (above the limit: moved), and
    rolls out; put back to the shipped limit after. Last in this file: it replaces the pod."""
    from client.run.limiters import LimiterOptions, limiter_for
    from client.run.service_group import resolve_cgroup
    from cpuquota.limit import Limit

    for key in ("KUBECONFIG", "PATH"):
        monkeypatch.setenv(key, deployed.env[key])
    node = deployed.node
    name = deployed.pod()["metadata"]["name"]
    limiter = limiter_for(resolve_cgroup(f"k8s:{NS}/{name}"), options=LimiterOptions())
    assert limiter.names["owner"] == "limited"

    def template() -> dict[str, Any]:
        out = node.kubectl("-n", NS, "get", "deployment", "limited", "-o", "json").stdout
        return json.loads(out)["spec"]["template"]["spec"]["containers"][0]["resources"]

    shipped = f"{LIMIT.millicores}m"                    # the request, as the limit
    try:
        assert template()["requests"]["cpu"] == template()["limits"]["cpu"] == shipped
        done = limiter.patch_deployment(Limit(0.45))    # type: ignore[attr-defined]
        assert done.startswith(f"applied: deployment {NS}/limited, container burn-service: "
                               "limits.cpu 450m")
        assert template()["limits"]["cpu"] == "450m"
        assert template()["requests"]["cpu"] == shipped
        below = Limit(LIMIT.cpus * 0.8)                 # under the request: it must move
        limiter.patch_deployment(below)                 # type: ignore[attr-defined]
        # a request above a limit is refused: the request moves down with it
        assert template()["limits"]["cpu"] == template()["requests"]["cpu"] == \
            f"{below.millicores}m"
        node.kubectl("-n", NS, "rollout", "status", "deployment/limited", "--timeout=180s",
                     timeout=200)
    finally:
        node.kubectl("-n", NS, "patch", "deployment", "limited", "--type", "strategic", "-p",
                     json.dumps({"spec": {"template": {"spec": {"containers": [
                         {"name": "burn-service", "resources": {
                             "limits": {"cpu": shipped}, "requests": {"cpu": shipped}}}]}}}}))
        node.kubectl("-n", NS, "rollout", "status", "deployment/limited", "--timeout=180s",
                     timeout=200)
