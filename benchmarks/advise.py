"""How ``http-timing advise`` does on a few targets: its answer, the model's first guess, the
runs and time it needed, what the usage rules would set, and an independent check.

    sudo .venv/bin/python -m benchmarks.advise [--backend kernel] [--targets 20 50 120]
                                               [--loads sequential rate] [--no-check]
                                               [--out DIR]

For each target (p99 <= T ms) and load (``sequential``: 100 requests back to back;
``rate``: an open loop of 40 requests/s for 5 s) it runs ``http-timing advise`` as a user
would (``--json``, default 5000 iterations: ~5 ms of CPU per request, ``--no-alternatives``),
then, unless ``--no-check``, the independent check of the issue: ``http-timing sweep`` at the
recommended limit and at 25 % less, each once. Prints one Markdown table row per case, with
the load average before and after it (the machine may be shared: every run, limited or not,
is slower on a busy machine). Every run is kept under ``--out`` (default: a new temporary
folder, printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.support import HTTP_TIMING, run_main

LOADS = {
    "sequential": ["--requests", "100"],
    "rate": ["--rate", "40", "--duration", "5"],
}


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def advise(backend: str, target: float, load: str, out: Path) -> tuple[dict[str, Any], float]:
    name = f"{load}-p{target:g}"
    began = time.monotonic()
    done = subprocess.run([str(HTTP_TIMING), "advise", "--backend", backend, "--p99",
                           f"{target:g}", *LOADS[load], "--no-alternatives", "--name", name,
                           "--json"], cwd=out, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - began
    if done.returncode not in (0, 3):
        raise SystemExit(f"advise {name} failed ({done.returncode}): {done.stderr[-500:]}")
    return json.loads(done.stdout), seconds


def check(backend: str, cpus: float, load: str, out: Path, name: str) -> float | None:
    """p99 of one ``sweep`` run at ``cpus``."""
    done = subprocess.run([str(HTTP_TIMING), "sweep", "--backend", backend, "--cpus",
                           f"{cpus:g}", *LOADS[load], "--name", name], cwd=out,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 1):
        return None
    meta = json.loads((out / "raw-data" / f"{name}-{backend}-{cpus:g}.json").read_text())
    p99 = meta.get("summary", {}).get("p99_ms")
    return float(p99) if p99 is not None else None


def usage_cell(answer: dict[str, Any]) -> str:
    cells = []
    for usage in answer["usage_based"]:
        measured = usage["measured"] or {}
        verdict = "meets" if usage["met"] else "misses"
        cells.append(f"{usage['rule']} {usage['cpus']:g}: p99 {measured.get('p99_ms') or 0:.0f}"
                     f" ({verdict})")
    return "; ".join(cells) or "–"


def row(backend: str, target: float, load: str, out: Path, do_check: bool) -> str:
    before = load_average()
    answer, seconds = advise(backend, target, load, out)
    rec = answer["recommended"]
    guess = answer["model_guess"]
    runs = len(answer["runs"])
    search = sum(1 for r in answer["runs"] if r["role"] in ("guess", "search"))
    checked = "–"
    if rec is not None and do_check:
        at = check(backend, rec["cpus"], load, out, f"check-{load}-p{target:g}")
        less = round(rec["cpus"] * 0.75, 3)
        below = check(backend, less, load, out, f"less-{load}-p{target:g}")
        checked = (f"{rec['cpus']:g}: {at or 0:.1f} ms; {less:g}: {below or 0:.1f} ms")
    answer_cell = (f"{rec['cpus']:g} ({answer['at_recommended']['p99_ms']:.1f} ms)" if rec
                   else "none: " + str(answer["reason"])[:60])
    lower = answer["next_lower"]
    lower_cell = f"{lower['cpus']:g} ({lower['p99_ms']:.1f} ms)" if lower else "–"
    guess_cell = (f"{guess['cpus']:g} ({guess['vs_measured'] * 100:+.0f} %)"
                  if guess and guess.get("vs_measured") is not None
                  else (f"{guess['cpus']:g}" if guess else "none"))
    return (f"| {load} | {target:g} | {answer['profile']['run']['p99_ms']:.1f} | {answer_cell} "
            f"| {lower_cell} | {guess_cell} | {search} of {runs} | {seconds:.0f} s | "
            f"{usage_cell(answer)} | {checked} | {before} → {load_average()} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="kernel")
    parser.add_argument("--targets", type=float, nargs="+", default=[20, 50, 120])
    parser.add_argument("--loads", nargs="+", choices=sorted(LOADS), default=list(LOADS))
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args(argv)
    out = opts.out or Path(tempfile.mkdtemp(prefix="advise-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"runs kept in {out}; {os.cpu_count()} CPUs; backend {opts.backend}", file=sys.stderr)
    print("| load | p99 target ms | p99 without limit | recommended CPU (p99) | next lower "
          "tried (p99) | model's first guess (vs answer) | search runs of all | time | "
          "usage-based limits, measured | independent check: p99 at rec; at 25 % less | "
          "load average |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for load in opts.loads:
        for target in opts.targets:
            print(row(opts.backend, target, load, out, opts.check), flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
