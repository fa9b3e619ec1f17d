"""``make bench``: run benchmarks, keep a dated record of each, show the latest in the docs.

    .venv/bin/python -m benchmarks [NAME ...] [--list] [--page-only]

Each NAME runs as ``python -m benchmarks.NAME`` with the arguments :data:`CHOSEN` gives it
(without NAME: every benchmark in :data:`CHOSEN`, the ones that need only root and this host:
no Docker, no Kubernetes node, no guest). Each prints its table and writes its record to
``benchmarks/results/<NAME>-<UTC start>.json`` (``benchmarks/records.py``); then the
generated part of docs/benchmarks.md is rewritten from the latest record of each.
``--page-only`` rewrites the page from the records there are, running nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.records import ENV, PAGE, RESULTS, latest, write_page

__all__ = ["CHOSEN", "LONG", "NODE", "main", "run_one"]

# what ``make bench`` runs, with the arguments it gives each (root and this host only)
CHOSEN: dict[str, tuple[str, ...]] = {
    "model_vs_original": (),
    "burn_calibration": (),
    "parallel_burn": ("--rounds", "3"),
    "kernel_quota": ("--requests", "100"),
    "throttle_scaling": ("--modes", "boundary", "--window", "5", "--rounds", "2"),
    "inprocess_throttle": ("--skip-demo",),
    "request_path": (),
    "advise_waits": (),
    "thread_sampling": (),
    "replay_accuracy": (),
}
# run by name only: they use the project's Kubernetes node (under its lock, as docs/benchmarks.md
# says: ``flock /tmp/kube.lock timeout 1200 ...``)
NODE: tuple[str, ...] = ("agent_cost_node", "cluster_scale", "commands_remote", "passive_vs_live",
                         "replicas_passive_vs_live", "hpa_vs_controller")
# run by name only: this host, but longer than ``make bench`` should take (~10 min; the
# week of Prometheus series ~25 min, its backfill most of it)
LONG: tuple[str, ...] = ("advise_matrix", "cluster_offline", "prometheus_week")
PACKAGE = Path(__file__).resolve().parent


def known() -> list[str]:
    """Every benchmark module (those that are not support)."""
    return sorted(p.stem for p in PACKAGE.glob("*.py")
                  if p.stem not in {"__init__", "__main__", "support", "records",
                                    "burner_server", "fake_kube", "prometheus_server"})


def run_one(name: str, results: Path = RESULTS) -> bool:
    """``python -m benchmarks.NAME`` with its chosen arguments, recording to ``results``;
    True if it exited 0 and wrote a record."""
    before = latest(results).get(name, {}).get("date")
    print(f"\n## benchmarks.{name}\n", flush=True)
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *CHOSEN.get(name, ())],
                          cwd=PACKAGE.parent, env={**os.environ, ENV: str(results)})
    wrote = latest(results).get(name, {}).get("date") not in (None, before)
    if done.returncode != 0:
        print(f"benchmarks.{name}: exit {done.returncode}", file=sys.stderr)
    elif not wrote:
        print(f"benchmarks.{name}: no record written (it keeps none yet, or skipped)",
              file=sys.stderr)
    return done.returncode == 0 and wrote


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: {' '.join(CHOSEN)})")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--page-only", action="store_true",
                        help=f"only rewrite {PAGE.name}'s generated part from the records")
    opts = parser.parse_args(argv)
    names = known()
    if opts.list:
        for name in names:
            note = ("  (make bench)" if name in CHOSEN else "  (the node)" if name in NODE
                    else "  (by name: long)" if name in LONG else "")
            print(f"{name}{note}")
        return 0
    unknown = [n for n in opts.names if n not in names]
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)} (--list lists them)")
    failed = [] if opts.page_only else \
        [n for n in (opts.names or list(CHOSEN)) if not run_one(n)]
    if write_page():
        print(f"\n{PAGE.relative_to(PACKAGE.parent)}: written from {RESULTS.name}/")
    if failed:
        print(f"no record from: {' '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
