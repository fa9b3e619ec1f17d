"""``advise --k8s NS/deployment/NAME`` on a Deployment of two running pods, on the project's
node (kubenode; marker ``kube``): ``k8s/``'s limited Deployment scaled to 2 replicas in a
namespace of its own (``tl-multipod-test``), its Ingress on the node's Traefik, the load sent
from the host to Traefik's pod IP with the Ingress's Host header (Traefik spreads it over the
pods).

Checked with the kernel's and the API's own words, not the tool's: a thread reads both pods'
quota files through the whole advise (every pod saw the same limits, in the same order); both
pods' groups used CPU (the load reached both); afterwards each pod's resources, restart count,
container id and QoS class are as before and its quota file reads the shipped limit
(``k8s/deployment-limited.yaml``) again. The tool's
answer carries, per run, the throttled requests and periods the pods' groups counted (their
sum, the quota summed: two pods at L read 2 L). SIGTERM mid-sweep puts both pods back; a lost
API server leaves one ``kubectl patch pod`` per pod, which puts them back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from client.data.timeline import read_timeline
from client.run.cgroup_lookup import find_pod_directory
from kubenode import node as kubenode
from kubenode.traefik import INGRESS_CLASS, WEB_PORT
from tests.advise_support import advice, check_counted_by_the_group
from tests.kube import live_pods, namespace_gone, namespaced_overlay, shipped_limit, wait_for
from tests.support import BIN, ROOT, stop_by_pid
from tests.test_commands_advise_k8s import CPU, Proxy, _has_service_image, kubeconfig_through, timed

pytestmark = pytest.mark.node

NS = "tl-multipod-test"
HOST = f"limited.{NS}.localhost"
PATH = "/cpuBurnFlow?iterations=5000"
LIMIT = shipped_limit()                 # k8s/deployment-limited.yaml's limits.cpu: put back


def overlay(k8s: Path, directory: Path) -> Path:
    """``k8s/`` moved into ``NS``: the limited Deployment at 2 replicas, its Service, its
    Ingress on a host of its own for the node's class (the Job, the limitless Deployment and
    its Ingress deleted)."""
    return namespaced_overlay(k8s, directory, NS, [
        ("batch/v1", "Job", "http-timing"), ("apps/v1", "Deployment", "limitless"),
        ("networking.k8s.io/v1", "Ingress", "limitless")], f"""  - target:
      kind: Deployment
      name: limited
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 2
  - target:
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


@dataclass
class Deployed:
    node: kubenode.Node
    env: dict[str, str]
    base: str                    # Traefik's web entry point, from the host

    def pods(self) -> list[dict[str, Any]]:
        return live_pods(self.node, NS, "limited")

    def state(self) -> list[tuple[Any, ...]]:
        """Per pod what must be as before: the container's resources (spec and status),
        restart count, container id, the QoS class."""
        out = []
        for pod in self.pods():
            status = pod["status"]["containerStatuses"][0]
            out.append((pod["metadata"]["name"], pod["spec"]["containers"][0]["resources"],
                        status.get("resources"), status["restartCount"],
                        status["containerID"], pod["status"]["qosClass"]))
        return out


def pod_group(pod: dict[str, Any]) -> Path:
    group = find_pod_directory(CPU, pod["metadata"]["uid"], None)
    assert group is not None
    return group


def counters(group: Path) -> tuple[int, int]:
    """(nr_periods, nr_throttled) of the group's cpu.stat."""
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["nr_periods"]), int(stat["nr_throttled"])


def periods(group: Path) -> int:
    """The group's ``nr_periods``: periods in which it ran under its quota."""
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["nr_periods"])


