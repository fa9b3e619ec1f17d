"""A resize undone during a search (issue 58's bad input): live ``advise`` resizes a pod in
place run after run; where, before a run ends, the pod's limit (its spec, or the quota the
kernel's file holds) is no longer the one the tool set, as a VPA's updater in
``InPlaceOrRecreate`` does, the run's figures are not for that limit. The search stops with one
line naming what changed (from, to, who does that, that ``--despite-vpa`` does not help) and
everything is put back as before the search: the spec, the status and the quota file.

Against the fake API server (benchmarks/fake_kube.py), whose "kubelet" posts the status and
writes a fixture group's quota file; the "VPA" is a resize patch sent to it while a run's
requests are being answered. The same on the real node: tests/test_commands_advise_k8s.py."""

from __future__ import annotations

import copy
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from benchmarks.fake_kube import Cluster, fake_kube
from client.advise import AdviseError
from client.advise.live import Advisor, Asked, span
from client.analysis.goal import LatencyGoal
from client.run.inplace import InPlace, LimitChanged
from client.run.kube_api import connect
from client.run.limiters.kubernetes import KubernetesLimiter
from client.run.limiters.quota_source import GroupFiles
from client.run.plan import LoadPlan
from client.run.record import RunSpec
from cpuquota.limit import Limit
from tests.cgroup_fixtures import v1_group
from tests.test_run_limiters_pod_level import pod_level_pod

KEY = "shop/api-1"
RESIZE = "/api/v1/namespaces/shop/pods/api-1/resize"


def container_level_pod() -> dict[str, Any]:
    """The node's limited pod as the fake holds it: one container, Guaranteed, 300m."""
    pod = pod_level_pod()
    resources = {"limits": {"cpu": "300m", "memory": "128Mi"},
                 "requests": {"cpu": "300m", "memory": "128Mi"}}
    del pod["spec"]["resources"], pod["status"]["resources"]
    pod["spec"]["containers"][0]["resources"] = copy.deepcopy(resources)
    pod["status"]["containerStatuses"][0]["resources"] = copy.deepcopy(resources)
    pod["status"]["qosClass"] = "Guaranteed"
    return pod


# what the "VPA" sends mid-run, per level: a larger limit and request, as its updater would
VPA_PATCH = {
    "container": {"spec": {"containers": [{"name": "app", "resources": {
        "limits": {"cpu": "700m"}, "requests": {"cpu": "700m"}}}]}},
    "pod": {"spec": {"resources": {"limits": {"cpu": "700m"}, "requests": {"cpu": "400m"}}}},
}


class Service:
    """A small HTTP service on loopback (5 ms a request); ``on_request(n)`` is called before
    the n-th request's answer (1-based, over the whole search)."""

    def __init__(self, on_request: Callable[[int], None]) -> None:
        self.count, self.lock = 0, threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:   # noqa: N802 - the stdlib's name
                with service.lock:
                    service.count += 1
                    n = service.count
                on_request(n)
                threading.Event().wait(0.005)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(params=["container", "pod"])
