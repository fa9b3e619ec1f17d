"""What the node agent (agent/, Go) costs: its CPU and memory with 10, 50 and 100 pods.

    sudo .venv/bin/python -m benchmarks.agent_cost [--pods 10 50 100] [--seconds 30]
                                                   [--interval 10ms] [--throttled 5]
                                                   [--repeat 3] [--agent-flag=--hold=1s ...]

Stand-ins for pods on this host (no kubelet): per pod, a v1 group with a 0.2-CPU quota (the
pod's) and a child group with the same quota (its container's), both idle, each with a cpuacct
twin, as the kubelet makes them on a cgroup v1 node. The agent runs with its static source on
both groups of every pod (what its Kubernetes source asks for a one-container pod: the pod's
timeline and the container's, the pod group read once per tick for both), at ``--interval``
(default http-timing record's 10 ms). ``--throttled N``: N of the pods have a shell spinning
in their container's group, throttled every period (a node where 5 of 100 pods throttle). The
agent runs in a cpuacct group of its own; its CPU is that group's ``cpuacct.usage`` over
``--seconds``, after an 8 s warm-up (start-up and the new groups' first ``--hold``; the CPU it
took is its own column), cross-checked
with ``/proc/PID/stat``; its memory ``VmRSS`` at the end and ``VmHWM`` (peak); its rows a
second at each rate from its ``/metrics`` (``throttle_lab_agent_rows_total``). ``--repeat``
runs each row again (the machine is shared: the agent's CPU time grows with the load). Every
group, burner and the agent are removed/stopped. Prints a table; the goal is <= 1 % of one CPU and
<= 64 MiB for 100 pods. ``--agent-limit CPUS`` runs the agent under that CPU quota as well
(the DaemonSet's is 0.2) and counts its periods throttled. Needs Linux, root, Go and the v1 cpu and cpuacct hierarchies.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from cpuquota.cgroupfs import read_cpu_stat
from cpuquota.account import CpuStat
from benchmarks.support import ROOT, describe_load, keep_record, run_main, scrape

CPU = Path("/sys/fs/cgroup/cpu")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
AGENT = ROOT / "agent"
GOAL_CPU_PERCENT, GOAL_RSS_MIB = 1.0, 64.0


def build_agent() -> Path:
    """agent/ built once per source state into ~/.cache/throttle-lab/agent/ (as the tests)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise SystemExit("Go is not installed (the agent is a Go program: agent/)")
    digest = hashlib.sha256()
    for path in sorted(AGENT.rglob("*")):
        if path.is_file() and path.suffix in (".go", ".mod", ".sum"):
            digest.update(str(path.relative_to(AGENT)).encode() + b"\0" + path.read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    out = cache / "throttle-lab" / "agent" / digest.hexdigest()[:16] / "throttle-agent"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"throttle-agent.{os.getpid()}")
        subprocess.run(["nice", "-n", "10", go, "build", "-trimpath", "-ldflags=-s -w", "-o",
                        str(tmp), "./cmd/throttle-agent"], cwd=AGENT, check=True)
        tmp.replace(out)
    return out


def make_pods(top: str, count: int) -> list[tuple[str, Path]]:
    """``count`` pod-shaped groups (pod + container, 0.2 CPU each); the static targets."""
    targets: list[tuple[str, Path]] = []
    for i in range(count):
        for hierarchy in (CPU, CPUACCT):
            (hierarchy / top / f"pod{i}" / "c").mkdir(parents=True)
        for group in (CPU / top / f"pod{i}", CPU / top / f"pod{i}" / "c"):
            (group / "cpu.cfs_quota_us").write_text("20000")
        targets += [(f"pod{i}", CPU / top / f"pod{i}"), (f"pod{i}-c", CPU / top / f"pod{i}" / "c")]
    return targets


def burn_in(group: str) -> subprocess.Popen[bytes]:
    """A shell spinning in ``group`` (its cpu and cpuacct twins): throttled every period."""
    procs = " ".join(str(h / group / "cgroup.procs") for h in (CPU, CPUACCT))
    return subprocess.Popen(["sh", "-c", f"for f in {procs}; do echo $$ > $f; done; "
                             "while :; do :; done"])


def remove_tree(root: Path) -> None:
    if root.exists():
        for here, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
            os.rmdir(here)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def rows(base: str) -> dict[str, float]:
    metrics = scrape(base)
    return {rate: metrics.get(f"throttle_lab_agent_rows_total{{rate={rate}}}", 0.0)
            for rate in ("fast", "idle")}


def cpu_stat(group: Path) -> dict[str, int]:
    """A v1 group's periods, periods throttled and throttled ns (``cpu.stat``)."""
    stat = read_cpu_stat(group, 1) or CpuStat()
    return {"nr_periods": stat.nr_periods, "nr_throttled": stat.nr_throttled,
            "throttled_ns": stat.throttled_ns}


