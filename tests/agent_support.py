"""For the node agent's tests (tests/test_agent*.py): the Go binary built once per source
state into a cache directory outside the checkout, the agent run as a real process with the
static source (stopped by its pid), and v1 groups with a quota made and removed by the test."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support import ROOT, free_port, require

AGENT_DIR = ROOT / "agent"
CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
CACHE = CACHE_HOME / "throttle-lab" / "agent"
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
CPUACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")


def go_tool() -> str | None:
    return shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if Path(p).exists()),
                                      None)


def agent_binary() -> Path:
    """The agent built from agent/ (cached by a hash of its sources); skip without Go."""
    go = go_tool()
    require(go is not None, "Go is not installed (the node agent is a Go program: agent/)")
    assert go is not None
    digest = hashlib.sha256()
    for path in sorted(AGENT_DIR.rglob("*")):
        if path.is_file() and path.suffix in (".go", ".mod", ".sum"):
            digest.update(str(path.relative_to(AGENT_DIR)).encode() + b"\0" + path.read_bytes())
    out = CACHE / digest.hexdigest()[:16] / "throttle-agent"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"throttle-agent.{os.getpid()}")
        result = subprocess.run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp),
                                 "./cmd/throttle-agent"], cwd=AGENT_DIR,
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        tmp.replace(out)
    return out


@dataclass
class RunningAgent:
    proc: subprocess.Popen[str]
    base: str
    timelines: Path
    targets: Path

    def metrics(self) -> str:
        return httpx.get(self.base + "/metrics", timeout=10).text

    def timeline(self, pod: str, fmt: str = "csv", **window: float) -> httpx.Response:
        params: dict[str, str] = {"pod": pod, "format": fmt}
        params.update({k: f"{v:.6f}" for k, v in window.items()})
        return httpx.get(self.base + "/timeline", params=params, timeout=30)


@contextmanager
def running_agent(tmp_path: Path, targets: dict[str, Path], *extra: str,
                  timelines: Path | None = None) -> Iterator[RunningAgent]:
    """The agent with ``--source static`` on ``targets`` (name -> group), on a free loopback
    port; SIGTERM at the end (its timelines closed), by pid."""
    targets_file = tmp_path / "targets"
    write_targets(targets_file, targets)
    with _agent(["--source", "static", "--targets", str(targets_file), *extra],
                timelines or tmp_path / "timelines", targets_file) as agent:
        yield agent


@contextmanager
def running_kube_agent(tmp_path: Path, kubeconfig: Path, node: str, *extra: str,
                       start_s: float = 30, wrap: Sequence[str] = ()) -> Iterator[RunningAgent]:
    """The agent with ``--source kube`` (the API server ``kubeconfig`` names, e.g.
    :func:`fake_pod_api`'s) watching ``node``'s labelled pods; SIGTERM at the end, by pid.
    ``wrap``: a command that execs the agent's (its arguments follow), so its pid is the
    agent's."""
    with _agent(["--source", "kube", "--kubeconfig", str(kubeconfig), "--node", node, *extra],
                tmp_path / "timelines", tmp_path / "no-targets", start_s, wrap) as agent:
        yield agent


@contextmanager
def _agent(source: list[str], timelines: Path, targets_file: Path,
           start_s: float = 30, wrap: Sequence[str] = ()) -> Iterator[RunningAgent]:
    binary = agent_binary()
    port = free_port()
    proc = subprocess.Popen([*wrap, str(binary), "--timelines", str(timelines),
                             "--listen", f"127.0.0.1:{port}", *source],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agent = RunningAgent(proc, f"http://127.0.0.1:{port}", timelines, targets_file)
    try:
        deadline = time.monotonic() + start_s
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(agent.base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the agent did not answer"
            time.sleep(0.05)
        yield agent
    finally:
        stop_agent(agent)


def stop_agent(agent: RunningAgent, sig: int = signal.SIGTERM) -> str:
    """Stop the agent by its pid; its stderr."""
    if agent.proc.poll() is None:
        agent.proc.send_signal(sig)
    try:
        _out, err = agent.proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        agent.proc.kill()
        _out, err = agent.proc.communicate()
    return err or ""


def write_targets(path: Path, targets: dict[str, Path]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{name} {group}\n" for name, group in targets.items()))
    tmp.replace(path)


def require_v1_cpu() -> None:
    require(os.geteuid() == 0, "making cgroups needs root")
    require((CPU_ROOT / "cpu.cfs_quota_us").exists() and (CPUACCT_ROOT / "cpuacct.usage").exists(),
            "these tests make cgroup v1 cpu and cpuacct groups (/sys/fs/cgroup/cpu, cpuacct)")


@dataclass
class QuotaGroup:
    cpu: Path
    cpuacct: Path

    def join_command(self, command: str) -> list[str]:
        """A shell that moves itself into both groups, then execs ``command``."""
        return ["sh", "-c", f"echo $$ > {self.cpu}/cgroup.procs && "
                f"echo $$ > {self.cpuacct}/cgroup.procs && exec {command}"]

    def cpu_stat(self) -> dict[str, int]:
        return {k: int(v) for k, v in
                (line.split() for line in (self.cpu / "cpu.stat").read_text().splitlines())}

    def usage_ns(self) -> int:
        return int((self.cpuacct / "cpuacct.usage").read_text())


@contextmanager
def quota_groups(prefix: str, count: int, quota_us: int = 20000,
                 period_us: int = 100000) -> Iterator[list[QuotaGroup]]:
    """``count`` v1 groups (cpu with the quota, and a cpuacct twin of the same path), removed
    at the end (their processes killed first)."""
    require_v1_cpu()
    top = f"throttle-lab-test-{prefix}-{os.getpid()}"
    groups: list[QuotaGroup] = []
    try:
        for i in range(count):
            g = QuotaGroup(CPU_ROOT / top / f"g{i}", CPUACCT_ROOT / top / f"g{i}")
            g.cpu.mkdir(parents=True)
            g.cpuacct.mkdir(parents=True)
            groups.append(g)
            (g.cpu / "cpu.cfs_period_us").write_text(str(period_us))
            (g.cpu / "cpu.cfs_quota_us").write_text(str(quota_us))
        yield groups
    finally:
        for root in (CPU_ROOT / top, CPUACCT_ROOT / top):
            _remove_tree(root)


def _remove_tree(root: Path) -> None:
    if not root.exists():
        return
    for here, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
        procs = Path(here, "cgroup.procs")
        for _ in range(50):
            pids = procs.read_text().split() if procs.exists() else []
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        os.rmdir(here)


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels} value`` -> value, keyed by the line's left side."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def running_pod(namespace: str, name: str, uid: str, node: str,
                containers: dict[str, str]) -> dict[str, object]:
    """A running pod as the API serves it (labelled for the agent): ``containers`` is
    name -> containerd id."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": uid,
                         "resourceVersion": "1", "labels": {"throttle-lab/record": "true"}},
            "spec": {"nodeName": node, "containers": [{"name": c} for c in containers]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": c, "containerID": f"containerd://{cid}", "ready": True,
                 "restartCount": 0, "image": "x", "imageID": "x",
                 "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}
                for c, cid in containers.items()]}}


@contextmanager
def fake_pod_api(tmp_path: Path, pods: list[dict[str, object]]) -> Iterator[Path]:
    """An API server of pods alone, for the agent's Kube source without a cluster: a thread
    of this process on a free loopback port that answers client-go's informer (the list of
    ``pods``, then a watch held open with no event till the end); yields a kubeconfig for it.
    Every request's path and query is in the kubeconfig's sibling ``api-requests.txt``."""
    log = tmp_path / "api-requests.txt"
    done = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            with log.open("a") as f:
                f.write(self.path + "\n")

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            if url.path != "/api/v1/pods":
                self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404})
                return
            if query.get("watch", [""])[0] not in ("true", "1"):
                self._send(200, {"kind": "PodList", "apiVersion": "v1",
                                 "metadata": {"resourceVersion": "1"}, "items": pods})
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            done.wait(float(query.get("timeoutSeconds", ["600"])[0]))
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

        def _send(self, code: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "fake-api.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "users": [{"name": "fake", "user": {}}]}))
    try:
        yield kubeconfig
    finally:
        done.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