@pytest.fixture(scope="module")
def deployed(kube_node: kubenode.Node, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Deployed]:
    if not _has_service_image(kube_node):   # a node of its own (CI): the images from here
        kubenode.load_project_images(kube_node.lay, print, ROOT)
    made = overlay(ROOT / "k8s", tmp_path_factory.mktemp("multipod-overlay"))
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
            """Five requests in a row answered within 2 s each: Traefik knows both pods (a
            namespace made again may leave it an old endpoint for a while)."""
            try:
                return all(httpx.get(base + PATH, headers={"Host": HOST},
                                     timeout=2).status_code == 200 for _ in range(5))
            except httpx.HTTPError:
                return False

        wait_for(f"{HOST} through Traefik", answers, 120, 0.5)
        env = dict(os.environ, KUBECONFIG=str(kube_node.lay.kubeconfig),
                   PATH=f"{kube_node.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        yield Deployed(kube_node, env, base)
    finally:
        kube_node.kubectl("delete", "-k", str(made), "--wait=false", check=False, timeout=120)


class QuotaWatch:
    """Reads each pod's quota file every 50 ms on a thread; ``seen[pod]``: the quotas in the
    order they were in force (each change once)."""

    def __init__(self, groups: dict[str, Path]) -> None:
        self.groups = groups
        self.seen: dict[str, list[int]] = {name: [] for name in groups}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            for name, group in self.groups.items():
                quota = int((group / "cpu.cfs_quota_us").read_text())
                if not self.seen[name] or self.seen[name][-1] != quota:
                    self.seen[name].append(quota)
            self.stop.wait(0.05)

    def close(self) -> dict[str, list[int]]:
        self.stop.set()
        self.thread.join(timeout=5)
        return self.seen


def test_advise_resizes_every_pod_alike_and_puts_them_back(deployed: Deployed,
                                                          tmp_path: Path) -> None:
    pods = deployed.pods()
    assert len(pods) == 2
    before = deployed.state()
    groups = {p["metadata"]["name"]: pod_group(p) for p in pods}
    ran_before = {name: periods(g) for name, g in groups.items()}
    args = ["advise", "--k8s", f"{NS}/deployment/limited", "--url", deployed.base + PATH,
            "-H", f"Host: {HOST}", "--p99", "80", "--requests", "40", "--profile-seconds", "2",
            "--name", "m", "--json"]
    began = time.monotonic()
    containers = {p["metadata"]["name"]: pod_group(p) / p["status"]["containerStatuses"][0][
        "containerID"].split("://")[1] for p in pods}
    counted_before = [counters(g) for g in containers.values()]
    watch = QuotaWatch(groups)
    try:
        result = timed(deployed, *args, cwd=tmp_path, timeout=600)
    finally:
        seen = watch.close()
    counted_after = [counters(g) for g in containers.values()]
    print(result.stderr[-6000:])
    print(f"advise on 2 pods: {time.monotonic() - began:.0f} s; quotas seen {seen}")
    assert deployed.state() == before               # resources, restarts, container ids
    # every pod went through the same limits (at least the profile's, at all the CPUs), and
    # is back at the shipped limit, whichever the outcome
    first, second = seen.values()
    assert first == second and len(first) >= 3 and first[0] == first[-1] == LIMIT.quota_us, seen
    for group in groups.values():
        assert int((group / "cpu.cfs_quota_us").read_text()) == LIMIT.quota_us
    # the load reached both pods (Traefik spread it): each group ran periods of its quota
    for name, group in groups.items():
        assert periods(group) > ran_before[name] + 10, name
    answer = advice(result, tmp_path, "m")
    if answer is None:
        return      # refused after the profile (checked): the pods missed 80 ms at 2 CPUs
    inplace = answer["inplace"]
    assert inplace["target"] == f"k8s:{NS}/deployment/limited"
    assert inplace["original"]["quota_us"] == inplace["left_at"]["quota_us"] == LIMIT.quota_us
    assert inplace["unchanged"] == "; ".join(
        f"pod {NS}/{name}, container burn-service: restart count 0 and container id "
        f"{cid.split('://')[1][:12]} unchanged" for name, _, _, _, cid, _ in before)
    # the restore hint printed before anything changed: one kubectl command per pod
    hint = next(line for line in result.stderr.splitlines() if "put it back with:" in line)
    for name in groups:
        assert f"kubectl patch pod {name} -n {NS} --subresource resize" in hint
    # each run: what the two pods' groups counted (their timeline's cpu.stat changes), at the
    # pods' limit summed
    check_counted_by_the_group(answer, tmp_path, "m", quota_scale=2)
    counted = inplace["cgroup"]
    limited = [r for r in answer["runs"] if r["role"] != "profile"]
    assert limited
    for run in limited:
        assert counted[run["name"]]["nr_periods"] > 0
    # what the runs say is within what the kernel counted in the two containers' groups (the
    # quota in force's) over the whole advise, and each run summed both of them
    for k in (0, 1):     # nr_periods, nr_throttled
        grown = sum(after[k] - was[k] for was, after in zip(counted_before, counted_after))
        said = sum(report[("nr_periods", "nr_throttled")[k]] for report in counted.values()
                   if report is not None)
        print(f"{('nr_periods', 'nr_throttled')[k]}: runs {said}, kernel {grown}")
        assert said <= grown and (said > 0 or k == 1)
    first_run = limited[0]["name"].split(" + ")[0]
    meta = json.loads((tmp_path / "raw-data" / f"{first_run}.json").read_text())
    assert sorted(p["levels"][0]["path"] for p in meta["cgroup"]["pods"]) == \
        sorted(map(str, containers.values()))


def test_sigterm_mid_sweep_puts_every_pod_back(deployed: Deployed, tmp_path: Path) -> None:
    """SIGTERM once both pods are at the sweep's first limit (two connections: the sampler's
    timeline, not the sequential probes): both are put back, as before; the timeline so far is
    the two pods' sum, at their quota summed."""
    before = deployed.state()
    groups = [pod_group(p) for p in deployed.pods()]
    proc = subprocess.Popen([str(BIN / "http-timing"), "sweep", "--k8s",
                             f"{NS}/deployment/limited", "--url", deployed.base + PATH, "-H",
                             f"Host: {HOST}", "--cpus", "0.7", "--concurrency", "2",
                             "--requests", "2000"],
                            cwd=tmp_path, env=deployed.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for("0.7 CPU in force in both pods", lambda: all(
            int((g / "cpu.cfs_quota_us").read_text()) == 70000 for g in groups), 120, 0.2)
        wait_for("the run's timeline", lambda: any(
            len(path.read_text().splitlines()) > 20
            for path in (tmp_path / "raw-data").glob("*.cgroup.csv")), 60, 0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        stop_by_pid(proc)
    print(out[-2000:], err[-2000:])
    assert f"in place: restored: {LIMIT.cpus:g} CPU" in out
    assert out.count("restart count 0 and container id") == 2
    assert [int((g / "cpu.cfs_quota_us").read_text()) for g in groups] == [LIMIT.quota_us] * 2
    assert deployed.state() == before
    (timeline_csv,) = (tmp_path / "raw-data").glob("*.cgroup.csv")
    timeline = read_timeline(timeline_csv)
    assert len(timeline) > 10 and timeline[-1].usage_ns > timeline[0].usage_ns
    assert {s.quotas[0] for s in timeline} == {(140000, 100000)}    # 2 x 0.7 CPU


def test_a_lost_api_server_leaves_one_kubectl_line_per_pod(deployed: Deployed,
                                                          tmp_path: Path) -> None:
    """The API server lost once both pods are at the sweep's first limit (a kubeconfig
    through a local proxy the test stops): the tool says it could not put them back, with a
    ``kubectl patch pod`` per pod; the test runs that line and both are as before."""
    before = deployed.state()
    groups = {p["metadata"]["name"]: pod_group(p) for p in deployed.pods()}
    config = yaml.safe_load(Path(deployed.node.lay.kubeconfig).read_text())
    host, port = config["clusters"][0]["cluster"]["server"].removeprefix("https://").split(":")
    proxy = Proxy((host, int(port)))
    kubeconfig = kubeconfig_through(deployed.node, f"https://127.0.0.1:{proxy.port}", tmp_path)
    proc = subprocess.Popen([str(BIN / "http-timing"), "sweep", "--k8s",
                             f"{NS}/deployment/limited", "--url", deployed.base + PATH, "-H",
                             f"Host: {HOST}", "--cpus", "0.5,0.4", "--requests", "2000"],
                            cwd=tmp_path, env=dict(deployed.env, KUBECONFIG=str(kubeconfig)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("0.5 CPU in force in both pods", lambda: all(
            int((g / "cpu.cfs_quota_us").read_text()) == 50000 for g in groups.values()),
            120, 0.2)
        proxy.stop()
        out, err = proc.communicate(timeout=300)
    finally:
        proxy.stop()
        stop_by_pid(proc)
    print(out[-3000:], err[-3000:])
    assert proc.returncode == 2
    # the error names the server lost: the API client's words, or kubectl's when the loss
    # came while the pods' groups were being found (which call meets it first is timing)
    assert f"https://127.0.0.1:{proxy.port}" in err, err
    line = next(x for x in out.splitlines() if "could NOT put the limit back" in x)
    hint = line[line.index("kubectl patch pod"):]
    assert hint.count("kubectl patch pod") == 2
    for name in groups:
        assert f"kubectl patch pod {name} -n {NS} --subresource resize --patch " in hint
    subprocess.run(["bash", "-c", hint], env=deployed.env, check=True, timeout=60)
    wait_for("the shipped limit back in both", lambda: all(
        int((g / "cpu.cfs_quota_us").read_text()) == LIMIT.quota_us for g in groups.values()),
        60, 0.2)
    wait_for("the pods as before", lambda: deployed.state() == before, 60, 0.2)
