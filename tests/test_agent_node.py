"""The node agent (agent/) as the DaemonSet of k8s/recorder/ on the real node: its image built
from agent/Dockerfile and imported into the node's containerd, ``kubectl apply -k`` of an
overlay over k8s/recorder (only the image's tag, its pull policy and the timelines' hostPath
in the node's state directory differ). The agent watches the API with its in-cluster service
account (rbac.yaml), records the labelled pod of namespace tl-agent-test, its timelines land,
a deleted pod stops being exported; Debian's Prometheus on the host (the shipped scrape config
and rules, its own data directory, stopped by pid) finds the limited pod's throttled periods in
the per-period wait histogram, as many as the pod group's cpu.stat counted; and
``http-timing import --timeline k8s:NS/POD`` with a kubeconfig holding only the user RBAC of
k8s/recorder/user-rbac.yaml marks the requests in agreement with cpu.stat."""
from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from client.data.files import read_run
from kubenode import node as kubenode
from kubenode import project_images
from kubenode.config import CGROUP_ROOT
from tests.import_support import write_documented
from tests.kube import pods_namespace, wait_for
from tests.prometheus_support import prometheus_running, quiet
from tests.recorder_support import (RECORDER_NS, cpu_stat, exported_throttled, kubectl_json,
                                    throttling, user_kubeconfig)
from tests.support import BIN, ROOT, http_timing, stop_by_pid

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

NS = "tl-agent-test"
CPU = Path("/sys/fs/cgroup/cpu")
LABEL = {"throttle-lab/record": "true"}
ITERATIONS = 30000     # ~30 ms of CPU (the calibrated burn): three 10 ms quotas, each request
REQUESTS = 12


@dataclass
class Recorder:
    pod: str
    ip: str
    timelines: Path

    def metrics(self) -> str:
        return httpx.get(f"http://{self.ip}:9742/metrics", timeout=10).text


@pytest.fixture(scope="module")
def agent(kube_node: kubenode.Node, node_recorder: dict[str, Any]) -> Iterator[Recorder]:
    """The session's recorder DaemonSet, running the agent image built from this checkout,
    and this file's namespace (deleted afterwards)."""
    with pods_namespace(kube_node, NS):
        yield Recorder(node_recorder["metadata"]["name"], node_recorder["status"]["podIP"],
                       kube_node.lay.state / "recorder-timelines")


def pod_manifest(name: str, image: str, labels: dict[str, str], cpu: str = "100m") -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                 "containers": [{
                     "name": "main", "image": image, "imagePullPolicy": "Never",
                     "resources": {"requests": {"cpu": cpu, "memory": "32Mi"},
                                   "limits": {"cpu": cpu, "memory": "256Mi"}}}]}})


def start_pod(node: kubenode.Node, name: str, image: str, labels: dict[str, str]) -> Any:
    node.kubectl("apply", "-f", "-", input=pod_manifest(name, image, labels))
    node.kubectl("-n", NS, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=180s",
                 timeout=200)
    return kubectl_json(node, "-n", NS, "get", "pod", name)


def pod_group(info: Any) -> Path:
    found = list((CPU / CGROUP_ROOT).rglob(f"pod{info['metadata']['uid']}"))
    assert len(found) == 1, found
    return found[0]


@dataclass
class Load:
    pod: str
    group: Path
    before: dict[str, int]
    after: dict[str, int]
    count_before: float   # Prometheus's histogram count, scraped once the pod had settled
    sum_before: float     # and its sum (s)
    requests: list[tuple[int, int, int]]
    url: str


