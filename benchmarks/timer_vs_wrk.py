#!/usr/bin/env python3
"""How much does ``http-timing``'s own timer add to a latency? Compared with wrk, same run.

Every latency http-timing reports carries the client's own time. This runs, in alternating
rounds against the same server, ``wrk -t1 -c1 --latency`` (C, one connection) and
http-timing's sequential timed path (one keep-alive connection, the request built once):
the socket path used for ``http://`` (``client.run.wire``, a hand-written HTTP/1.1 reader)
and, for comparison, the same socket read by h11 (the parser httpx uses: would moving the reader
onto it keep the speed?) and the httpx path (``client.run.http.HttpxSender``, what every
request went through before). Targets: a bare ASGI
app on uvicorn (the same uvicorn burn-service runs on) and burn-service's
``/cpuBurnFlow?iterations=1``. Prints p50/p90 per client and the difference to wrk's p50.

Needs wrk (Debian: ``sudo apt-get install -y wrk``); without it the script says so and exits 1.

    .venv/bin/python -m benchmarks.timer_vs_wrk [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.support import (burn_service, free_port, http_server, require_wrk, run_main,
                                run_wrk)
from client.data.record import RequestRecord
from client.run.http import HttpxSender, request_headers
from client.run.modes import time_plan
from client.run.plan import LoadPlan
from client.run.targets import Service
from client.run.wire import SocketSender

BARE_APP = '''
async def app(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})
'''


def wrk_p50_p90(url: str, seconds: float) -> tuple[float, float]:
    """p50 and p90 of ``wrk -t1 -c1`` in ms."""
    done = run_wrk(url, seconds)
    return done.p50_us / 1e3, done.p90_us / 1e3


def client_p50_p90(make: Callable[[], HttpxSender | SocketSender | H11Sender], seconds: float
                   ) -> tuple[float, float]:
    sender = make()
    latencies: list[float] = []
    try:
        for seq in range(200):  # warm the connection and both sides' caches
            sender.send(seq, 0)
        deadline = time.monotonic() + seconds
        seq = 0
        while time.monotonic() < deadline:
            record: RequestRecord = sender.send(seq, 0)
            if record.status == 200:
                latencies.append(record.latency_ns / 1e6)
            seq += 1
    finally:
        sender.close()
    q = statistics.quantiles(latencies, n=10)
    return statistics.median(latencies), q[8]


class H11Sender:
    """For comparison only (not a path of the client): one keep-alive socket as
    :class:`SocketSender` uses it, each answer read by h11 instead of ``client.run.wire``."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        import socket
        from urllib.parse import urlsplit

        import h11

        self._h11 = h11
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        self._sock = socket.create_connection((parts.hostname, parts.port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = h11.Connection(h11.CLIENT)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._request = h11.Request(method="GET", target=target, headers=[
            ("Host", f"{parts.hostname}:{parts.port}"), ("Accept", "*/*"), *headers.items()])

    def send(self, seq: int, run_start_ns: int) -> RequestRecord:
        h11, conn = self._h11, self._conn
        start = time.perf_counter_ns()
        self._sock.sendall(conn.send(self._request) + conn.send(h11.EndOfMessage()))
        status = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(self._sock.recv(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                break
        end = time.perf_counter_ns()
        conn.start_next_cycle()
        return RequestRecord(seq, start - run_start_ns, end - start, status)

    def close(self) -> None:
        self._sock.close()


def run_p50_p90(url: str, requests: int) -> tuple[float, float]:
    """The whole sequential run as ``http-timing`` makes it (a worker thread, the recorder)."""
    plan = LoadPlan.from_options(requests=requests)
    records = time_plan(url, plan, lambda record: None).records
    latencies = [r.latency_ns / 1e6 for r in records[200:] if r.status == 200]
    return statistics.median(latencies), statistics.quantiles(latencies, n=10)[8]


@contextmanager
def bare_asgi() -> Iterator[Service]:
    """A bare ASGI app on uvicorn (no access log), started; stopped by its pid."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "bare_asgi_app.py").write_text(BARE_APP)
        port = free_port()
        with http_server([sys.executable, "-m", "uvicorn", "bare_asgi_app:app", "--app-dir",
                          scratch, "--port", str(port), "--log-level", "warning",
                          "--no-access-log"], port, timeout=30,
                         what="timer_vs_wrk: the bare app") as served:
            yield served


def measure(label: str, url: str, rounds: int, seconds: float) -> list[str]:
    headers = request_headers(False)
    results: dict[str, list[tuple[float, float]]] = {"wrk": [], "socket": [], "h11": [],
                                                     "run": [], "httpx": []}
    for _ in range(rounds):  # alternate, so a busy moment hits every client alike
        results["wrk"].append(wrk_p50_p90(url, seconds))
        results["socket"].append(client_p50_p90(lambda: SocketSender(url, headers), seconds))
        results["h11"].append(client_p50_p90(lambda: H11Sender(url, headers), seconds))
        results["run"].append(run_p50_p90(url, 5000))
        results["httpx"].append(client_p50_p90(lambda: HttpxSender(url), seconds))
    wrk50 = statistics.median(r[0] for r in results["wrk"])
    rows = []
    for name, title in (("wrk", "wrk -t1 -c1"), ("socket", "http-timing (socket, now)"),
                        ("h11", "the same socket read by h11"),
                        ("run", "http-timing run (5000 requests)"),
                        ("httpx", "http-timing (httpx, before)")):
        p50 = statistics.median(r[0] for r in results[name])
        p90 = statistics.median(r[1] for r in results[name])
        diff = "" if name == "wrk" else f"{p50 - wrk50:+.3f}"
        rows.append(f"| {label} | {title} | {p50:.3f} | {p90:.3f} | {diff} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="per client per round")
    opts = parser.parse_args(argv)
    if require_wrk() is None:
        print("timer_vs_wrk: wrk is not installed (Debian: sudo apt-get install -y wrk)",
              file=sys.stderr)
        return 1
    rows: list[str] = []
    with bare_asgi() as bare:
        rows += measure("bare ASGI app", bare.base_url + "/", opts.rounds, opts.seconds)
    with burn_service(health_timeout=30) as service:
        rows += measure("/cpuBurnFlow?iterations=1",
                        service.base_url + "/cpuBurnFlow?iterations=1", opts.rounds,
                        opts.seconds)
    print(f"\nSequential latency, one keep-alive connection, {opts.rounds} alternating rounds of "
          f"{opts.seconds:g} s per client (medians of the rounds); load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs\n")
    print("| endpoint | client | p50 ms | p90 ms | p50 - wrk's |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    run_main(main)
