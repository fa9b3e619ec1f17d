"""The "Your own service" example (docs/own-service.md): a Node.js server that knows nothing of
throttle-lab, under a real 0.2 CPU quota, timed by ``http-timing --cgroup pid:PID``.

    sudo .venv/bin/python -m benchmarks.own_service [--cpus 0.2] [--ms 6] [--concurrency 2]
                                                     [--duration 6] [--name own-node]
                                                     [--cpu-shares 102400]

``benchmarks/node_burner.js`` runs in a new cgroup (removed at the end, the server stopped by
its pid); ``http-timing`` is run as a user would run it, with ``--cgroup pid:<the server's
pid>``, and writes ``raw-data/<name>.csv`` (+ ``.json``, ``.cgroup.csv``) and
``pictures/<name>.png``; then ``http-timing report`` prints what it found. On a busy machine
``--cpu-shares N`` raises the server's group's weight (v1 ``cpu.shares``, v2 ``cpu.weight``,
not its quota): the quota, not the neighbours, is then what holds it back.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.support import HTTP_TIMING, ROOT, node_in_group, run_main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", type=float, default=0.2)
    parser.add_argument("--ms", type=float, default=6.0, help="CPU per request")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--name", default="own-node")
    parser.add_argument("--cpu-shares", type=int, default=0,
                        help="the server's group's weight (v1 cpu.shares; 0: the default)")
    opts = parser.parse_args(argv)
    with node_in_group(opts.cpus) as node:
        if opts.cpu_shares > 0:
            weigh(node.group, opts.cpu_shares)
        command = [str(HTTP_TIMING), "--url", f"{node.base_url}/burn?ms={opts.ms:g}",
                   "--iterations", "0", "--concurrency", str(opts.concurrency), "--duration",
                   f"{opts.duration:g}", "--cgroup", f"pid:{node.pid}", "--name", opts.name,
                   "--quiet"]
        print("$ http-timing " + " ".join(command[1:]))
        run = subprocess.run(command, cwd=ROOT, text=True, capture_output=True)
        print(run.stdout, end="")
        if run.returncode != 0:
            print(run.stderr, end="", file=sys.stderr)
            return run.returncode
    report = subprocess.run([str(HTTP_TIMING), "report", f"raw-data/{opts.name}.csv"],
                            cwd=ROOT, text=True, capture_output=True)
    print(report.stdout, end="")
    return report.returncode


def weigh(group: Path, shares: int) -> None:
    """The group's weight: ``cpu.shares`` on v1, on v2 ``cpu.weight`` (1024 shares = 100)."""
    if (group / "cpu.shares").exists():
        (group / "cpu.shares").write_text(f"{shares}\n")
    else:
        (group / "cpu.weight").write_text(f"{min(10000, max(1, shares * 100 // 1024))}\n")


if __name__ == "__main__":
    run_main(main)
