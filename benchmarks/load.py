"""Sustained throughput of a small burn under concurrent load, and the service's memory.

    .venv/bin/python -m benchmarks.load [--iterations 100] [--levels 1 4 16 64]
                                        [--duration 5] [--max-concurrent N] [--max-queued Q]
                                        [--url http://HOST:PORT --pid PID]

It starts ``burn-service`` (unless ``--url`` names a running one), then for each concurrency
level keeps that many keep-alive connections busy with ``GET /cpuBurnFlow?iterations=N`` for
``--duration`` seconds and prints one Markdown table row: answers per second, successful
(200) requests per second, 503s from the concurrency cap (beyond ``--max-concurrent`` in flight
and ``--max-queued`` waiting), p50/p99/max
latency of the 200s, and the service's resident memory (VmRSS) after the level. The memory
before the first level and after the last (and the peak, VmHWM) follow the table.

The load generator is a minimal HTTP/1.1 client on asyncio streams (one request in flight per
connection, like ``wrk -c``), much cheaper per request than httpx, so the figures are the
service's and not the client's; it still shares the machine's CPUs with the service. The
machine may be shared: run it once on a quiet machine and say how busy it was.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from benchmarks.support import burn_service, run_main
from client.data.summary import percentile


# ----------------------------------------------------------------------------- measuring

@dataclass(frozen=True)
class Level:
    """What one concurrency level measured."""

    concurrency: int
    seconds: float
    statuses: Counter[int]
    ok_latencies_ms: list[float]
    failures: int
    rss_kib: int | None

    @property
    def answers(self) -> int:
        return sum(self.statuses.values())

    def row(self) -> str:
        ok = self.statuses.get(200, 0)
        lat = self.ok_latencies_ms
        other = sum(n for s, n in self.statuses.items() if s not in (200, 503)) + self.failures
        rss = f"{self.rss_kib / 1024:.1f}" if self.rss_kib is not None else "n/a"
        return (f"| {self.concurrency} | {self.answers / self.seconds:,.0f} | "
                f"{ok / self.seconds:,.0f} | {self.statuses.get(503, 0):,} | {other} | "
                f"{percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} | "
                f"{max(lat, default=float('nan')):.2f} | {rss} |")


HEADER = ("| clients | answers/s | 200/s | 503s | other | p50 ms | p99 ms | max ms | RSS MiB |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in KiB, from /proc/<pid>/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    return {key: int(value) for key, value in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text,
                                                        re.MULTILINE)}


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one response; (status, whether the server will close the connection)."""
    status_line = await reader.readuntil(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    length, close = 0, False
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    if length:
        await reader.readexactly(length)
    return status, close


async def _connection(host: str, port: int, request: bytes, until: float,
                      statuses: Counter[int], ok_ms: list[float], failures: list[str]) -> None:
    reader = writer = None
    try:
        while time.monotonic() < until:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            assert reader is not None
            t0 = time.perf_counter_ns()
            writer.write(request)
            try:
                status, close = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                failures.append(type(exc).__name__)
                writer.close()
                reader = writer = None
                continue
            elapsed_ms = (time.perf_counter_ns() - t0) / 1e6
            statuses[status] += 1
            if status == 200:
                ok_ms.append(elapsed_ms)
            if close:
                writer.close()
                reader = writer = None
    finally:
        if writer is not None:
            writer.close()


async def run_level(host: str, port: int, target: str, concurrency: int,
                    seconds: float) -> tuple[Counter[int], list[float], int, float]:
    request = f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    statuses: Counter[int] = Counter()
    ok_ms: list[float] = []
    failures: list[str] = []
    start = time.monotonic()
    until = start + seconds
    await asyncio.gather(*(_connection(host, port, request, until, statuses, ok_ms, failures)
                           for _ in range(concurrency)))
    return statuses, ok_ms, len(failures), time.monotonic() - start


# ----------------------------------------------------------------------------- command line

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100, help="burn size (default 100)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64],
                        help="concurrent connections per level (default 1 4 16 64)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per level")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up first")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="passed to the burn-service it starts (default: its own)")
    parser.add_argument("--max-queued", type=int, default=None,
                        help="passed to the burn-service it starts (default: its own)")
    parser.add_argument("--url", help="measure a running service instead of starting one")
    parser.add_argument("--pid", type=int, help="with --url: its pid, to read its memory")
    args = parser.parse_args(argv)
    if min(args.levels) < 1 or args.duration <= 0 or args.iterations < 0:
        parser.error("levels must be >= 1, duration > 0, iterations >= 0")
    return args


def measure(base: str, pid: int | None, args: argparse.Namespace) -> int:
    url = urlsplit(base)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    target = f"/cpuBurnFlow?iterations={args.iterations}"
    limits = httpx.get(base + "/limits", timeout=5).json()

    def rss() -> int | None:
        return memory_kib(pid).get("VmRSS") if pid is not None else None

    before = rss()
    asyncio.run(run_level(host, port, target, max(args.levels), args.warmup))
    after_warmup = rss()
    print(f"burn-service at {base}: GET {target}, {args.duration:g} s per level, "
          f"max_concurrent={limits.get('max_concurrent')}, "
          f"max_queued={limits.get('max_queued')}, workers={limits.get('workers')}, "
          f"cpu_count={limits.get('cpu_count')}; load generator: this process (asyncio, "
          f"one request in flight per connection), on the same machine\n")
    print(HEADER)
    failed = 0
    for concurrency in args.levels:
        statuses, ok_ms, failures, seconds = asyncio.run(
            run_level(host, port, target, concurrency, args.duration))
        level = Level(concurrency, seconds, statuses, ok_ms, failures, rss())
        failed += failures
        print(level.row(), flush=True)
    if pid is not None:
        end = memory_kib(pid)
        print(f"\nservice memory (VmRSS): {_mib(before)} MiB at start, {_mib(after_warmup)} MiB "
              f"after warm-up, {_mib(end.get('VmRSS'))} MiB at the end; peak (VmHWM) "
              f"{_mib(end.get('VmHWM'))} MiB")
    else:
        print("\nservice memory: not measured (give --pid with --url)")
    return 1 if failed else 0


def _mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.url:
        return measure(args.url.rstrip("/"), args.pid, args)
    if not sys.platform.startswith("linux"):
        print("load.py: memory is read from /proc; on this OS use --url", file=sys.stderr)
    extra = ["--max-iterations", str(max(args.iterations, 1))]
    if args.max_concurrent is not None:
        extra += ["--max-concurrent", str(args.max_concurrent)]
    if args.max_queued is not None:
        extra += ["--max-queued", str(args.max_queued)]
    with burn_service(None, *extra) as service:
        pid = service.pid
        assert pid is not None
        return measure(service.base_url, pid if os.path.exists(f"/proc/{pid}") else None, args)


if __name__ == "__main__":
    run_main(main)
