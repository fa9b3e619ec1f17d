"""``predict --timeline`` against the kernel: a load recorded at one limit, replayed at others,
then measured there.

    sudo .venv/bin/python -m benchmarks.replay_accuracy [--recorded 0.3] [--at 0.2 0.5]
                                                        [--ms 25] [--requests 100]
                                                        [--concurrency 1 2]

The stdlib burner (``benchmarks/burner_server.py``) runs in a cgroup of its own at
``--recorded`` CPU. Per load (``--concurrency``: 1 is one request after another, a closed
loop), ``http-timing record`` samples the group while ``http-timing`` sends ``--requests``
requests of ``GET /burn?ms=MS``; ``predict --timeline --requests-from`` replays that record at
the recorded limit and at each ``--at``; then the group's quota is set to each ``--at`` and the
same load is measured there. Prints, per load and limit, predicted and measured p50/p99 and
periods throttled (measured: the group's cpu.stat over the run), the p99 error, and the load
average. At the recorded limit the model's replay is an identity on a fake clock (the tests pin
it there); on a real service, and at other limits, it is a prediction, and this is how good
it is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.support import HTTP_TIMING, burner_in_group, keep_record, loadavg, run_main
from client.data.files import read_run
from client.data.summary import percentile
from cpuquota.cgroupfs import read_cpu_stat
from cpuquota.limit import Limit
from service.cgroup import set_quota

VERSION = 1 if Path("/sys/fs/cgroup/cpu").exists() else 2


def run_load(url: str, requests: int, concurrency: int, name: str, out: Path) -> Path:
    """``http-timing --url`` as a user runs it; the run's CSV."""
    done = subprocess.run(["nice", "-n", "-10", str(HTTP_TIMING), "--url", url, "--requests",
                           str(requests), "--concurrency", str(concurrency), "--name", name],
                          cwd=out, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"http-timing {name} failed ({done.returncode}): {done.stderr[-300:]}")
    return out / "raw-data" / f"{name}.csv"


def recorded_run(group: Path, url: str, requests: int, concurrency: int, name: str,
                 out: Path) -> tuple[Path, Path]:
    """``http-timing record`` on the group around the load (ended by SIGTERM); the timeline
    and the run's CSV."""
    timeline = out / "raw-data" / f"{name}-rec.cgroup.csv"
    proc = subprocess.Popen([str(HTTP_TIMING), "record", str(group), "--name", f"{name}-rec"],
                            cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not (timeline.exists() and timeline.read_text().count("\n") > 20):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("http-timing record did not start")
            time.sleep(0.05)
        run = run_load(url, requests, concurrency, name, out)
        time.sleep(0.3)   # the last request's throttle ends at the next boundary
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    return timeline, run


def measured(group: Path, url: str, requests: int, concurrency: int, name: str,
             out: Path) -> dict[str, Any]:
    """p50/p99 of a run, and the periods throttled the group's cpu.stat counted over it."""
    before = read_cpu_stat(group, VERSION)
    run = read_run(run_load(url, requests, concurrency, name, out))
    after = read_cpu_stat(group, VERSION)
    latencies = [r.latency_ns / 1e6 for r in run.records if not r.error]
    return {"p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
            "periods_throttled": (after.nr_throttled - before.nr_throttled
                                  if after and before else None)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recorded", type=float, default=0.3,
                        help="the limit the load is recorded at, CPUs (default 0.3)")
    parser.add_argument("--at", type=float, nargs="+", default=[0.2, 0.5],
                        help="the limits predicted, then measured (default 0.2 0.5)")
    parser.add_argument("--ms", type=float, default=25.0, help="CPU per request, ms (default 25)")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=None,
                        help="where the runs are kept (default: a new temporary folder)")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("a kernel quota needs root")
    out = opts.out or Path(tempfile.mkdtemp(prefix="replay-accuracy-"))
    out.mkdir(parents=True, exist_ok=True)
    limits = [opts.recorded, *opts.at]
    print(f"GET /burn?ms={opts.ms:g}, {opts.requests} requests a run, recorded at "
          f"{opts.recorded:g} CPU; runs kept in {out}; load average before {loadavg()}, "
          f"{os.cpu_count()} CPUs, cgroup v{VERSION}\n")
    print("| load | limit | predicted p50 / p99 ms | measured p50 / p99 ms | p99 error "
          "| periods throttled: predicted / measured | load average |")
    print("|---|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    with burner_in_group(opts.recorded) as service:
        url = f"{service.base_url}/burn?ms={opts.ms:g}"
        for concurrency in opts.concurrency:
            load = "one at a time" if concurrency == 1 else f"{concurrency} at a time"
            name = f"c{concurrency}"
            set_quota(service.group, VERSION, Limit(opts.recorded))
            timeline, run = recorded_run(service.group, url, opts.requests, concurrency, name,
                                         out)
            done = subprocess.run([str(HTTP_TIMING), "predict", "--timeline", str(timeline),
                                   "--requests-from", str(run), "--cpus",
                                   ",".join(f"{c:g}" for c in limits), "--json"],
                                  cwd=out, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"predict failed ({done.returncode}): {done.stderr[-300:]}")
            answer = json.loads(done.stdout)
            for cpus, predicted in zip(limits, answer["limits"]):
                if cpus == opts.recorded:
                    seen = {**answer["requests"]["measured"],
                            "periods_throttled": answer["recorded"]["periods_throttled"]}
                else:
                    set_quota(service.group, VERSION, Limit(cpus))
                    seen = measured(service.group, url, opts.requests, concurrency,
                                    f"{name}-at-{cpus:g}", out)
                error = predicted["p99_ms"] / seen["p99_ms"] - 1 if seen["p99_ms"] else None
                row = {"load": load, "cpus": cpus, "recorded": cpus == opts.recorded,
                       "loop": answer["requests"]["loop"].split(":")[0],
                       "predicted": {k: predicted[k] for k in ("p50_ms", "p99_ms",
                                                               "periods_throttled")},
                       "measured": seen, "p99_error": error, "load_average": loadavg()}
                rows.append(row)
                print(f"| {load} ({row['loop']}) | {cpus:g}"
                      f"{' (recorded)' if row['recorded'] else ''} | "
                      f"{predicted['p50_ms']:.1f} / {predicted['p99_ms']:.1f} | "
                      f"{seen['p50_ms']:.1f} / {seen['p99_ms']:.1f} | "
                      f"{'–' if error is None else f'{100 * error:+.0f} %'} | "
                      f"{predicted['periods_throttled']} / {seen['periods_throttled']} | "
                      f"{row['load_average']} |", flush=True)
    keep_record("replay_accuracy", {"recorded_cpus": opts.recorded, "ms": opts.ms,
                                    "requests": opts.requests, "rows": rows})
    return 0


if __name__ == "__main__":
    run_main(main)
