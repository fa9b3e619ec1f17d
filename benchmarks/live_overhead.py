"""What watching a run live costs the run: the timed path's latency with the live page open
(``http-timing --live``) against without, on the same service, alternated.

    .venv/bin/python -m benchmarks.live_overhead [--requests 10000] [--iterations 100]
                                                 [--rounds 3] [--no-browser]

One ``burn-service`` (no limit: its latency is steady, so a cost would show) gets ``--rounds``
rounds of sequential runs of ``--requests`` requests of ``/cpuBurnFlow?iterations=N``, each
round in three ways, one after the other: **no page** (no ``--live``); **SSE reader**
(``--live`` and a plain HTTP client reading ``/events`` from the start to the end); **Chromium**
(``--live`` and Debian's ``/usr/bin/chromium``, headless, driven by Playwright, showing the
page: drawing every dot; skipped without it or with ``--no-browser``). Each run's p50 and p90
come from its own metadata (``summary``), the page server's CPU and frames from its ``live``
entry; the table gives the median over the rounds. Also timed in the browser: one whole redraw
of the final picture (every request, one dot per pixel), in ms.

Every process started here is stopped by its own pid, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import httpx

from benchmarks.support import HTTP_TIMING, burn_service, describe_load, run_main
from client.run.targets.service import free_port, stop_process

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
REDRAW = "() => { full = true; const t0 = performance.now(); draw(); return performance.now() - t0; }"


def wait_serving(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            httpx.get(url + "state", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.01)
    raise RuntimeError(f"{url} never served")


def read_events(url: str) -> None:
    """A viewer: every frame until the run's end."""
    with httpx.stream("GET", url + "events", timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and '"end":' in line:
                return


@contextmanager
def timed_run(base: str, requests: int, iterations: int, folder: Path, name: str,
              port: int | None) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    argv = [str(HTTP_TIMING), "--url", base + "/cpuBurnFlow", "--iterations",
            str(iterations), "--requests", str(requests), "--name", name, "--quiet",
            "--no-plot", "--data-dir", str(folder)]
    if port is not None:
        argv += ["--live", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc, f"http://127.0.0.1:{port}/"
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"http-timing exited {proc.returncode}")
    finally:
        stop_process(proc, timeout=10)


def one_run(mode: str, base: str, args: argparse.Namespace, folder: Path, name: str,
            browser: Any) -> dict[str, Any]:
    port = None if mode == "no page" else free_port()
    redraw = None
    with timed_run(base, args.requests, args.iterations, folder, name, port) as (proc, url):
        if mode == "SSE reader":
            wait_serving(url, proc)
            reader = threading.Thread(target=read_events, args=(url,), daemon=True)
            reader.start()
            reader.join(600)
        elif mode == "Chromium":
            wait_serving(url, proc)
            context = browser.new_context(viewport={"width": 1000, "height": 900})
            try:
                page = context.new_page()
                page.goto(url)
                page.wait_for_function("window.live.end !== null", timeout=600_000)
                redraw = page.evaluate(REDRAW)
            finally:
                context.close()
    meta = json.loads((folder / f"{name}.json").read_text())
    live = meta.get("live") or {}
    return {"p50": meta["summary"]["p50_ms"], "p90": meta["summary"]["p90_ms"],
            "cpu": live.get("server_cpu_s"), "sent": live.get("frames_sent"),
            "dropped": live.get("frames_dropped"), "redraw": redraw}


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def show(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args(argv)
    modes = ["no page", "SSE reader"]
    browser_cm: Any = None
    browser = None
    if not args.no_browser and CHROMIUM.exists():
        from playwright.sync_api import sync_playwright

        browser_cm = sync_playwright()
        playwright = browser_cm.__enter__()
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=ARGS)
        modes.append("Chromium")
    else:
        print("Chromium row skipped (--no-browser, or no /usr/bin/chromium)", file=sys.stderr)
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    print(describe_load("before"), file=sys.stderr)
    try:
        with burn_service(None, backend="inprocess") as service, \
                tempfile.TemporaryDirectory() as tmp:
            base = service.base_url
            for round_no in range(args.rounds):
                for mode in modes:
                    row = one_run(mode, base, args, Path(tmp), f"r{round_no}-{len(results[mode])}"
                                  f"-{mode.replace(' ', '-')}", browser)
                    results[mode].append(row)
                    print(f"round {round_no + 1} {mode}: p50 {row['p50']:.3f} ms",
                          file=sys.stderr)
    finally:
        if browser is not None:
            browser.close()
        if browser_cm is not None:
            browser_cm.__exit__(None, None, None)
    print(describe_load("after"), file=sys.stderr)
    print(f"live_overhead.py {date.today()}: {args.rounds} rounds x {args.requests} sequential "
          f"requests of /cpuBurnFlow?iterations={args.iterations}, medians over the rounds")
    print("| page | p50 ms | p90 ms | page server CPU s | frames sent / dropped | whole redraw ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, rows in results.items():
        sent, dropped = median(rows, "sent"), median(rows, "dropped")
        print(f"| {mode} | {show(median(rows, 'p50'), '.3f')} | {show(median(rows, 'p90'), '.3f')}"
              f" | {show(median(rows, 'cpu'), '.3f')} | "
              f"{'-' if sent is None else f'{sent:.0f} / {dropped:.0f}'} | "
              f"{show(median(rows, 'redraw'), '.1f')} |")
    return 0


if __name__ == "__main__":
    run_main(main)