def served(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[Cluster, Path, Path, str]]:
    level = str(request.param)
    cluster = Cluster()
    cluster.pods[KEY] = container_level_pod() if level == "container" else pod_level_pod()
    group = v1_group(tmp_path / "cpu" / "kubepods" / "podu-1", quota_us=30000)
    cluster.quota_dirs[KEY] = group
    with fake_kube(cluster, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield cluster, group, config, level


def vpa_resize(config: Path, body: dict[str, Any]) -> None:
    """A resize as another controller sends it: a PATCH of ``pods/resize`` to the server."""
    server = yaml.safe_load(config.read_text())["clusters"][0]["cluster"]["server"]
    request = urllib.request.Request(
        server + RESIZE, data=json.dumps(body).encode(), method="PATCH",
        headers={"Content-Type": "application/strategic-merge-patch+json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def tool_resizes(cluster: Cluster) -> list[str]:
    """The cpu limit of each resize stored so far (dry runs left out), at either level."""
    with cluster.lock:
        bodies = [body["spec"] for path, query, body in cluster.patches
                  if path == RESIZE and "dryRun" not in query]
    return [(spec.get("resources") or spec["containers"][0]["resources"])["limits"]["cpu"]
            for spec in bodies]


def test_a_resize_undone_mid_search_stops_it_in_one_line_and_puts_all_back(
        served: tuple[Cluster, Path, Path, str], tmp_path: Path) -> None:
    cluster, group, config, level = served
    before = copy.deepcopy(cluster.pods[KEY])
    sent: list[str] = []   # the limit the tool had set when the VPA's resize was sent

    def on_request(n: int) -> None:
        # the 5th request of the run after the tool's second resize (the profile's is the
        # first): the "VPA" resizes the pod while that run is under way
        if not sent and len(resized := tool_resizes(cluster)) >= 2:
            sent.append(resized[-1])
            vpa_resize(config, VPA_PATCH[level])

    service = Service(on_request)
    try:
        api = connect()
        limiter = KubernetesLimiter(None, api.core, "shop", "api-1", None, to_json=api.to_json,
                                    timeout=5, server=api.server, request_timeout=5,
                                    apps=api.apps, quota=GroupFiles(group, 1))
        assert limiter.level == level
        template = RunSpec(url=service.url, plan=LoadPlan.from_options(requests=30), name="-",
                           data_dir=tmp_path, iterations=0, command=(), ask_limits=False)
        where = SimpleNamespace(spec="k8s:shop/api-1", usage_counter="none",
                                sampled=lambda: None, marked=lambda run: run)
        at = InPlace(where, limiter, limiter.read(), template)  # type: ignore[arg-type]
        asked = Asked(LoadPlan.from_options(requests=30), LatencyGoal(p99_ms=500.0), "t",
                      datetime.now(timezone.utc), tmp_path, span(at, 100.0, 0.0), 100.0,
                      profile_seconds=1.0, max_runs=4, alternatives=False)
        said: list[str] = []
        advisor = Advisor(asked, at)
        with pytest.raises(AdviseError) as stopped:
            with at.restoring(said.append):
                advisor.advise()
    finally:
        service.stop()
    line = str(stopped.value)
    print(line, *said, sep="\n")
    assert sent, "the VPA's resize was sent during a run"
    assert "\n" not in line
    where_words = ("container app's limits.cpu" if level == "container" else
                   "spec.resources.limits.cpu")
    assert line.startswith("k8s:shop/api-1: its limit changed during run t-advise-"), line
    assert f"the pod's {where_words} " in line and " -> 700m" in line, line
    assert f"the quota ({group}) " in line and " -> 70000/100000 µs" in line, line
    assert "a VPA's updater (InPlaceOrRecreate) or another controller" in line
    assert "--despite-vpa does not help here" in line
    assert f"{where_words} {sent[0]} -> 700m" in line, (sent, line)   # the tool's, then the VPA's
    # everything as before the search: spec (limits and requests), status, the quota file
    assert said[-1].startswith("in place: restored: 0.3 CPU"), said
    now = cluster.pods[KEY]
    assert now["spec"] == before["spec"]
    assert now["status"].get("resources") == before["status"].get("resources")
    assert now["status"]["containerStatuses"] == before["status"]["containerStatuses"]
    assert (group / "cpu.cfs_quota_us").read_text() == "30000"


def test_a_limit_still_held_is_no_change(served: tuple[Cluster, Path, Path, str]) -> None:
    """The check itself: the limit the tool set, held in spec and file, says nothing; the
    spec changed alone (the kubelet not yet acting) is named, the file alone too."""
    cluster, group, _, level = served
    api = connect()
    limiter = KubernetesLimiter(None, api.core, "shop", "api-1", None, to_json=api.to_json,
                                timeout=5, server=api.server, request_timeout=5,
                                apps=api.apps, quota=GroupFiles(group, 1))
    at = InPlace(SimpleNamespace(spec="k8s:shop/api-1"), limiter,  # type: ignore[arg-type]
                 limiter.read(), None)  # type: ignore[arg-type]
    limiter.apply(Limit(0.5))
    at.held(Limit(0.5), "r1")   # nothing changed: no error
    (group / "cpu.cfs_quota_us").write_text("60000\n")
    with pytest.raises(LimitChanged) as only_file:
        at.held(Limit(0.5), "r1")
    assert "the pod's" not in str(only_file.value)
    assert f"the quota ({group}) 50000/100000 µs -> 60000/100000 µs" in str(only_file.value)
    (group / "cpu.cfs_quota_us").write_text("50000\n")
    spec = cluster.pods[KEY]["spec"]
    (spec["resources"] if level == "pod" else spec["containers"][0]["resources"])[
        "limits"]["cpu"] = "800m"
    with pytest.raises(LimitChanged) as only_spec:
        at.held(Limit(0.5), "r1")
    assert "500m -> 800m" in str(only_spec.value) and "the quota" not in str(only_spec.value)
    said: list[str] = []
    with at.restoring(said.append):
        pass
    assert said[-1].startswith("in place: restored: 0.3 CPU"), said   # not "as it was"
    assert (group / "cpu.cfs_quota_us").read_text() == "30000"
