"""A real HTTP server on loopback standing in for the API server and, behind its
``pods/proxy``, each node's agent, where no node is at hand: for the client's tests
(tests/test_cluster_agents.py) and ``benchmarks.prometheus_week``. Not a benchmark. It serves what ``cluster`` asks: the workloads' lists, the
recorder's pods of a node, the API's groups (none beyond the built-in: no VPA), and an
agent's ``/windows`` (streamed a line at a time, as the Go agent does), or, for an older
agent, a 404 there and ``/timeline`` a pod at a time; and, where a test gives them, any GET
or PATCH it answers itself (a Deployment's scale and its pods, ``tests/test_replicas_live.py``).
Every request is kept (path and query; a PATCH's body).

For the pod-level resize (``client.run.limiters.kubernetes``), it serves ``pods`` (NS/NAME ->
the pod's JSON), ``/version``, and ``pods/resize`` as ``resize`` says: ``ok`` (the spec merged,
a dry run only answered; the "kubelet" posts ``status.resources`` and each container's
``resources`` and writes the pod's quota file, ``quota_dirs``: the pod-level limit, else its one
container's), ``404`` (a server before 1.33), ``422`` (the gate off, the API
server's own message), ``drop`` (answered unchanged) or ``infeasible`` (stored, never acted
on: ``PodResizePending``); a Deployment's patch is kept. Every patch is kept in ``patches``
(path, query, body). Stopped by the context manager."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

RECORDER = "throttle-lab-recorder"


@dataclass
class Cluster:
    """What the fake serves: ``lists`` (a resource's list path -> items), each node's agent
    (node -> "new", "old" or "down"), each pod's window (NS/POD -> (CSV, metadata JSON)),
    and ``delay_s`` between two lines of a stream."""

    lists: dict[str, list[Any]] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)
    windows: dict[str, tuple[str, str]] = field(default_factory=dict)
    delay_s: float = 0.0
    # served before the above where it answers (None: not its path): a GET of a path, and a
    # PATCH of a path with its JSON body; each returns the object to answer with
    get: Callable[[str], Any] | None = None
    patch: Callable[[str, Any], Any] | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    resize: str = "ok"
    version: str = "v1.37.2"
    quota_dirs: dict[str, Path] = field(default_factory=dict)
    patches: list[tuple[str, dict[str, list[str]], Any]] = field(default_factory=list)
    asked: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    accepts: list[tuple[str, str]] = field(default_factory=list)   # (path, its Accept)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def node_of_agent(self, name: str) -> str:
        return name.removeprefix("agent-").split(":")[0]


def _handler(cluster: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:   # noqa: N802 - the stdlib's name
            url = urlsplit(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            with cluster.lock:
                cluster.asked.append((path, query))
                cluster.accepts.append((path, self.headers.get("Accept", "")))
            proxy = f"/api/v1/namespaces/{RECORDER}/pods/"
            with cluster.lock:
                got = None if cluster.get is None else cluster.get(path)
            if got is not None:
                self.send(200, json.dumps(got).encode())
            elif path == f"/api/v1/namespaces/{RECORDER}/pods":
                node = query["fieldSelector"][0].removeprefix("spec.nodeName=")
                items = [] if node not in cluster.agents else [{
                    "metadata": {"name": f"agent-{node}", "namespace": RECORDER},
                    "spec": {"nodeName": node},
                    "status": {"phase": "Running", "podIP": "10.0.0.1",
                               "conditions": [{"type": "Ready", "status": "True"}]}}]
                self.send(200, json.dumps({"kind": "PodList", "apiVersion": "v1",
                                           "metadata": {}, "items": items}).encode())
            elif path.startswith(proxy) and "/proxy/" in path:
                agent, _, endpoint = path.removeprefix(proxy).partition("/proxy/")
                self.agent(cluster.agents.get(cluster.node_of_agent(agent), "down"),
                           endpoint, query)
            elif path.rstrip("/") == "/version":
                self.send(200, json.dumps({
                    "major": "1", "minor": cluster.version.split(".")[1],
                    "gitVersion": cluster.version, "gitCommit": "", "gitTreeState": "clean",
                    "buildDate": "1970-01-01T00:00:00Z", "goVersion": "go1.26",
                    "compiler": "gc", "platform": "linux/amd64"}).encode())
            elif (key := _pod_key(path)) is not None and key in cluster.pods:
                self.send(200, json.dumps(cluster.pods[key]).encode())
            elif path in cluster.lists:   # ``limit`` a page, ``continue`` the next, as the API
                items = cluster.lists[path]
                start = int(query.get("continue", ["0"])[0])
                end = start + int(query.get("limit", [str(len(items))])[0])
                more = {"continue": str(end)} if end < len(items) else {}
                page = items[start:end]
                if "as=PartialObjectMetadataList" in self.headers.get("Accept", ""):
                    page = [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": item.get("metadata", {})} for item in page]
                self.send(200, json.dumps({"metadata": more, "items": page}).encode())
            elif path in ("/apis", "/apis/"):   # discovery: no API group beyond the built-in
                self.send(200, json.dumps({"kind": "APIGroupList", "apiVersion": "v1",
                                           "groups": []}).encode())
            else:
                self.send(404, json.dumps({"kind": "Status", "message": f"{path} not found"
                                           }).encode())

        def do_PATCH(self) -> None:   # noqa: N802 - the stdlib's name
            url = urlsplit(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))
                              or b"null")
            with cluster.lock:
                cluster.asked.append((path, {**query, "PATCH": [json.dumps(body)]}))
                cluster.patches.append((path, query, body))
                got = None if cluster.patch is None else cluster.patch(path, body)
            if got is not None:
                self.send(200, json.dumps(got).encode())
                return
            if "/deployments/" in path:
                name = path.rsplit("/", 1)[-1]
                self.send(200, json.dumps({
                    "kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": {}}, "template": {}}}).encode())
                return
            key = _pod_key(path.removesuffix("/resize"))
            if not path.endswith("/resize") or key not in cluster.pods or \
                    cluster.resize == "404":
                self.send(404, json.dumps({"kind": "Status", "status": "Failure",
                                           "message": "the server could not find the "
                                           "requested resource", "code": 404}).encode())
                return
            if cluster.resize == "422":
                self.send(422, json.dumps({
                    "kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422,
                    "message": f'Pod "{key.split("/")[1]}" is invalid: : Forbidden: resize '
                               "of pods with pod-level resources is forbidden when "
                               "InPlacePodLevelResourcesVerticalScalingEnabled feature gate "
                               "is disabled"}).encode())
                return
            pod = cluster.pods[key]
            merged = _merged(pod, body) if cluster.resize != "drop" else pod
            if "dryRun" not in query:
                with cluster.lock:
                    cluster.pods[key] = merged
                    self.kubelet(key, merged)
            self.send(200, json.dumps(cluster.pods[key] if "dryRun" not in query
                                      else merged).encode())

        def kubelet(self, key: str, pod: dict[str, Any]) -> None:
            status = pod.setdefault("status", {})
            if cluster.resize == "infeasible":
                status["conditions"] = [{"type": "PodResizePending", "status": "True",
                                         "reason": "Infeasible", "message":
                                         "InPlacePodLevelResourcesVerticalScaling is disabled"}]
                return
            resources = copy.deepcopy((pod.get("spec") or {}).get("resources") or {})
            if resources:
                status["resources"] = resources
            containers = (pod.get("spec") or {}).get("containers") or []
            for container in containers:   # each container's as the kubelet posts it
                for posted in status.get("containerStatuses") or []:
                    if posted.get("name") == container.get("name") and \
                            container.get("resources"):
                        posted["resources"] = copy.deepcopy(container["resources"])
            cpu = (resources.get("limits") or {}).get("cpu")
            if cpu is None and len(containers) == 1:   # no pod level: the container's binds
                cpu = ((containers[0].get("resources") or {}).get("limits") or {}).get("cpu")
            if key in cluster.quota_dirs and cpu:
                quota = round(float(cpu[:-1]) * 100 if cpu.endswith("m") else
                              float(cpu) * 100000)
                (cluster.quota_dirs[key] / "cpu.cfs_quota_us").write_text(str(quota))

        def agent(self, kind: str, endpoint: str, query: Mapping[str, list[str]]) -> None:
            if kind == "down":
                self.send(503, json.dumps({"kind": "Status", "message": "no endpoints"
                                           }).encode())
            elif endpoint == "windows" and kind == "old":
                self.send(404, b"404 page not found\n", "text/plain")
            elif endpoint == "windows":
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                for key in query.get("key", []):
                    if key in cluster.windows:
                        csv, meta = cluster.windows[key]
                        line = {"key": key, "meta": json.loads(meta), "csv": csv}
                        sent += 1
                    else:
                        line = {"key": key, "error": f"no timeline of {key} in that window"}
                    self.chunk(json.dumps(line).encode() + b"\n")
                    time.sleep(cluster.delay_s)
                self.chunk(json.dumps({"done": True, "windows": sent}).encode() + b"\n")
                self.wfile.write(b"0\r\n\r\n")
            elif endpoint == "timeline":
                key = f"{query['namespace'][0]}/{query['pod'][0]}"
                if key not in cluster.windows:
                    self.send(404, f"no timeline of {key} in that window\n".encode(),
                              "text/plain")
                    return
                csv, meta = cluster.windows[key]
                json_asked = query.get("format") == ["json"]
                self.send(200, (meta if json_asked else csv).encode(),
                          "application/json" if json_asked else "text/csv")
            else:
                self.send(404, b"404 page not found\n", "text/plain")

        def chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def _pod_key(path: str) -> str | None:
    """``/api/v1/namespaces/NS/pods/NAME`` -> ``NS/NAME`` (None: another path)."""
    parts = path.strip("/").split("/")
    if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
        return f"{parts[3]}/{parts[5]}"
    return None


def _merged(pod: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A resize's strategic merge on the pod: ``spec.resources`` key by key, containers by
    name."""
    out = copy.deepcopy(pod)
    spec, change = out.setdefault("spec", {}), patch.get("spec") or {}
    for key, values in (change.get("resources") or {}).items():
        spec.setdefault("resources", {}).setdefault(key, {}).update(values)
    for container in change.get("containers") or []:
        for mine in spec.get("containers") or []:
            if mine.get("name") == container.get("name"):
                for key, values in (container.get("resources") or {}).items():
                    mine.setdefault("resources", {}).setdefault(key, {}).update(values)
    return out


@contextmanager
def fake_kube(cluster: Cluster, work: Path) -> Iterator[Path]:
    """The fake on a free loopback port; yields a kubeconfig naming it (plain HTTP)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cluster))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = work / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "c", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "c", "user": "u",
                                                 "namespace": "shop"}}]}))
    try:
        yield config
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
