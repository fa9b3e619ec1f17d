"""What ``http-timing record`` costs: its own CPU at 100 samples a second.

    sudo .venv/bin/python -m benchmarks.record_cpu [--seconds 20] [--interval 0.01]

Runs ``http-timing record`` (the console script, as a user runs it) on a real group: burn-
service under ``--cpus 0.5`` with a handful of idle worker threads (v1: usage from the
processes' CPU clocks; the cpuacct case is the cpu root group), once for ``--seconds`` and once
for 2 s; the recorder's CPU is its ``getrusage`` (user + system) after it exits. The
difference of the two runs takes Python's start-up out: the steady cost per second of
recording. Prints a table (percent of one CPU). Needs Linux, root and a cgroup cpu controller.
The machine may be shared: the load average is printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.support import HTTP_TIMING, burn_service, describe_load, get, run_main
from cpuquota.limit import Limit


def recorder_cpu(target: str, seconds: float, interval: float, cwd: Path) -> tuple[float, int]:
    """(CPU seconds the recorder used, samples it wrote) over a ``seconds`` recording."""
    before = os.times()
    result = subprocess.run([str(HTTP_TIMING), "record", target, "--duration",
                             str(seconds), "--interval", str(interval), "--name", "b"],
                            cwd=cwd, capture_output=True, text=True, check=True)
    after = os.times()
    samples = int(result.stdout.strip().splitlines()[-1].split()[0])
    return (after.children_user - before.children_user +
            after.children_system - before.children_system), samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args(argv)
    with burn_service(Limit(0.5)) as service:
        _status, body = get(service.base_url, "/limits")
        group = json.loads(body)["cgroup"]["path"]
        targets = {"proc (the service's group)": group,
                   "cpuacct (the cpu root group)": "/sys/fs/cgroup/cpu"}
        print(f"### http-timing record: its own CPU at {1 / args.interval:g} samples/s "
              f"({describe_load('before')})\n")
        print("| usage source | samples/s | CPU over 2 s | CPU over "
              f"{args.seconds:g} s | steady cost (% of one CPU) |")
        print("|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            for name, target in targets.items():
                short, _ = recorder_cpu(target, 2.0, args.interval, Path(tmp))
                long, samples = recorder_cpu(target, args.seconds, args.interval, Path(tmp))
                steady = (long - short) / (args.seconds - 2.0)
                print(f"| {name} | {samples / args.seconds:.0f} | {short:.2f} s | "
                      f"{long:.2f} s | {100 * steady:.2f} % |")
        print(f"\n({describe_load('after')})")
    return 0


if __name__ == "__main__":
    run_main(main)
