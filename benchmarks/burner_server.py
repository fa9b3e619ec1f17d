"""A tiny stdlib HTTP service that burns CPU: the "any service" of the cgroup tests and
benchmarks (``benchmarks.support.burner_in_group`` runs it in a cgroup of its own).

    python benchmarks/burner_server.py [--port 0]

Prints ``port N`` on its first line once it listens. ``GET /burn?ms=N`` busy-loops until its
thread has used N ms of CPU (``time.thread_time``: a quota's pauses do not count), then answers
``burned N ms``; ``GET /healthz`` answers ``ok``. Threaded (one thread per connection), no
dependencies: it stands for a service that knows nothing of throttle-lab.
"""

from __future__ import annotations

import argparse
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["BurnHandler", "burn", "main"]

MAX_MS = 10_000.0


def burn(ms: float) -> None:
    """Busy-loop until this thread has run ``ms`` of CPU."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        for _ in range(200):
            pass


class BurnHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as a real service
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed ACK)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._answer(200, "ok")
            return
        if url.path != "/burn":
            self._answer(404, "not found")
            return
        try:
            ms = float(parse_qs(url.query).get("ms", ["5"])[0])
        except ValueError:
            ms = -1.0
        if not 0 <= ms <= MAX_MS:
            self._answer(422, f"ms must be a number in [0, {MAX_MS:g}]")
            return
        burn(ms)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), BurnHandler)
    server.daemon_threads = True
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
