"""The tools against the kubelet's own groups, on the project's node (kubenode): the limited
Deployment of ``k8s/deployment-limited.yaml`` (its ``limits.cpu``, read by
``tests.kube.shipped_limit``: the figures below follow it) in a namespace of this
file's own, timed from the HOST through the veth (the pod's address) with
``--cgroup k8s:NS/POD``. The kubelet puts the quota on the pod's group and on its container's
(cgroupfs driver, the node's ``cgroupRoot``): both are found, both are sampled, and what the
run marks agrees with what the kernel counted in their ``cpu.stat``.

The node is one per session (``kube_node``); on a laptop without root this skips with the
reason, under CI=true it must run.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from client.data.files import read_run
from client.data.timeline import (CgroupSample, level_timelines, read_timeline,
                                  timeline_path)
from kubenode import images as node_images
from kubenode import node as kubenode
from kubenode.config import CGROUP_ROOT
from kubenode.project_images import SERVICE_IMAGE
from kubenode.traefik import INGRESS_CLASS, WEB_PORT, access_log
from tests.kube import pods_namespace, shipped_limit, wait_for
from tests.support import BIN, ROOT, check_split_by_quota, http_timing, stop_by_pid

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

NAMESPACE = "tl-cgroup-test"
CPU = Path("/sys/fs/cgroup/cpu")
MS = 1_000_000
BURN = "/cpuBurnFlow?iterations=5000"
INGRESS_HOST = f"limited.{NAMESPACE}.localhost"
LIMIT = shipped_limit()              # the limited Deployment's limits.cpu, as shipped
CPUS = f"{LIMIT.cpus:g} CPU"         # as the tool words it


@dataclass(frozen=True)
class Pod:
    name: str
    uid: str
    container_id: str
    ip: str

    @property
    def group(self) -> Path:
        """The pod's group in the cpu hierarchy (Burstable: requests.memory < limits.memory)."""
        return CPU / CGROUP_ROOT / "kubepods" / "burstable" / f"pod{self.uid}"

    @property
    def container_group(self) -> Path:
        return self.group / self.container_id

    @property
    def base_url(self) -> str:
        return f"http://{self.ip}:7800"