@pytest.fixture(scope="module")
def load(kube_node: kubenode.Node, agent: Recorder, prometheus: str) -> Load:
    """The limited pod (100m: 10 ms a period), labelled, and sequential requests of ~30 ms of
    CPU each sent to it from the host through the veth; the pod group's cpu.stat on each side
    (the pod idle, so both are settled); Prometheus's count before the load, once it has
    scraped the agent's counters equal to that cpu.stat."""
    info = start_pod(kube_node, "limited", project_images.SERVICE_IMAGE, LABEL)
    group = pod_group(info)
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "10000"
    base = f"http://{info['status']['podIP']}:7800"
    wait_for("the limited pod in /metrics", lambda: 'pod="limited"' in agent.metrics(), 60)

    def healthy() -> bool:
        try:
            return httpx.get(base + "/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False
    wait_for("the service in the pod", healthy, 60, interval=0.5)
    url = f"{base}/cpuBurnFlow?iterations={ITERATIONS}"
    httpx.get(url, timeout=30)   # the first request's imports are not the test's
    time.sleep(0.5)
    before = cpu_stat(group)
    sel = f'namespace="{NS}",pod="limited",level="pod"'
    wait_for("prometheus to scrape the settled counters before the load", lambda: value(
        prometheus, f"throttle_lab_cpu_cfs_throttled_periods_total{{{sel}}}")
        == before["nr_throttled"] == cpu_stat(group)["nr_throttled"], 60, interval=0.5)
    count_before = value(prometheus,
                         f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_count{{{sel}}}")
    sum_before = value(prometheus,
                       f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_sum{{{sel}}}")
    assert count_before is not None and sum_before is not None
    requests = []
    with httpx.Client(timeout=30) as client:
        for _ in range(REQUESTS):
            start = time.time_ns()
            status = client.get(url).status_code
            requests.append((start, time.time_ns(), status))
    time.sleep(0.5)   # the last throttle ends at the next period's boundary
    after = cpu_stat(group)
    assert after["nr_throttled"] - before["nr_throttled"] >= REQUESTS, (before, after)
    return Load("limited", group, before, after, count_before, sum_before, requests, url)


def test_the_agent_watches_the_api_and_records_the_labelled_pods(
        kube_node: kubenode.Node, agent: Recorder) -> None:
    """In-cluster config and the shipped RBAC: the informer lists and watches; a labelled pod
    is recorded (its timelines on the node), an unlabelled one is not, a deleted one stops
    being exported."""
    start_pod(kube_node, "labelled", "throttle-lab-pause:3.10.1", LABEL)
    start_pod(kube_node, "unlabelled", "throttle-lab-pause:3.10.1", {"app": "other"})
    wait_for("the labelled pod in /metrics",
             lambda: f'namespace="{NS}",pod="labelled"' in agent.metrics(), 60)
    text = agent.metrics()
    assert 'pod="unlabelled"' not in text
    assert f'container="main",level="container",namespace="{NS}",pod="labelled"' in text
    keys = json.loads(kube_node.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{RECORDER_NS}/pods/{agent.pod}:9742/proxy/timelines"
    ).stdout)["timelines"]
    assert f"{NS}/labelled" in keys and f"{NS}/labelled/main" in keys
    assert f"{NS}/unlabelled" not in keys
    names = {p.name for p in agent.timelines.iterdir()}
    assert any(n.startswith(f"{NS}_labelled_") and n.endswith(".cgroup.csv") for n in names)
    assert any(n.startswith(f"{NS}_labelled_main_") and n.endswith(".json") for n in names)
    assert agent.timelines.stat().st_uid == 10001   # the init container's chown
    kube_node.kubectl("-n", NS, "delete", "pod", "labelled", "unlabelled", "--wait=false")
    t0 = time.monotonic()
    wait_for("the deleted pod to leave /metrics",
             lambda: 'pod="labelled"' not in agent.metrics(), 60, interval=0.2)
    print(f"deleted pod gone from /metrics after {time.monotonic() - t0:.1f} s")
    logs = kube_node.kubectl("-n", RECORDER_NS, "logs", agent.pod, "-c", "recorder").stdout
    assert "forbidden" not in logs.lower() and "did not sync" not in logs, logs[-2000:]


@pytest.fixture(scope="module")
def prometheus(kube_node: kubenode.Node, agent: Recorder,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's prometheus on the host: the shipped scrape job and rules, every second; its own
    data directory; stopped by its pid. Debian builds Prometheus without the Kubernetes
    service discovery, so the job's kubernetes_sd_configs (and the relabelling of its meta
    labels) give way to the agent pod's address as the API reports it."""
    config = yaml.safe_load((ROOT / "k8s" / "recorder" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(ROOT / "k8s" / "recorder" / "rules.yaml")]
    (job,) = config["scrape_configs"]
    del job["kubernetes_sd_configs"], job["relabel_configs"]
    job["static_configs"] = [{"targets": [f"{agent.ip}:9742"]}]
    with prometheus_running(tmp_path_factory.mktemp("prometheus"), config) as base:
        yield base


def query(base: str, expr: str, at: float | None = None) -> list[Any]:
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    body = httpx.get(base + "/api/v1/query", params=params, timeout=30).json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def value(base: str, expr: str, at: float | None = None) -> float | None:
    result = query(base, expr, at)
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def test_prometheus_finds_the_limited_pods_throttled_periods_in_the_wait_histogram(
        agent: Recorder, prometheus: str, load: Load) -> None:
    sel = f'namespace="{NS}",pod="{load.pod}",level="pod"'
    count = f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_count{{{sel}}}"
    # the agent pod is scraped through its pod IP from the host
    targets = httpx.get(prometheus + "/api/v1/targets", timeout=10).json()["data"]
    up = [t for t in targets["activeTargets"] if t["health"] == "up"]
    assert [t["labels"]["job"] for t in up] == ["throttle-lab-recorder"], targets
    assert up[0]["scrapeUrl"] == f"http://{agent.ip}:9742/metrics"
    # Prometheus holds a sample after the load's end (the counter copied from cpu.stat; the
    # histogram counts only the periods since the agent watched the pod: the deltas agree)
    periods = f"throttle_lab_cpu_cfs_throttled_periods_total{{{sel}}}"
    wait_for("prometheus to scrape the settled counters",
             lambda: value(prometheus, periods) == load.after["nr_throttled"], 60, interval=0.5)
    before, after = load.count_before, value(prometheus, count)
    assert after is not None
    kernel = load.after["nr_throttled"] - load.before["nr_throttled"]
    assert after - before == kernel, (before, after, load.before, load.after)
    # and the waits add up to the throttled time cpu.stat counted meanwhile
    wait_sum = value(prometheus, f"throttle_lab_cpu_cfs_throttled_period_wait_seconds_sum{{{sel}}}")
    assert wait_sum is not None
    assert wait_sum - load.sum_before == pytest.approx(
        (load.after["throttled_time"] - load.before["throttled_time"]) / 1e9, abs=1e-6)
    # the histogram itself: the throttled periods' waits, most within a period (100 ms; how
    # they spread below it depends on the machine: not asserted)
    buckets = query(prometheus, "sum by (le) (increase(throttle_lab_cpu_cfs_throttled_period_"
                    f"wait_seconds_bucket{{{sel}}}[2m]))")
    by_le = {b["metric"]["le"]: float(b["value"][1]) for b in buckets}
    assert by_le["+Inf"] > 0 and by_le["0.1"] >= 0.8 * by_le["+Inf"], by_le
    assert value(prometheus, f"rate({count}[2m])") > 0   # type: ignore[operator]
    seconds = value(prometheus, f"throttle_lab_cpu_cfs_throttled_seconds_total{{{sel}}}")
    assert seconds == pytest.approx(load.after["throttled_time"] / 1e9, abs=1e-6)
    # the shipped recording rules evaluate on the real series
    wait_for("the recording rules", lambda: query(
        prometheus, f"throttle_lab:cpu_cfs_throttled_period_wait_seconds:p99_5m{{{sel}}}"), 30)
    ratio = value(prometheus, f"throttle_lab:cpu_cfs_throttled_periods:ratio_5m{{{sel}}}")
    assert ratio is not None and 0 < ratio <= 1
    print(f"prometheus: {after - before:.0f} throttled periods (cpu.stat: {kernel}), "
          f"buckets {by_le}")


def test_import_marks_the_requests_with_the_pods_timeline_through_the_api_proxy(
        kube_node: kubenode.Node, load: Load, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(user_kubeconfig(kube_node, tmp_path / "user.kubeconfig", NS)))
    results = tmp_path / "r.jtl"
    write_documented("jmeter-csv", load.requests, load.url, results)
    out = http_timing("import", str(results), "--timeline", f"k8s:{NS}/{load.pod}",
                      "--name", "k8s", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run = read_run(tmp_path / "raw-data" / "k8s.csv")
    assert run.metadata.extra["imported"]["timeline"] == f"k8s:{NS}/{load.pod}"
    assert run.timeline is not None
    records = run.records
    assert len(records) == REQUESTS
    assert all(r.cgroup_throttled_ns is not None for r in records), "outside the timeline"
    kernel_ns = load.after["throttled_time"] - load.before["throttled_time"]
    marks = sum(r.cgroup_throttled_ns or 0 for r in records)
    assert marks == pytest.approx(kernel_ns, rel=0.3), (marks, kernel_ns)
    marked = sum(1 for r in records if r.cgroup_nr_throttled)
    assert marked >= REQUESTS // 2
    report = http_timing("report", str(tmp_path / "raw-data" / "k8s.csv"), "--json", cwd=tmp_path)
    assert report.returncode == 0 and json.loads(report.stdout)["count"] == REQUESTS
    plot = http_timing("plot", str(tmp_path / "raw-data" / "k8s.csv"), "-o", "k8s.png",
                       cwd=tmp_path)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "k8s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"import via the API proxy: {marked}/{REQUESTS} marked, marks {marks / 1e6:.0f} ms, "
          f"cpu.stat {kernel_ns / 1e6:.0f} ms")
    # one container's group: k8s:NS/POD/CONTAINER
    container = http_timing("import", str(results), "--timeline", f"k8s:{NS}/{load.pod}/main",
                            "--name", "k8s-main", cwd=tmp_path)
    assert container.returncode == 0, container.stderr
    main = read_run(tmp_path / "raw-data" / "k8s-main.csv")
    assert main.metadata.extra["imported"]["timeline"] == f"k8s:{NS}/{load.pod}/main"
    assert main.metadata.cgroup is not None and run.metadata.cgroup is not None
    assert Path(main.metadata.cgroup["path"]).parent == Path(run.metadata.cgroup["path"])
    # a pod the agent does not record: one line, no traceback
    missing = http_timing("import", str(results), "--timeline", f"k8s:{NS}/nobody",
                          "--name", "k8s2", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr


def test_windows_streams_each_pods_window_as_timeline_serves_it(
        kube_node: kubenode.Node, agent: Recorder, load: Load) -> None:
    """The agent's /windows through the API server's proxy, as cluster asks it once a node:
    the loaded pod's line is its /timeline window, a pod it does not record says so, and the
    stream ends with its last line."""
    start, end = load.requests[0][0] / 1e9 - 1, load.requests[-1][1] / 1e9 + 1
    proxy = f"/api/v1/namespaces/{RECORDER_NS}/pods/{agent.pod}:9742/proxy"
    window = f"from={start:.6f}&to={end:.6f}"
    lines = [json.loads(line) for line in kube_node.kubectl(
        "get", "--raw", f"{proxy}/windows?{window}&key={NS}/{load.pod}&key={NS}/nobody"
    ).stdout.splitlines()]
    csv = kube_node.kubectl("get", "--raw", f"{proxy}/timeline?namespace={NS}&pod={load.pod}"
                            f"&{window}").stdout
    assert [line.get("key") for line in lines] == [f"{NS}/{load.pod}", f"{NS}/nobody", None]
    assert lines[0]["csv"] == csv and lines[0]["meta"]["agent"]["key"] == f"{NS}/{load.pod}"
    assert "no timeline" in lines[1]["error"]
    assert lines[2] == {"done": True, "windows": 1}


def test_a_run_and_watch_read_a_pod_through_its_agent_as_from_another_machine(
        kube_node: kubenode.Node, agent: Recorder, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--cgroup k8s:`` and ``watch k8s:`` with only the user's kubeconfig, made to go
    through the agent (HTTP_TIMING_THROUGH_API=1, as for a pod on another node): what they
    say is what the pod group's cpu.stat counted across them."""
    from client.run.pod_reach import THROUGH_API_ENV

    info = start_pod(kube_node, "far", project_images.SERVICE_IMAGE, LABEL)
    group = pod_group(info)
    url = f"http://{info['status']['podIP']}:7800/cpuBurnFlow?iterations={ITERATIONS}"
    wait_for("the far pod in /metrics", lambda: 'pod="far"' in agent.metrics(), 60)
    wait_for("the service in the pod", lambda: _answers(url), 60, interval=0.5)
    monkeypatch.setenv("KUBECONFIG", str(user_kubeconfig(kube_node, tmp_path / "user.kc", NS)))
    monkeypatch.setenv(THROUGH_API_ENV, "1")
    # the pod idle and the agent holding its counters, so that the run's timeline has a
    # sample from before its first request
    before = quiet(lambda: throttling(group))
    wait_for("the agent holding the idle pod's periods throttled", lambda: exported_throttled(
        agent.ip, "far") == before["nr_throttled"], 60, interval=0.2)
    out = http_timing("--url", url, "--requests", "8", "--cgroup", f"k8s:{NS}/far", "--name",
                      "far", "--no-plot", "--quiet", cwd=tmp_path)
    after = cpu_stat(group)
    assert out.returncode == 0, out.stderr
    run = read_run(tmp_path / "raw-data" / "far.csv")
    assert run.metadata.cgroup is not None and run.timeline is not None
    assert run.metadata.cgroup["source"].startswith(f"the node agent {RECORDER_NS}/")
    assert all(r.cgroup_nr_throttled is not None for r in run.records)
    first = max((s for s in run.timeline if s.t_ns <= min(r.start_ns for r in run.records)),
                key=lambda s: s.t_ns)
    last = min((s for s in run.timeline if s.t_ns >= max(r.end_ns for r in run.records)),
               key=lambda s: s.t_ns)
    # the run's counters are the group's, read by the agent between the test's reads: at
    # least the idle pod's before the run, at most what cpu.stat counted once it was over (the
    # service still works after its last answer, e.g. on the closed connection, and before
    # its first, e.g. on the new one: either can be throttled too)
    assert before["nr_throttled"] <= first.nr_throttled < last.nr_throttled \
        <= after["nr_throttled"]   # the quota bit
    assert before["throttled_time"] <= first.throttled_ns < last.throttled_ns \
        <= after["throttled_time"]
    assert f"throttling in k8s:{NS}/far (the node agent" in out.stdout

    time.sleep(1.5)   # the pod idle again
    before = cpu_stat(group)
    watch = subprocess.Popen([str(BIN / "http-timing"), "watch",
                              f"k8s:{NS}/far", "--count", "3", "--json"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(timeout=30) as client:
            while watch.poll() is None:   # load until its last line: its lines hold throttles
                client.get(url)
        lines, err = watch.communicate(timeout=60)
    finally:
        stop_by_pid(watch)
    time.sleep(0.5)
    after = cpu_stat(group)
    assert watch.returncode == 0, err
    rows = [json.loads(line) for line in lines.splitlines()]
    assert len(rows) == 3 and all(r["usage_counter"].startswith("cpu.stat, read by the node "
                                                                "agent") for r in rows)
    assert sum(r["nr_throttled"] for r in rows) <= after["nr_throttled"] - before["nr_throttled"]
    assert sum(r["nr_throttled"] for r in rows) > 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=30).status_code == 200
    except httpx.HTTPError:
        return False
