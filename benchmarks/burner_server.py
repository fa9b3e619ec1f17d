"""A tiny stdlib HTTP service that burns CPU: the "any service" of the cgroup tests and
benchmarks (``benchmarks.support.burner_in_group`` runs it in a cgroup of its own).

    python benchmarks/burner_server.py [--port 0] [--shape connection|request|fork|pool]

Prints ``port N`` on its first line once it listens. ``GET /burn?ms=N`` busy-loops until its
thread has used N ms of CPU (``time.thread_time``: a quota's pauses do not count), then answers
``burned N ms``; ``GET /healthz`` answers ``ok``. ``GET /burn?ms=N&sleep_ms=M&sleep_every=K``
burns N ms and, on every Kth such request the server takes (counted over its life, across its
threads and processes), also sleeps M ms after the burn: a wait that is not the CPU's (a
database, a disk), the same URL every time. No dependencies: it stands for a service that
knows nothing of throttle-lab. ``--shape`` says how it uses threads and processes (what
decides where the kernel keeps its CPU time once a thread or process has ended):

- ``connection`` (the default): one thread per connection, HTTP/1.1 keep-alive;
- ``request``: one thread per request (HTTP/1.0, a connection per request), each thread ends
  with its request (Python's ``ThreadingHTTPServer`` as most use it);
- ``fork``: one process per request (``ForkingHTTPServer``, HTTP/1.0), reaped by the server;
- ``pool``: a fixed pool of 4 threads takes the connections (HTTP/1.0), threads never end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from socketserver import ForkingMixIn
from urllib.parse import parse_qs, urlsplit

__all__ = ["SHAPES", "BurnHandler", "EveryNth", "ForkingServer", "OneShotHandler", "PoolServer",
           "burn", "main", "make_server"]

MAX_MS = 10_000.0
MAX_EVERY = 1_000_000
SHAPES = ("connection", "request", "fork", "pool")
POOL_THREADS = 4


def burn(ms: float) -> None:
    """Busy-loop until this thread has run ``ms`` of CPU."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        for _ in range(200):
            pass


class EveryNth:
    """A count shared by the server's threads and forked processes: :meth:`due` is True on
    the Nth, 2Nth, ... call that asks with that N."""

    def __init__(self) -> None:
        self.count = multiprocessing.Value("q", 0)   # shared memory: a fork sees the same

    def due(self, every: int) -> bool:
        with self.count.get_lock():
            self.count.value += 1
            return self.count.value % every == 0


class BurnHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as a real service
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed ACK)
    waits: EveryNth   # the sleep_every count: one per server (``make_server``)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._answer(200, "ok")
            return
        if url.path != "/burn":
            self._answer(404, "not found")
            return
        query = parse_qs(url.query)
        ms, sleep_ms = _number(query, "ms", 5.0), _number(query, "sleep_ms", 0.0)
        every = _number(query, "sleep_every", 1.0)
        if not 0 <= ms <= MAX_MS or not 0 <= sleep_ms <= MAX_MS:
            self._answer(422, f"ms and sleep_ms must be numbers in [0, {MAX_MS:g}]")
            return
        if not (every.is_integer() and 1 <= every <= MAX_EVERY):
            self._answer(422, f"sleep_every must be a whole number in [1, {MAX_EVERY}]")
            return
        burn(ms)
        if sleep_ms and self.waits.due(int(every)):
            time.sleep(sleep_ms / 1000)
            self._answer(200, f"burned {ms:g} ms, slept {sleep_ms:g} ms")
            return
        self._answer(200, f"burned {ms:g} ms")

    def _answer(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass   # quiet: the tests read stdout for the port only


def _number(query: dict[str, list[str]], name: str, default: float) -> float:
    """The query's ``name`` as a number (-1 when it is not one: out of every range)."""
    try:
        return float(query.get(name, [str(default)])[0])
    except ValueError:
        return -1.0


class OneShotHandler(BurnHandler):
    protocol_version = "HTTP/1.0"   # one request per connection


class ForkingServer(ForkingMixIn, HTTPServer):
    """A process per request (``http.server`` has ``ThreadingHTTPServer`` only)."""


class PoolServer(HTTPServer):
    """``POOL_THREADS`` threads, started once, take the accepted connections from a queue."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.connections: queue.Queue[tuple[socket.socket, tuple[str, int]]] = queue.Queue()
        for _ in range(POOL_THREADS):
            threading.Thread(target=self._work, daemon=True).start()

    def process_request(self, request: socket.socket,  # type: ignore[override]
                        client_address: tuple[str, int]) -> None:
        self.connections.put((request, client_address))

    def _work(self) -> None:
        while True:
            request, address = self.connections.get()
            try:
                self.finish_request(request, address)
            except Exception:   # noqa: BLE001 (one bad connection must not end the thread)
                self.handle_error(request, address)
            finally:
                self.shutdown_request(request)


def make_server(shape: str, port: int) -> HTTPServer:
    """The server of ``shape`` (see the module's doc) on 127.0.0.1:``port``."""
    BurnHandler.waits = EveryNth()   # before any fork: every process counts on the same
    if shape == "connection":
        server = ThreadingHTTPServer(("127.0.0.1", port), BurnHandler)
        server.daemon_threads = True
        return server
    if shape == "request":
        threaded = ThreadingHTTPServer(("127.0.0.1", port), OneShotHandler)
        threaded.daemon_threads = True
        return threaded
    if shape == "fork":
        return ForkingServer(("127.0.0.1", port), OneShotHandler)
    if shape == "pool":
        return PoolServer(("127.0.0.1", port), OneShotHandler)
    raise ValueError(f"--shape must be one of {', '.join(SHAPES)} (got {shape!r})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--shape", choices=SHAPES, default="connection")
    args = parser.parse_args(argv)
    server = make_server(args.shape, args.port)
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