def kubectl_json(node: kubenode.Node, *args: str) -> dict:  # type: ignore[type-arg]
    return json.loads(node.kubectl(*args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def service_image(kube_node: kubenode.Node) -> None:
    """The project's service image in the node: imported once (built from this checkout's
    docker/Dockerfile) when the node does not have it yet."""
    if not node_images.has_image(kube_node.containerd_address, SERVICE_IMAGE):
        kubenode.load_project_images(kube_node.lay, print, ROOT)


@pytest.fixture(scope="module")
def namespace(kube_node: kubenode.Node, service_image: None) -> Iterator[str]:
    with pods_namespace(kube_node, NAMESPACE):
        yield NAMESPACE


@pytest.fixture(scope="module")
def kube_env(kube_node: kubenode.Node) -> Iterator[None]:
    """The shell a user has after ``make kube-node``: KUBECONFIG and the node's kubectl first
    on PATH (what http-timing's k8s: lookup runs)."""
    saved = {key: os.environ.get(key) for key in ("KUBECONFIG", "PATH")}
    os.environ["KUBECONFIG"] = str(kube_node.lay.kubeconfig)
    os.environ["PATH"] = f"{kube_node.lay.kube_bin}:{saved['PATH'] or ''}"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def limited_deployment() -> dict:  # type: ignore[type-arg]
    """k8s/deployment-limited.yaml as it is, in this file's namespace, probed every second
    (Ready sooner) and with no grace period (deleted at once)."""
    doc = yaml.safe_load((ROOT / "k8s" / "deployment-limited.yaml").read_text())
    doc["metadata"]["namespace"] = NAMESPACE
    spec = doc["spec"]["template"]["spec"]
    spec["terminationGracePeriodSeconds"] = 0
    spec["containers"][0]["readinessProbe"]["periodSeconds"] = 1
    return doc


@pytest.fixture(scope="module")
def limited(kube_node: kubenode.Node, namespace: str, kube_env: None) -> Pod:
    kube_node.kubectl("apply", "-f", "-", input=json.dumps(limited_deployment()))
    kube_node.kubectl("-n", namespace, "rollout", "status", "deployment/limited",
                      "--timeout=180s", timeout=200)
    pods = kubectl_json(kube_node, "-n", namespace, "get", "pods", "-l",
                        "app.kubernetes.io/component=limited")["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")]
    assert len(running) == 1, [p["metadata"]["name"] for p in pods]
    info = running[0]
    cid = info["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    return Pod(info["metadata"]["name"], info["metadata"]["uid"], cid, info["status"]["podIP"])


def _container(node: kubenode.Node, pod: Pod) -> tuple[int, str]:
    """The pod's container: its restart count and ID, as the API says."""
    info = kubectl_json(node, "-n", NAMESPACE, "get", "pod", pod.name)
    status = info["status"]["containerStatuses"][0]
    return status["restartCount"], status["containerID"]


def throttled_bounds(timeline: list[CgroupSample]) -> tuple[int, int]:
    """What the marks of one-at-a-time requests must come to, from the kernel's counters of
    both levels (a request is marked by the level that throttled it most): at least the
    most-throttled level's throttled time, at most the sum over the sampling intervals of the
    larger level's throttled time in each (the two levels may throttle in different periods)."""
    series = level_timelines(timeline)
    most = max(s[-1].throttled_ns - s[0].throttled_ns for s in series)
    union = sum(max(s[i].throttled_ns - s[i - 1].throttled_ns for s in series)
                for i in range(1, len(timeline)))
    return most, union


def cpu_stat(group: Path) -> dict[str, int]:
    return {key: int(value) for key, value in
            (line.split() for line in (group / "cpu.stat").read_text().splitlines())}


def test_a_run_from_the_host_marks_what_the_pod_s_groups_counted(
        tmp_path: Path, limited: Pod) -> None:
    """``http-timing --cgroup k8s:NS/POD`` from the host, against the pod's address: the
    container's group and the pod's are the two quota levels (the shipped limit each, found
    under the node's cgroupRoot), the marks add up to what their cpu.stat counted, and the report names
    the group whose quota throttled."""
    pod = limited
    assert (pod.group / "cpu.cfs_quota_us").read_text().strip() == str(LIMIT.quota_us)
    assert (pod.container_group / "cpu.cfs_quota_us").read_text().strip() == str(LIMIT.quota_us)
    before = {g: cpu_stat(g) for g in (pod.container_group, pod.group)}
    result = http_timing("--url", pod.base_url + BURN, "--cgroup",
                         f"k8s:{NAMESPACE}/{pod.name}", "--requests", "80", "--name", "a",
                         "--quiet", "--no-plot", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    after = {g: cpu_stat(g) for g in (pod.container_group, pod.group)}

    csv = tmp_path / "raw-data" / "a.csv"
    run = read_run(csv)
    meta = run.metadata.cgroup
    assert meta is not None
    assert meta["path"] == str(pod.container_group) and meta["version"] == 1
    assert [(lv["path"], lv["quota_us"], lv["period_us"]) for lv in meta["levels"]] == [
        (str(pod.container_group), LIMIT.quota_us, 100000),
        (str(pod.group), LIMIT.quota_us, 100000)]
    assert meta["usage_source"] == "cpuacct"   # the cpuacct hierarchy's twin of the group

    # the timeline's counters are the kernel's, level by level
    timeline = read_timeline(timeline_path(csv))
    levels = level_timelines(timeline)
    assert len(levels) == 2
    counted = []
    for group, series in zip((pod.container_group, pod.group), levels):
        first, last = series[0], series[-1]
        delta_ns = last.throttled_ns - first.throttled_ns
        delta_n = last.nr_throttled - first.nr_throttled
        kernel_ns = after[group]["throttled_time"] - before[group]["throttled_time"]
        kernel_n = after[group]["nr_throttled"] - before[group]["nr_throttled"]
        assert delta_ns <= kernel_ns and delta_n <= kernel_n   # the run is inside before/after
        counted.append((delta_n, delta_ns, group))
        print(f"{group.name[:12]}: nr_throttled +{delta_n} throttled_time "
              f"+{delta_ns / MS:.1f} ms (kernel, before/after the command: +{kernel_n}, "
              f"+{kernel_ns / MS:.1f} ms)")
    most_n, most_ns, most = max(counted, key=lambda c: c[1])
    assert most_ns > 100 * MS            # 5 ms a request, 80 of them: the quota bites

    marks_ns = [r.cgroup_throttled_ns for r in run.records]
    marks_n = [r.cgroup_nr_throttled for r in run.records]
    assert all(m is not None for m in marks_ns)
    marked = [r for r in run.records if r.cgroup_nr_throttled]
    print(f"marks: {len(marked)} of {len(run.records)} requests, "
          f"{sum(m or 0 for m in marks_ns) / MS:.1f} ms, {sum(m or 0 for m in marks_n)} "
          "throttled periods")
    # sequential: each request carries the change of the level that throttled it most
    least, most_union = throttled_bounds(timeline)
    assert least == most_ns
    assert 0.8 * least <= sum(m or 0 for m in marks_ns) <= 1.05 * most_union
    assert most_n * 0.75 <= sum(m or 0 for m in marks_n) <= sum(n for n, _, _ in counted)
    assert marked
    # the wall time a request was held: never more than it took, and some where the kernel
    # counted periods throttled inside it
    assert all(0 <= (r.cgroup_held_ns or 0) <= r.latency_ns for r in run.records)
    assert any(r.cgroup_held_ns for r in marked)

    report = http_timing("report", str(csv), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    print(report.stdout)
    # both levels hold the same quota (either may count more: the pod's group also carries the
    # pause container and the kubelet's probes): the report names the first, as the resolver
    # ordered them, the container's for a container's limit
    named = "/" + str(pod.container_group.relative_to(CPU))
    assert f"throttled by the quota on {named} ({CPUS})" in report.stdout
    for group in (pod.container_group, pod.group):
        assert f"{CPUS} per 100 ms on /{group.relative_to(CPU)}:" in report.stdout


@pytest.mark.parametrize("spec, expected", [
    (f"k8s:{NAMESPACE}/nosuch", f"no pod nosuch in namespace {NAMESPACE} "),
    ("k8s:nosuchns/limited", "no pod limited in namespace nosuchns "),
])
def test_an_unknown_pod_is_one_line(tmp_path: Path, limited: Pod, spec: str,
                                    expected: str) -> None:
    result = http_timing("--url", limited.base_url + BURN, "--cgroup", spec, "--requests", "3",
                         "--quiet", "--no-plot", cwd=tmp_path)
    assert result.returncode == 2
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1, \
        result.stderr
    assert not (tmp_path / "raw-data").exists() or not list((tmp_path / "raw-data").iterdir())


def test_no_permission_to_read_the_pod_is_one_line(
        tmp_path: Path, kube_node: kubenode.Node, limited: Pod) -> None:
    """A kubeconfig whose user may not get pods (a ServiceAccount without any role)."""
    kube_node.kubectl("-n", NAMESPACE, "create", "serviceaccount", "nobody", check=False)
    token = kube_node.kubectl("-n", NAMESPACE, "create", "token", "nobody",
                              "--duration", "10m").stdout.strip()
    config = tmp_path / "nobody.kubeconfig"
    config.write_text(kube_node.kubectl("config", "view", "--raw", "--minify").stdout)
    env = {**os.environ, "KUBECONFIG": str(config)}
    for argv in (["config", "set-credentials", "nobody", f"--token={token}"],
                 ["config", "set-context", "--current", "--user=nobody"]):
        subprocess.run([str(kube_node.lay.kube_bin / "kubectl"), *argv], env=env, check=True,
                       capture_output=True, timeout=30)
    os.environ["KUBECONFIG"] = str(config)
    try:
        result = http_timing("--url", limited.base_url + BURN, "--cgroup",
                             f"k8s:{NAMESPACE}/{limited.name}", "--requests", "3", "--quiet",
                             "--no-plot", cwd=tmp_path)
    finally:
        os.environ["KUBECONFIG"] = str(kube_node.lay.kubeconfig)
    assert result.returncode == 2
    assert (f"kubectl may not read pod {NAMESPACE}/{limited.name}: 'get pods' in namespace "
            f"{NAMESPACE} is needed") in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def resize(node: kubenode.Node, pod: Pod, cpu: str) -> None:
    node.kubectl("-n", NAMESPACE, "patch", "pod", pod.name, "--subresource", "resize", "-p",
                 json.dumps({"spec": {"containers": [
                     {"name": "burn-service", "resources": {"limits": {"cpu": cpu},
                                                            "requests": {"cpu": cpu}}}]}}))


def quotas_are(pod: Pod, quota_us: int) -> bool:
    return all((g / "cpu.cfs_quota_us").read_text().strip() == str(quota_us)
               for g in (pod.group, pod.container_group))


@pytest.fixture
def resizable(kube_node: kubenode.Node, limited: Pod) -> Iterator[Pod]:
    """The limited pod at the shipped limit; put back to it afterwards (in place, as the test
    did)."""
    assert quotas_are(limited, LIMIT.quota_us)
    yield limited
    resize(kube_node, limited, f"{LIMIT.millicores}m")
    wait_for("the pod back at the shipped limit", lambda: quotas_are(limited, LIMIT.quota_us),
             120, 0.2)


def test_an_in_place_resize_shows_in_watch_and_in_the_run_that_spans_it(
        tmp_path: Path, kube_node: kubenode.Node, resizable: Pod) -> None:
    """``kubectl patch pod --subresource resize`` from the shipped limit to 500m while
    ``watch k8s:NS/POD`` and a
    run with ``--cgroup k8s:NS/POD`` go on: the watch shows the new quota (the same process,
    no restart of anything), the run's timeline holds both quotas, and the report and the
    model take each request under the quota in force when it was sent."""
    pod = resizable
    spec = f"k8s:{NAMESPACE}/{pod.name}"
    started = _container(kube_node, pod)   # a slow start may have restarted it once already
    watch = subprocess.Popen([str(BIN / "http-timing"), "watch", spec, "--json", "--interval",
                              "0.25"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    requests = 500
    run = subprocess.Popen([str(BIN / "http-timing"), "--url", pod.base_url + BURN,
                            "--requests", str(requests), "--cgroup", spec, "--name", "resize",
                            "--quiet", "--no-plot"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    csv_path = tmp_path / "raw-data" / "resize.csv"
    try:
        wait_for("a hundred requests at the shipped limit", lambda: run.poll() is not None or (
            csv_path.exists() and len(csv_path.read_text().splitlines()) > 100), 120, 0.02)
        assert run.poll() is None, run.communicate()[1]
        t0 = time.monotonic()
        resize(kube_node, pod, "500m")
        wait_for("the kubelet's 50000 on both groups", lambda: quotas_are(pod, 50000), 120, 0.02)
        print(f"resize: both groups at 50000 µs {time.monotonic() - t0:.1f} s after the patch")
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        time.sleep(0.6)   # two more watch lines under 0.5
        assert watch.poll() is None, watch.communicate()[1]   # the same watch all along
    finally:
        stop_by_pid(run)
        watch.terminate()   # SIGTERM: the watch ends at once, its lines are all out
        watched, _ = watch.communicate(timeout=20)
        stop_by_pid(watch)
    assert _container(kube_node, pod) == started   # the resize restarted nothing

    timeline = read_timeline(timeline_path(csv_path))
    in_force = [min(s.quotas, key=lambda q: q[0] / q[1]) for s in timeline]
    assert in_force[0] == (LIMIT.quota_us, 100000) and in_force[-1] == (50000, 100000)
    assert sum(1 for a, b in zip(in_force, in_force[1:]) if a != b) == 1, in_force

    report = http_timing("report", str(csv_path), "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    parts = data["quotas"]
    print(json.dumps(parts, indent=1))
    assert [(p["quota_us"], p["cpus"]) for p in parts] == [(LIMIT.quota_us, LIMIT.cpus),
                                                          (50000, 0.5)]
    assert sum(p["requests"] for p in parts) == data["count"] == requests
    assert all(p["requests"] >= 50 for p in parts), parts
    check_split_by_quota(parts, LIMIT.cpus, 0.5)
    text = http_timing("report", str(csv_path), cwd=tmp_path).stdout
    assert "quota changed during the run" in text
    assert f"{CPUS} ({LIMIT.quota_us} µs per 100000 µs)" in text
    assert "0.5 CPU (50000 µs per 100000 µs)" in text

    predicted = http_timing("report", str(csv_path), "--predict", "--json", cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    by_quota = json.loads(predicted.stdout)["by_quota"]
    assert [p["span"]["cpus"] for p in by_quota] == [LIMIT.cpus, 0.5]
    assert f"{LIMIT.cpus:g}" in by_quota[0]["model_limit"] and "0.5" in by_quota[1]["model_limit"]
    assert [p["count"] for p in by_quota] == [p["requests"] for p in parts]

    seen = [json.loads(line)["quota_cpus"] for line in watched.splitlines() if line.strip()]
    print(f"watch: {len(seen)} lines, quotas {seen[0]} .. {seen[-1]}")
    assert seen[0] == LIMIT.cpus and seen[-1] == 0.5 and set(seen) == {LIMIT.cpus, 0.5}, seen


def limited_ingress() -> list[dict]:  # type: ignore[type-arg]
    """k8s/'s limited Service and Ingress, in this file's namespace; the Ingress on a host of
    its own (the project's namespace has the same one) and the node's class (Traefik)."""
    docs = []
    for name in ("services.yaml", "ingresses.yaml"):
        for doc in yaml.safe_load_all((ROOT / "k8s" / name).read_text()):
            if doc and doc["metadata"]["name"] == "limited":
                doc["metadata"]["namespace"] = NAMESPACE
                docs.append(doc)
    ingress = docs[-1]
    assert ingress["kind"] == "Ingress"
    ingress["spec"]["ingressClassName"] = INGRESS_CLASS
    ingress["spec"]["rules"][0]["host"] = INGRESS_HOST
    return docs


def test_traefik_s_access_log_imported_against_the_recorded_timeline(
        tmp_path: Path, kube_node: kubenode.Node, limited: Pod) -> None:
    """Requests through the node's Traefik to the limited pod (its Ingress in this
    namespace), the pod's groups recorded from the host (``http-timing record k8s:NS/POD``);
    Traefik's own JSON access log, read on the host from the node's state dir, imported
    against that timeline (``--upstream`` the pod): the throttled requests are marked, and the
    marks add up to what the kernel counted in the pod's groups meanwhile."""
    pod = limited
    for doc in limited_ingress():
        kube_node.kubectl("apply", "-f", "-", input=json.dumps(doc))
    traefik_ip = kube_node.kubectl("-n", "kube-system", "get", "pod", "-l",
                                   "app.kubernetes.io/name=traefik", "--field-selector",
                                   "status.phase=Running", "-o",
                                   "jsonpath={.items[0].status.podIP}").stdout.strip()
    base = f"http://{traefik_ip}:{WEB_PORT}"

    def answers() -> bool:
        try:
            reply = httpx.get(base + "/limits", headers={"Host": INGRESS_HOST}, timeout=5)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200 and reply.json()["cgroup"]["quota_us"] == LIMIT.quota_us

    wait_for(f"{INGRESS_HOST} through Traefik", answers, 120, 0.5)
    log = access_log(kubenode.traefik_log_dir(kube_node.lay))
    assert log.exists(), f"no access log on the host at {log}"

    record = subprocess.Popen([str(BIN / "http-timing"), "record", f"k8s:{NAMESPACE}/{pod.name}",
                               "--name", "pod", "--duration", "120"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timeline_csv = tmp_path / "raw-data" / "pod.cgroup.csv"
    try:
        wait_for("the recorder's first rows", lambda: record.poll() is not None or (
            timeline_csv.exists() and len(timeline_csv.read_text().splitlines()) > 5), 60, 0.05)
        assert record.poll() is None, record.communicate()[1]
        time.sleep(0.2)
        run = http_timing("--url", base + BURN, "-H", f"Host: {INGRESS_HOST}", "--requests",
                          "80", "--name", "through", "--quiet", "--no-plot", cwd=tmp_path,
                          timeout=300)
        assert run.returncode == 0, run.stderr
        time.sleep(0.3)   # the last request's throttle is in the timeline
    finally:
        record.terminate()   # SIGTERM: the recorder ends its timeline cleanly
        _, record_err = record.communicate(timeout=30)
        stop_by_pid(record)
    assert record.returncode == 0, record_err

    imported = http_timing("import", str(log), "--timeline", str(timeline_csv), "--upstream",
                           f"{pod.ip}:7800", "--name", "traefik", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    print(imported.stdout, imported.stderr)
    run_data = read_run(tmp_path / "raw-data" / "traefik.csv")
    inside = [r for r in run_data.records if r.cgroup_throttled_ns is not None]
    # this run's 80 requests: the log's others to this pod (earlier runs', the checks above)
    # are outside the timeline, left unmarked
    assert len(inside) == 80, (len(inside), len(run_data.records))

    timeline = read_timeline(timeline_csv)
    counted = []
    for series in level_timelines(timeline):
        counted.append((series[-1].nr_throttled - series[0].nr_throttled,
                        series[-1].throttled_ns - series[0].throttled_ns))
    most_n, most_ns = max(counted, key=lambda c: c[1])
    assert most_ns > 100 * MS
    marks_ns = sum(r.cgroup_throttled_ns or 0 for r in inside)
    marked = [r for r in inside if r.cgroup_nr_throttled]
    print(f"levels (nr_throttled, ms): {[(n, round(ns / MS, 1)) for n, ns in counted]}; "
          f"imported marks: {len(marked)} of {len(inside)} requests, {marks_ns / MS:.1f} ms")
    # one request at a time through the proxy: each throttle falls inside one request
    least, most_union = throttled_bounds(timeline)
    print(f"kernel: most-throttled level {least / MS:.1f} ms, interval by interval the larger "
          f"level {most_union / MS:.1f} ms")
    assert 0.8 * least <= marks_ns <= 1.05 * most_union
    # a request is held no longer than it lasted (on a slow machine every one of the 80 may
    # be throttled: how much slower the held ones were is benchmarks' business)
    assert all(r.cgroup_held_ns is not None and 0 <= r.cgroup_held_ns <= r.latency_ns
               for r in inside), [(r.cgroup_held_ns, r.latency_ns) for r in inside]
    assert any(r.cgroup_held_ns for r in marked)