def measure(binary: Path, pods: int, seconds: float, interval: str, throttled: int = 0,
            flags: Sequence[str] = (), limit_cpus: float | None = None) -> dict[str, float]:
    top = f"throttle-lab-bench-agent-{os.getpid()}"
    own = CPUACCT / f"{top}-agent"
    limited = CPU / f"{top}-agent"   # with ``limit_cpus``: the agent's quota (the DaemonSet's)
    burners: list[subprocess.Popen[bytes]] = []
    try:
        targets = make_pods(top, pods)
        burners = [burn_in(f"{top}/pod{i}/c") for i in range(min(throttled, pods))]
        own.mkdir()
        procs = f"{own}/cgroup.procs"
        if limit_cpus is not None:
            limited.mkdir()
            (limited / "cpu.cfs_quota_us").write_text(str(round(limit_cpus * 100_000)))
            procs += f" {limited}/cgroup.procs"
        with tempfile.TemporaryDirectory() as tmp:
            listing = Path(tmp, "targets")
            listing.write_text("".join(f"{name} {path}\n" for name, path in targets))
            base = f"http://127.0.0.1:{free_port()}"
            proc = subprocess.Popen(
                ["sh", "-c", f'for f in {procs}; do echo $$ > $f; done && exec "$@"', "sh",
                 str(binary),
                 "--source", "static", "--targets", str(listing), "--timelines",
                 str(Path(tmp, "timelines")), "--listen", base.split("//")[1],
                 "--interval", interval, *flags],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                time.sleep(8.0)   # start-up (files open) and the first --hold (5 s) over
                if proc.poll() is not None:
                    raise SystemExit(f"the agent stopped: {proc.stderr.read().decode()[-500:]}"
                                     if proc.stderr else "the agent stopped")
                rows0 = rows(base)
                stat0 = cpu_stat(limited) if limit_cpus is not None else {}
                usage0, cpu0, t0 = int((own / "cpuacct.usage").read_text()), proc_cpu_s(proc.pid), \
                    time.monotonic()
                time.sleep(seconds)
                usage1, cpu1, t1 = int((own / "cpuacct.usage").read_text()), proc_cpu_s(proc.pid), \
                    time.monotonic()
                stat1 = cpu_stat(limited) if limit_cpus is not None else {}
                rows1 = rows(base)
                rss, hwm = status_kib(proc.pid, "VmRSS"), status_kib(proc.pid, "VmHWM")
                timelines = len(list(Path(tmp, "timelines").glob("*.cgroup.csv")))
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
                return {"pods": pods, "throttled": len(burners), "timelines": timelines,
                        "fast_rows_s": (rows1["fast"] - rows0["fast"]) / (t1 - t0),
                        "idle_rows_s": (rows1["idle"] - rows0["idle"]) / (t1 - t0),
                        "cpu_percent": 100 * (usage1 - usage0) / 1e9 / (t1 - t0),
                        "start_cpu_s": usage0 / 1e9,
                        "stat_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
                        "rss_mib": rss / 1024, "hwm_mib": hwm / 1024,
                        **{k: stat1[k] - stat0[k] for k in stat1}}
            finally:   # stopped before its folder goes
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        for p in burners:   # (the agent is stopped above)
            if p.poll() is None:
                p.kill()
                p.wait()
        for hierarchy in (CPU, CPUACCT):
            remove_tree(hierarchy / top)
        for group in (own, limited):
            if group.exists():
                group.rmdir()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", default="10ms", help="the agent's --interval (Go syntax)")
    parser.add_argument("--throttled", type=int, default=0,
                        help="pods whose container burns CPU (throttled every period)")
    parser.add_argument("--agent-flag", action="append", default=[], metavar="FLAG",
                        help="a further flag for the agent (repeatable), e.g. --idle-interval=0")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row (the machine is busy)")
    parser.add_argument("--agent-limit", type=float, default=None, metavar="CPUS",
                        help="run the agent under this CPU limit (the DaemonSet's: 0.2) and "
                             "count its periods throttled")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not (CPU / "cpu.cfs_quota_us").exists() or \
            not (CPUACCT / "cpuacct.usage").exists():
        raise SystemExit("needs root and the cgroup v1 cpu and cpuacct hierarchies")
    binary = build_agent()
    print(f"### throttle-agent: its own CPU and memory, every {args.interval}, "
          f"{args.seconds:g} s per run, {args.throttled} throttled pods"
          + (f", agent flags {' '.join(args.agent_flag)}" if args.agent_flag else ""))
    print(f"({describe_load('before')}; {time.strftime('%Y-%m-%d %H:%M %Z')}, "
          f"{os.uname().nodename}, Linux {os.uname().release})\n")
    limit = args.agent_limit
    print("| pods | throttled pods | timelines | start-up CPU s | fast rows/s | idle rows/s "
          "| agent CPU (% of one CPU, cpuacct) | (/proc/PID/stat) | RSS MiB | peak RSS MiB "
          + ("" if limit is None else f"| agent's periods throttled under {limit:g} CPU "
             "(of periods), throttled s ")
          + "| goal met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("" if limit is None else "---|"))
    results = []
    for pods in args.pods:
        for _ in range(args.repeat):
            r = measure(binary, pods, args.seconds, args.interval, args.throttled,
                        args.agent_flag, limit)
            held = ("" if limit is None else f"{r['nr_throttled']:.0f} ({r['nr_periods']:.0f}), "
                    f"{r['throttled_ns'] / 1e9:.2f} | ")
            results.append(r)
            met = ("yes" if r["cpu_percent"] <= GOAL_CPU_PERCENT
                   and r["hwm_mib"] <= GOAL_RSS_MIB else "no")
            print(f"| {pods} | {r['throttled']:.0f} | {r['timelines']:.0f} | {r['start_cpu_s']:.2f} | "
                  f"{r['fast_rows_s']:.0f} | {r['idle_rows_s']:.0f} | {r['cpu_percent']:.2f} | "
                  f"{r['stat_percent']:.2f} | {r['rss_mib']:.1f} | {r['hwm_mib']:.1f} | {held}"
                  f"{met} |",
                  flush=True)
    print(f"\n({describe_load('after')}; goal: <= {GOAL_CPU_PERCENT:g} % of one CPU and "
          f"<= {GOAL_RSS_MIB:g} MiB for 100 pods)")
    keep_record("agent_cost", {"interval": args.interval, "throttled": args.throttled,
                               "agent_flags": args.agent_flag, "agent_limit": limit,
                               "runs": results})
    return 0


if __name__ == "__main__":
    run_main(main)
