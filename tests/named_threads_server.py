"""A stdlib HTTP service whose threads have names (the kernel's ``comm``): two pool threads
``burner-1`` and ``burner-2`` burn ``/burn?ms=N`` of CPU each request, and a thread
``spender``, outside the request path, burns while a request is in flight (as a runtime's
compiler or collector does under load). The main thread only accepts. Prints ``port N`` once
it listens. Used by tests/test_threads.py."""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

BUSY = threading.Event()
IN_FLIGHT = [0]
LOCK = threading.Lock()


def name_this_thread(name: str) -> None:
    """The kernel's name of the calling thread (Python's own name stays in Python)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write(name)


def burn(ms: float) -> None:
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


def spender() -> None:
    name_this_thread("spender")
    while True:
        BUSY.wait()
        burn(0.5)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        with LOCK:
            IN_FLIGHT[0] += 1
            BUSY.set()
        try:
            burn(float(parse_qs(url.query).get("ms", ["0"])[0]))
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            with LOCK:
                IN_FLIGHT[0] -= 1
                if not IN_FLIGHT[0]:
                    BUSY.clear()

    def log_message(self, *args: object) -> None:
        pass


class PoolServer(HTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.jobs: queue.Queue[tuple[socket.socket, object]] = queue.Queue()
        for k in (1, 2):
            threading.Thread(target=self.work, args=(f"burner-{k}",), daemon=True).start()

    def work(self, name: str) -> None:
        name_this_thread(name)
        while True:
            request, address = self.jobs.get()
            try:
                self.finish_request(request, address)
            finally:
                self.shutdown_request(request)

    def process_request(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        self.jobs.put((request, client_address))


def main() -> int:
    threading.Thread(target=spender, daemon=True).start()
    server = PoolServer()
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
