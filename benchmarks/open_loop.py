"""Can ``http-timing --rate R`` keep up with vegeta? Both against the same bare ASGI app.

For each rate (default 1000, 2000, 5000, 10000 requests/s), one after the other in one run:
``vegeta attack -rate R/s -duration Ds`` (Go; its report's achieved rate, p50 and p99), then
``http-timing --url URL --rate R --duration D --quiet --no-plot`` as a user runs it (its
metadata's ``client_pace.achieved_rps``, the run's p50 and p99, and whether it says it fell
behind). The app is a bare ASGI app on uvicorn (``benchmarks.timer_vs_wrk.bare_asgi``), in its own
process. Prints a markdown table and the load average (the machine may be shared).

Note the two p99s are not the same thing: http-timing's latency counts from each request's
intended send time (no coordinated omission, as wrk2), vegeta's from the moment it sent, so
when a client falls behind only http-timing's p99 shows it.

The goal (issue 20): at every rate vegeta sustains here, http-timing sustains >= 98 % of it
with p99 <= 1.5 x vegeta's.

Needs vegeta (``scripts/install-load-tools.sh``: ``go install
github.com/tsenart/vegeta/v12@v12.13.0``); without it the script says so and exits 1.

    .venv/bin/python -m benchmarks.open_loop [--rates 1000,2000,5000,10000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.support import HTTP_TIMING, describe_load, run_main
from benchmarks.timer_vs_wrk import bare_asgi
from client.run.targets.service import ServiceError

GOAL_SHARE, GOAL_P99 = 0.98, 1.5


@dataclass(frozen=True)
class Result:
    achieved_rps: float
    p50_ms: float
    p99_ms: float
    note: str = ""


def vegeta_path() -> str | None:
    return shutil.which("vegeta") or next(
        (str(p) for p in (Path.home() / "go" / "bin" / "vegeta",) if p.exists()), None)


def run_vegeta(vegeta: str, url: str, rate: int, seconds: float) -> Result:
    attack = subprocess.run([vegeta, "attack", f"-rate={rate}/s", f"-duration={seconds:g}s"],
                            input=f"GET {url}\n".encode(), capture_output=True,
                            timeout=seconds + 60, check=True)
    report = subprocess.run([vegeta, "report", "-type=json"], input=attack.stdout,
                            capture_output=True, timeout=60, check=True)
    out = json.loads(report.stdout)
    ok = out.get("status_codes", {}).get("200", 0)
    return Result(out["rate"], out["latencies"]["50th"] / 1e6, out["latencies"]["99th"] / 1e6,
                  "" if ok == out["requests"] else f"{out['requests'] - ok} errors")


def run_http_timing(url: str, rate: int, seconds: float, scratch: Path) -> Result:
    name = f"open-loop-{rate}"
    result = subprocess.run([str(HTTP_TIMING), "--url", url, "--rate", str(rate),
                             "--duration", f"{seconds:g}", "--quiet", "--no-plot", "--name",
                             name, "--data-dir", str(scratch)], capture_output=True, text=True,
                            timeout=seconds * 20 + 60)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"http-timing failed: {result.stderr.strip()}")
    meta = json.loads((scratch / f"{name}.json").read_text())
    pace, summary = meta.get("client_pace") or {}, meta["summary"]
    note = "said it fell behind" if meta.get("client_fell_behind") else ""
    if summary.get("errors"):
        note = f"{summary['errors']} errors; {note}".strip("; ")
    return Result(pace.get("achieved_rps", 0.0), summary["p50_ms"], summary["p99_ms"], note)


def verdict(vegeta: Result, ours: Result, rate: int) -> str:
    if vegeta.achieved_rps < GOAL_SHARE * rate:
        return "vegeta did not sustain it"
    share_ok = ours.achieved_rps >= GOAL_SHARE * vegeta.achieved_rps
    p99_ok = ours.p99_ms <= GOAL_P99 * vegeta.p99_ms
    return "met" if share_ok and p99_ok else (
        "missed: " + ", ".join(w for w, bad in (("rate", not share_ok), ("p99", not p99_ok))
                               if bad))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,2000,5000,10000")
    parser.add_argument("--seconds", type=float, default=5.0, help="per rate per client")
    opts = parser.parse_args(argv)
    rates = [int(r) for r in opts.rates.split(",")]
    vegeta = vegeta_path()
    if vegeta is None:
        print("open_loop: vegeta is not installed (scripts/install-load-tools.sh)",
              file=sys.stderr)
        return 1
    rows: list[str] = []
    before = describe_load("before")
    try:
        with tempfile.TemporaryDirectory() as scratch, bare_asgi() as bare:
            url = bare.base_url + "/"
            run_vegeta(vegeta, url, 500, 1)  # warm the app up
            for rate in rates:
                theirs = run_vegeta(vegeta, url, rate, opts.seconds)
                ours = run_http_timing(url, rate, opts.seconds, Path(scratch))
                rows.append(f"| {rate} | {theirs.achieved_rps:.0f} | {theirs.p50_ms:.2f} | "
                            f"{theirs.p99_ms:.2f} | {ours.achieved_rps:.0f} | "
                            f"{ours.p50_ms:.2f} | {ours.p99_ms:.2f} | "
                            f"{verdict(theirs, ours, rate)} | "
                            f"{'; '.join(n for n in (theirs.note, ours.note) if n)} |")
                print(rows[-1], flush=True)
    except ServiceError as exc:
        print(f"open_loop: {exc}", file=sys.stderr)
        return 1
    print(f"\nOpen loop against a bare ASGI app (uvicorn, one process), {opts.seconds:g} s per "
          f"rate per client, vegeta then http-timing; {before}; {describe_load('after')}\n")
    print("| asked /s | vegeta /s | vegeta p50 ms | vegeta p99 ms | http-timing /s | "
          "http-timing p50 ms | http-timing p99 ms | goal | notes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    run_main(main)
