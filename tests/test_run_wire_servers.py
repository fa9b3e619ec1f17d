"""client.run.wire against real HTTP servers, side by side with curl.

Each server (busybox ``httpd`` with a CGI script, nginx, Python's ``http.server`` with its CGI,
uvicorn, a Go ``net/http`` server, Node's ``http``) runs on 127.0.0.1 and answers the same
requests to the client and to curl: a page, a 404, a HEAD, a 304, a streamed (chunked) or CGI
body where the server has one. For each request the status and body length the client records
equal curl's, and the client reuses its kept-alive connection exactly where curl does (the
server keeps it). Every server is stopped by its pid at the end.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

import pytest

from client.data.request import HttpRequest
from client.run.targets.service import free_port, stop_process
from client.run.wire import SocketSender
from tests.nginx_conf import nginx_binary, nginx_conf
from tests.support import require

PAGE = b"<html><body>hello from a file</body></html>\n"
CGI_SCRIPT = """#!/bin/sh
# headers as a shell script writes them: bare LFs, and no length (the close ends the body)
echo "Content-Type: text/plain"
echo ""
echo "burnt $QUERY_STRING"
"""
NOT_MODIFIED_SCRIPT = """#!/bin/sh
echo "Status: 304 Not Modified"
echo ""
"""


@dataclass(frozen=True)
class Ask:
    """One request: method, path and headers."""

    path: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Served:
    base: str              # http://127.0.0.1:PORT
    asks: tuple[Ask, ...]


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"the server exited with {proc.returncode}: {out[-500:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


@contextmanager
def process(argv: list[str], port: int, cwd: Path) -> Iterator[None]:
    """``argv`` started in ``cwd``, until it listens on ``port``; stopped by its pid after."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, proc)
        yield
    finally:
        stop_process(proc, timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def site(root: Path) -> str:
    """A page and CGI scripts under ``root``; the page's Last-Modified (for a 304)."""
    (root / "cgi-bin").mkdir(parents=True)
    (root / "index.html").write_bytes(PAGE)
    for name, script in (("burn", CGI_SCRIPT), ("notmod", NOT_MODIFIED_SCRIPT)):
        (root / "cgi-bin" / name).write_text(script)
        (root / "cgi-bin" / name).chmod(0o755)
    return formatdate((root / "index.html").stat().st_mtime, usegmt=True)


def file_asks(modified: str) -> tuple[Ask, ...]:
    return (Ask("/index.html"), Ask("/missing"), Ask("/index.html", "HEAD"),
            Ask("/index.html", headers=(("If-Modified-Since", modified),)), Ask("/index.html"))


APP_ASKS = (Ask("/"), Ask("/missing"), Ask("/", "HEAD"), Ask("/notmod"), Ask("/stream"),
            Ask("/"))


@contextmanager
def busybox(tmp: Path) -> Iterator[Served]:
    busybox = shutil.which("busybox")
    require(busybox is not None, "no busybox (scripts/install-system-deps.sh: busybox-static)")
    assert busybox is not None
    site(tmp)
    port = free_port()
    with process([busybox, "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", str(tmp)], port,
                 tmp):
        yield Served(f"http://127.0.0.1:{port}",
                     (Ask("/cgi-bin/burn?iterations=5"), Ask("/index.html"), Ask("/missing"),
                      Ask("/index.html", "HEAD"), Ask("/cgi-bin/notmod"),
                      Ask("/cgi-bin/burn?iterations=6")))


NGINX_HTTP = """
    access_log off;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        gzip on;            # a gzip'd answer has no length known ahead: chunked
        gzip_min_length 0;
    }}
"""


@contextmanager
def nginx(tmp: Path) -> Iterator[Served]:
    binary = nginx_binary()
    require(binary is not None, "no nginx (scripts/install-load-tools.sh installs it)")
    assert binary is not None
    root = tmp / "root"
    modified = site(root)
    port = free_port()
    nginx_conf(tmp, NGINX_HTTP.format(port=port, root=root))
    with process([binary, "-p", str(tmp), "-c", str(tmp / "nginx.conf")], port, tmp):
        yield Served(f"http://127.0.0.1:{port}",
                     (*file_asks(modified), Ask("/index.html",
                                                headers=(("Accept-Encoding", "gzip"),))))


@contextmanager
def python_http_server(tmp: Path) -> Iterator[Served]:
    # run as root, CGIHTTPRequestHandler runs a script as nobody: its site is in a directory
    # nobody may enter (pytest's tmp_path is not)
    with tempfile.TemporaryDirectory(prefix="wire-site-") as where:
        root = Path(where)
        root.chmod(0o755)
        modified = site(root)
        port = free_port()
        # --cgi: CGIHTTPRequestHandler passes the script's bare-LF headers through (HTTP/1.0)
        with process([sys.executable, "-W", "ignore", "-m", "http.server", "--cgi", "--bind",
                      "127.0.0.1", str(port)], port, root):
            yield Served(f"http://127.0.0.1:{port}",
                         (*file_asks(modified), Ask("/cgi-bin/burn?iterations=5")))


UVICORN_APP = '''
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/stream":  # no length: uvicorn sends it chunked
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first ", "more_body": True})
        await send({"type": "http.response.body", "body": b"second"})
        return
    status, body = {"/": (200, b"hello"), "/notmod": (304, b"")}.get(path, (404, b"no"))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
'''


@contextmanager
def uvicorn_server(tmp: Path) -> Iterator[Served]:
    (tmp / "wireapp.py").write_text(UVICORN_APP)
    port = free_port()
    with process([sys.executable, "-m", "uvicorn", "wireapp:app", "--app-dir", str(tmp),
                  "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                 port, tmp):
        yield Served(f"http://127.0.0.1:{port}", APP_ASKS)


GO_SERVER = '''package main

import (
	"net/http"
	"os"
)

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("hello"))
	})
	mux.HandleFunc("/notmod", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first "))
		w.(http.Flusher).Flush() // no length: chunked
		w.Write([]byte("second"))
	})
	panic(http.ListenAndServe("127.0.0.1:"+os.Args[1], mux))
}
'''


def go_binary() -> Path:
    """The Go server, built once per source (cached under ~/.cache/throttle-lab)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                                else None)
    require(go is not None, "no Go toolchain (/usr/local/go/bin/go)")
    assert go is not None
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "throttle-lab"
    out = cache / f"go-http-{hashlib.sha256(GO_SERVER.encode()).hexdigest()[:12]}"
    if not out.exists():
        work = cache / f"{out.name}.src"
        work.mkdir(parents=True, exist_ok=True)
        (work / "main.go").write_text(GO_SERVER)
        subprocess.run([go, "build", "-o", f"{out}.part", "main.go"],
                       cwd=work, check=True, capture_output=True, timeout=600,
                       env={**os.environ, "GO111MODULE": "off"})
        os.replace(f"{out}.part", out)
    return out


@contextmanager
def go_server(tmp: Path) -> Iterator[Served]:
    binary = go_binary()
    port = free_port()
    with process([str(binary), str(port)], port, tmp):
        yield Served(f"http://127.0.0.1:{port}", APP_ASKS)


NODE_SERVER = '''
const http = require("http");
http.createServer((req, res) => {
  if (req.url === "/") { res.end("hello"); return; }
  if (req.url === "/notmod") { res.statusCode = 304; res.end(); return; }
  if (req.url === "/stream") { res.write("first "); res.end("second"); return; }  // chunked
  res.statusCode = 404; res.end("no");
}).listen(Number(process.argv[2]), "127.0.0.1");
'''


@contextmanager
def node_server(tmp: Path) -> Iterator[Served]:
    node = shutil.which("node")
    require(node is not None, "no node (/usr/bin/node)")
    assert node is not None
    (tmp / "server.js").write_text(NODE_SERVER)
    port = free_port()
    with process([node, str(tmp / "server.js"), str(port)], port, tmp):
        yield Served(f"http://127.0.0.1:{port}", APP_ASKS)


SERVERS = {"busybox-httpd-cgi": busybox, "nginx": nginx, "python-http.server": python_http_server,
           "uvicorn": uvicorn_server, "go-net-http": go_server, "node-http": node_server}


def client_reads(served: Served) -> list[tuple[int, int, bool]]:
    """``(status, body length, reused a connection)`` of each request, in order, on one
    sender (one kept-alive connection where the server keeps it)."""
    requests = [HttpRequest(served.base + ask.path, ask.method, ask.headers)
                for ask in served.asks]
    seen = []
    with SocketSender(requests, {}, timeout=10) as sender:
        for seq in range(len(requests)):
            before = sender.connects
            record = sender.send(seq, 0, which=seq)
            assert record.status > 0 and sender.last is not None, record.error
            seen.append((record.status, sender.last.body_bytes, sender.connects == before))
    return seen


def curl_reads(served: Served) -> list[tuple[int, int, bool]]:
    """The same as curl reads it: one curl, the requests one after another (``--next``)."""
    argv = ["curl", "-sS", "--max-time", "10"]
    for n, ask in enumerate(served.asks):
        argv += [*(["--next"] if n else []), "-o", "/dev/null",
                 "-w", "%{http_code} %{size_download} %{num_connects}\\n",
                 *(["--head"] if ask.method == "HEAD" else []),
                 *(arg for name, value in ask.headers for arg in ("-H", f"{name}: {value}")),
                 served.base + ask.path]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    return [(int(status), int(size), connects == "0") for status, size, connects in rows]


@pytest.mark.parametrize("name", list(SERVERS))
def test_the_client_records_what_curl_reads(name: str, tmp_path: Path) -> None:
    require(shutil.which("curl") is not None, "no curl (scripts/install-system-deps.sh)")
    with SERVERS[name](tmp_path) as served:
        ours = client_reads(served)
        curls = curl_reads(served)
    assert ours == curls, list(zip(served.asks, ours, curls))
    statuses = {status for status, _, _ in ours}
    assert {200, 404}.issubset(statuses), ours  # real answers, not a server that fell over
    assert 304 in statuses, ours
