"""``advise`` on a service with waits that are not the CPU's: its answer beside the answer for
the same service without the waits.

    sudo .venv/bin/python -m benchmarks.advise_waits [--p99 30] [--ms 3] [--sleep-ms 60]
                                                     [--every 10] [--loads closed open]
                                                     [--rate 100] [--rounds 1]

The stdlib burner (``benchmarks/burner_server.py``, a thread per connection) runs in a cgroup
of its own at 0.5 CPU, its weight raised (``cpu.shares`` 10240) and the client at nice -10, so
the quota, not the machine's other load, holds it back. ``http-timing advise --cgroup`` finds
the smallest limit that meets p99 <= ``--p99`` ms for ``GET /burn?ms=MS`` (without the waits),
then for the same URL with ``&sleep_ms=SLEEP&sleep_every=EVERY`` (with the waits: every
EVERYth request also sleeps SLEEP ms after its work, longer than the target, so the service
misses the target without any limit). Two loads: ``closed`` (2 at a time, 100 requests a run:
the waits also lower the rate the service is asked for) and ``open`` (``--rate`` requests/s
for 3 s a run: the same work per second either way). Prints per load and round both answers,
their ratio (with / without), the requests slow without throttling at the answer and the load
average. The claim it measures (issue 44): the answer with the waits stays near the answer
without them, because advise counts the requests no throttling delayed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.support import HTTP_TIMING, burner_in_group, keep_record, loadavg, run_main

LOADS = {
    "closed": ("closed loop, 2 at a time, 100 requests a run",
               ["--concurrency", "2", "--requests", "100"]),
    "open": ("open loop, {rate:g} requests/s for 3 s a run",
             ["--rate", "{rate:g}", "--duration", "3"]),
}
BUSY = "below what the service does without any CPU limit"
ORIGINAL_CPUS = 0.5


def boost(group: Path) -> None:
    """The group's weight against the machine's other load (v1 ``cpu.shares``, v2
    ``cpu.weight``); it goes with the group."""
    if (group / "cpu.shares").exists():
        (group / "cpu.shares").write_text("10240")
    else:
        (group / "cpu.weight").write_text("1000")


def advise(group: Path, url: str, p99: float, load: list[str], name: str,
           out: Path) -> dict[str, Any]:
    """``http-timing advise --cgroup`` as a user runs it (once more, at most twice, when it
    refused because the service missed the target without any limit: the machine's load)."""
    argv = ["nice", "-n", "-10", str(HTTP_TIMING), "advise", "--cgroup", str(group), "--url",
            url, "--p99", f"{p99:g}", *load, "--profile-seconds", "3", "--no-alternatives",
            "--name", name, "--json"]
    for _ in range(3):
        done = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=1800)
        if not (done.returncode == 2 and BUSY in done.stderr):
            break
    if done.returncode not in (0, 3):
        raise SystemExit(f"advise {name} failed ({done.returncode}): {done.stderr[-500:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def figures(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer's limit, the judged and measured p99 there, the requests slow without
    throttling there, and the p99 without a limit."""
    rec, at = answer["recommended"], answer["at_recommended"] or {}
    return {"cpus": rec["cpus"] if rec else None, "p99_ms": at.get("p99_ms"),
            "judged_p99_ms": at.get("judged_p99_ms"),
            "slow_unthrottled": at.get("slow_unthrottled"), "requests": at.get("requests"),
            "profile_p99_ms": answer["profile"]["run"]["p99_ms"],
            "runs": len(answer["runs"]), "reason": answer.get("reason")}


def cell(found: dict[str, Any]) -> str:
    if found["cpus"] is None:
        return f"none: {str(found['reason'])[:50]}"
    apart = (f"; {found['slow_unthrottled']} of {found['requests']} slow without throttling"
             if found["slow_unthrottled"] else "")
    return (f"{found['cpus']:g} (p99 {found['p99_ms']:.1f}, judged {found['judged_p99_ms']:.1f}"
            f"{apart})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--p99", type=float, default=30.0, help="the target, ms (default 30)")
    parser.add_argument("--ms", type=float, default=3.0, help="CPU per request, ms (default 3)")
    parser.add_argument("--sleep-ms", type=float, default=60.0,
                        help="the wait on the requests that wait, ms (default 60)")
    parser.add_argument("--every", type=int, default=10,
                        help="every Nth request waits (default 10)")
    parser.add_argument("--loads", nargs="+", choices=sorted(LOADS), default=list(LOADS))
    parser.add_argument("--rate", type=float, default=100.0,
                        help="the open loop's requests per second (default 100)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None,
                        help="where the runs are kept (default: a new temporary folder)")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("advise --cgroup changes a real quota: it needs root")
    out = opts.out or Path(tempfile.mkdtemp(prefix="advise-waits-"))
    out.mkdir(parents=True, exist_ok=True)
    plain = f"/burn?ms={opts.ms:g}"
    waits = f"{plain}&sleep_ms={opts.sleep_ms:g}&sleep_every={opts.every}"
    print(f"advise --cgroup, p99 <= {opts.p99:g} ms, GET {plain} without and with waits "
          f"({waits}); runs kept in {out}; load average before {loadavg()}, "
          f"{os.cpu_count()} CPUs\n")
    print("| load | round | without waits: CPU (p99 ms at it) | with waits: CPU (p99 ms at it) "
          "| with / without | p99 without a limit: without / with waits | load average |")
    print("|---|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    with burner_in_group(ORIGINAL_CPUS) as service:
        boost(service.group)
        for load in opts.loads:
            words, args = LOADS[load]
            args = [a.format(rate=opts.rate) for a in args]
            for round_ in range(1, opts.rounds + 1):
                found = {kind: figures(advise(service.group, service.base_url + path, opts.p99,
                                              args, f"{load}-{kind}-{round_}", out))
                         for kind, path in (("plain", plain), ("waits", waits))}
                a, b = found["plain"]["cpus"], found["waits"]["cpus"]
                ratio = b / a if a and b else None
                row = {"load": words.format(rate=opts.rate), "round": round_, **found,
                       "ratio": ratio, "load_average": loadavg()}
                rows.append(row)
                print(f"| {row['load']} | {round_} | {cell(found['plain'])} | "
                      f"{cell(found['waits'])} | "
                      f"{'–' if ratio is None else f'{ratio:.2f}'} | "
                      f"{found['plain']['profile_p99_ms']:.1f} / "
                      f"{found['waits']['profile_p99_ms']:.1f} | {row['load_average']} |",
                      flush=True)
    keep_record("advise_waits", {"p99_ms": opts.p99, "ms": opts.ms, "sleep_ms": opts.sleep_ms,
                                 "every": opts.every, "rows": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
