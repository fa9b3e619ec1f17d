"""``advise --passive`` against live ``advise`` on the project's node (issue 46).

The replay's predicted p99 against a live run at two limits, too.

    sudo .venv/bin/python -m benchmarks.passive_vs_live [--shapes sequential c4 bursts]
                                                        [--limit 100m] [--p99 30 60 60]
                                                        [--requests 80] [--rate 8]

On the project's node (brought up if it is down, and taken down again at the end; one that is
up is reused and left up), with the node agent's DaemonSet (k8s/recorder/, at its default
interval; deployed here if it does not run, removed at the end), ``k8s/``'s limited Deployment
and its Service in a namespace of their own (``tl-passive-bench``, deleted at the end; its
``limits.cpu`` is ``--limit``, the demo's 100m by default). Per load shape (``sequential``: one
request after another; ``c4``: a closed loop of 4; ``bursts``: an open loop at ``--rate`` whose
targets are ``--burst-size`` heavy requests in every ``--burst-every``), the load sent from
the host to the pod's IP:

1. the load, while the agent records the pod; its run file kept;
2. ``advise --passive --k8s NS/deployment/limited --p99 T --requests-from <that run> --since``
   (the window of the load): the answer A_passive and its predicted p99 there and 25 % lower;
3. ``advise --k8s ... --p99 T`` with the same load: A_live (it resizes the pod in place and
   puts the limit back);
4. ``sweep --k8s ... --cpus A`` and ``--cpus`` 25 % lower, the same load, ``--check-runs``
   times each (each resize put back by sweep), A the passive answer (without one, the live
   answer): the median of the measured p99 at both (their range beside it), against the
   replay's prediction there (``predict --timeline <the fetched window> --requests-from <the
   run>``: the numbers ``advise --passive`` judged by).

Prints one row per shape, and writes the record (``benchmarks/records.py``; set
``BENCH_RECORDS=benchmarks/results`` or run it through ``python -m benchmarks``). Needs root
and the node's tools (scripts/install-system-deps.sh); run it under the node's lock (``flock /tmp/kube.lock``).

``--replay-kept DIR`` (no node, no root): the runs an earlier run kept in ``DIR`` (its
``--out``) replayed again with the replay as it is now: per shape, the fetched window and the
recorded run replayed at every limit live advise and sweep measured there, against those runs'
p99 and CPU a request; how a change to the replay does against the same live runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks.support import (HTTP_TIMING, ROOT, keep_record, loadavg,
                                recorder_on_every_node, run_main)
from client.data.files import read_run
from client.data.summary import percentile

__all__ = ["NAMESPACE", "SHAPES", "main"]

NAMESPACE = "tl-passive-bench"
WORKLOAD = f"{NAMESPACE}/deployment/limited"
SHAPES = ("sequential", "c4", "bursts")
SUPERSEDED_BY = "advise_matrix"   # the page shows that one's table (benchmarks/records.py)
GOAL = 0.25   # issue 46: within 25 %
LESS = 0.75   # the second limit checked: 25 % below the first (as advise --passive shows)


def log(msg: str) -> None:
    print(f"[passive_vs_live] {msg}", file=sys.stderr, flush=True)


def limit_patch(limit: str) -> str:
    """A kustomize patch setting the limited Deployment's CPU request and limit."""
    return f"""  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: limited
      spec:
        template:
          spec:
            containers:
              - name: burn-service
                resources:
                  requests:
                    cpu: {limit}
                  limits:
                    cpu: {limit}
"""


@contextmanager
def the_node() -> Iterator[Any]:
    """The node up (reused, or brought up and taken down at the end)."""
    from kubenode import node
    from kubenode.config import layout

    lay = layout()
    reused = node.reusable(node.Node(lay, lambda _: None))
    up = node.up(lay, log)
    try:
        yield up
    finally:
        if not reused:
            node.down(lay, log)




def overlay(directory: Path, limit: str) -> Path:
    """A kustomize overlay of ``k8s/`` in :data:`NAMESPACE`: the limited Deployment (its CPU
    request and limit ``limit``) and the Services; the Job, the limitless Deployment and the
    Ingresses deleted."""
    directory.mkdir(parents=True, exist_ok=True)
    deletions = "".join(f"""  - patch: |-
      $patch: delete
      apiVersion: {api}
      kind: {kind}
      metadata:
        name: {name}
""" for api, kind, name in (("batch/v1", "Job", "http-timing"),
                            ("apps/v1", "Deployment", "limitless")))
    (directory / "kustomization.yaml").write_text(f"""apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {NAMESPACE}
resources:
  - {os.path.relpath(ROOT / "k8s", directory)}
patches:
{deletions}  - target:
      kind: Ingress
    patch: |-
      $patch: delete
      apiVersion: networking.k8s.io/v1
      kind: Ingress
      metadata:
        name: any
{limit_patch(limit)}""")
    return directory


@contextmanager
def the_deployment(n: Any, work: Path, limit: str) -> Iterator[str]:
    """k8s/'s limited Deployment and Services in :data:`NAMESPACE` at ``limit``; yields the
    pod's base URL. The namespace is deleted at the end."""
    deadline = time.monotonic() + 300
    while "Terminating" in n.kubectl("get", "namespace", NAMESPACE, check=False).stdout:
        if time.monotonic() > deadline:   # an earlier run's, still going
            raise SystemExit(f"namespace {NAMESPACE} still Terminating after 5 min")
        time.sleep(2)
    n.kubectl("apply", "-k", str(overlay(work / "overlay", limit)), timeout=120)
    try:
        n.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/limited",
                  "--timeout=300s", timeout=320)
        pods = json.loads(n.kubectl("-n", NAMESPACE, "get", "pods", "-l",
                                    "app.kubernetes.io/component=limited", "-o",
                                    "json").stdout)["items"]
        (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        base = f"http://{pod['status']['podIP']}:7800"
        deadline = time.monotonic() + 60
        while not _healthy(base):
            if time.monotonic() > deadline:
                raise SystemExit(f"the pod at {base} did not answer /healthz in 60 s")
            time.sleep(0.5)
        yield base
    finally:
        n.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=300s",
                  check=False, timeout=320)


def _healthy(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def load_args(shape: str, base: str, opts: argparse.Namespace, work: Path) -> list[str]:
    """The client's options for one load shape (the same for every command)."""
    url = f"{base}/cpuBurnFlow?iterations={opts.iterations}"
    common = ["--requests", str(opts.requests), "--warmup", "2"]
    if shape == "sequential":
        return ["--url", url, *common]
    if shape == "c4":
        return ["--url", url, "--concurrency", "4", *common]
    heavy = f"{base}/cpuBurnFlow?iterations={opts.burst_iterations}"
    targets = work / "bursts.targets"
    targets.write_text("\n".join(f"GET {heavy if i < opts.burst_size else url}\n"
                                 for i in range(opts.burst_every)))
    return ["--targets", str(targets), "--rate", f"{opts.rate:g}", *common]


def http_timing(args: Sequence[str], cwd: Path, env: dict[str, str],
                ok: tuple[int, ...] = (0,), timeout: float = 600) -> str:
    """``http-timing ARGS`` as a user runs it; its standard output."""
    done = subprocess.run([str(HTTP_TIMING), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode not in ok:
        raise SystemExit(f"http-timing {' '.join(args[:3])} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-600:]}")
    return done.stdout


def p99_of(csv: Path) -> float:
    run = read_run(csv)
    return percentile([r.latency_ns / 1e6 for r in run.records if not r.error], 99)


def cpu_of(csv: Path) -> float | None:
    """The mean CPU of a request, ms, as the server measured it (Server-Timing): the replay
    takes the record's; a run at another time on a shared machine may burn more or less."""
    cpus = [r.server_cpu_ns for r in read_run(csv).records if not r.error]
    known = [c for c in cpus if c]
    return sum(known) / len(known) / 1e6 if known and len(known) == len(cpus) else None


def one_csv(directory: Path) -> Path:
    (csv,) = [p for p in directory.glob("*.csv")
              if not p.name.endswith((".cgroup.csv", ".threads.csv"))]
    return csv


def advise_runs(directory: Path) -> dict[float, list[tuple[float, float | None]]]:
    """The p99 and the mean CPU of a request of each limited run live advise kept
    (``<name>-advise-<cpus>[-N].csv``), by limit."""
    out: dict[float, list[tuple[float, float | None]]] = {}
    for csv in sorted(directory.glob("*-advise-*.csv")):
        if csv.name.endswith((".cgroup.csv", ".threads.csv")):
            continue
        cpus = csv.stem.rsplit("-advise-", 1)[1].split("-")[0]
        if cpus != "none":
            out.setdefault(float(cpus), []).append((p99_of(csv), cpu_of(csv)))
    return dict(sorted(out.items()))


def error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return predicted / measured - 1


def times(cpu_ms: float | None, recorded_ms: float | None) -> str:
    """A run's CPU per request against the record's (the replay's), e.g. ``x1.08``."""
    return "–" if not cpu_ms or not recorded_ms else f"x{cpu_ms / recorded_ms:.2f}"


def spread(runs: Sequence[float] | None) -> str:
    """The live runs' range beside their median, e.g. `` [23.6-32.2]`` (one run: nothing)."""
    return "" if not runs or len(runs) < 2 else f" [{min(runs):.1f}-{max(runs):.1f}]"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.0f} %"


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def run_shape(shape: str, target: float, base: str, opts: argparse.Namespace, work: Path,
              env: dict[str, str]) -> dict[str, Any]:
    """Steps 1-4 for one shape; its row."""
    out = work / shape
    out.mkdir()
    load = load_args(shape, base, opts, out)
    # 1. the load, recorded by the agent
    started = time.monotonic()
    http_timing([*load, "--name", "recorded", "--data-dir", str(out / "recorded"),
                 "--no-plot", "--quiet"], out, env)
    run = out / "recorded" / "recorded.csv"
    time.sleep(opts.flush)   # the agent writes the last periods' rows
    since = math.ceil(time.monotonic() - started) + 2
    # 2. the passive answer
    passive = json.loads(http_timing(
        ["advise", "--passive", "--k8s", WORKLOAD, "--p99", f"{target:g}", "--requests-from",
         str(run), "--since", f"{since}s", "--data-dir", str(out / "passive"), "--json"],
        out, env, ok=(0, 3)))
    (out / "passive.json").write_text(json.dumps(passive, indent=1))
    a_passive = (passive.get("recommended") or {}).get("cpus")
    log(f"{shape}: passive {a_passive} CPU ({passive.get('reason') or 'met'})")
    # 3. the live answer
    live = json.loads(http_timing(
        ["advise", "--k8s", WORKLOAD, *load, "--p99", f"{target:g}", "--profile-seconds",
         f"{opts.profile_seconds:g}", "--max-runs", str(opts.max_runs), "--no-alternatives",
         "--name", "live", "--data-dir", str(out / "live"), "--pictures-dir",
         str(out / "pictures"), "--json"], out, env, ok=(0, 3), timeout=1000))
    (out / "live.json").write_text(json.dumps(live, indent=1))
    a_live = (live.get("recommended") or {}).get("cpus")
    log(f"{shape}: live {a_live} CPU")
    # 4. at the passive answer and 25 % below it (without one: the live answer's), the
    # replay's prediction (predict on the same window and requests) against a live run
    checked = a_passive or a_live
    limits = [] if checked is None else [checked, round(checked * LESS, 3)]
    predicted: list[float | None] = [None] * len(limits)
    if limits:
        replay = json.loads(http_timing(
            ["predict", "--timeline", str(passive["timeline"]).split(", ")[0],
             "--requests-from", str(run), "--cpus", ",".join(f"{c:g}" for c in limits),
             "--json"], out, env))
        predicted = [row.get("p99_ms") for row in replay["limits"]]
    checks = []
    live_runs = advise_runs(out / "live")
    at_runs = []
    if live_runs:   # the replay at each limit live advise ran, against its run(s) there
        replay = json.loads(http_timing(
            ["predict", "--timeline", str(passive["timeline"]).split(", ")[0],
             "--requests-from", str(run), "--cpus", ",".join(f"{c:g}" for c in live_runs),
             "--json"], out, env))
        at_runs = [{"cpus": cpus, "predicted_p99_ms": row.get("p99_ms"),
                    "measured_p99_ms": [p99 for p99, _ in seen],
                    "cpu_ms": [cpu for _, cpu in seen]}
                   for (cpus, seen), row in zip(live_runs.items(), replay["limits"])]
    for i, (cpus, guess) in enumerate(zip(limits, predicted)):
        seen, burned = [], []
        for j in range(opts.check_runs):   # a p99 near the edge moves from run to run
            data = out / f"sweep-{i}-{j}"
            http_timing(["sweep", "--k8s", WORKLOAD, *load, "--cpus", f"{cpus:g}", "--name",
                         f"at-{i}-{j}", "--data-dir", str(data), "--pictures-dir",
                         str(out / "pictures"), "--no-plot"], out, env, timeout=600)
            seen.append(p99_of(one_csv(data)))
            burned.append(cpu_of(one_csv(data)))
        middle = statistics.median(seen)
        known = [c for c in burned if c]
        checks.append({"cpus": cpus, "predicted_p99_ms": guess, "measured_p99_ms": middle,
                       "runs_p99_ms": seen, "error": error(guess, middle),
                       "cpu_ms": statistics.median(known) if known else None})
    demand = passive.get("demand") or {}
    recorded = passive.get("requests") or {}
    return {"shape": shape, "target_p99_ms": target, "since_s": since,
            "a_passive": a_passive, "a_live": a_live,
            "ratio": a_passive / a_live if a_passive and a_live else None,
            "passive_reason": passive.get("reason"), "live_reason": live.get("reason"),
            "checked_at": "passive" if a_passive else "live" if a_live else None,
            "recorded_p99_ms": (recorded.get("measured") or {}).get("p99_ms"),
            "recorded_cpu_ms": cpu_of(run),
            "recorded_requests": recorded.get("count"),
            "throttled_fraction": demand.get("throttled_fraction"),
            "demand_exact": demand.get("exact"), "demand_says": demand.get("says"),
            "checks": checks, "live_runs": len(live.get("runs") or []),
            "replay_at_advise_runs": at_runs,
            "load_average": loadavg(), "kept": str(out)}


def row_line(r: dict[str, Any]) -> str:
    def cpus(v: float | None) -> str:
        return "none" if v is None else f"{v:.3g}"

    ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}"
    hidden = "–" if r["throttled_fraction"] is None else f"{100 * r['throttled_fraction']:.0f} %"
    checks = [f"{cpus(c['cpus'])}: {ms(c['predicted_p99_ms'])} / {ms(c['measured_p99_ms'])}"
              f"{spread(c.get('runs_p99_ms'))} "
              f"({pct(c['error'])}; CPU {times(c.get('cpu_ms'), r.get('recorded_cpu_ms'))})"
              for c in r["checks"]]
    checks += ["–"] * (2 - len(checks))
    return (f"| {r['shape']} | {r['target_p99_ms']:g} | {hidden} | {cpus(r['a_passive'])} | "
            f"{cpus(r['a_live'])} | {ratio} | {r['checked_at'] or '–'} | {checks[0]} | "
            f"{checks[1]} | {r['load_average']} |")


def kept_runs(directory: Path) -> dict[float, list[Path]]:
    """The runs live advise and sweep kept in one shape's folder, by limit."""
    out: dict[float, list[Path]] = {}
    for csv in sorted([*directory.glob("live/*-advise-*.csv"),
                       *directory.glob("sweep-*/*-inplace-*.csv")]):
        if csv.name.endswith((".cgroup.csv", ".threads.csv")):
            continue
        stem = csv.stem   # <name>-advise-<cpus>[-N], <name>-inplace-<cpus>
        cpus = (stem.rsplit("-advise-", 1)[1].split("-")[0] if "-advise-" in stem
                else stem.rsplit("-", 1)[1])
        if cpus != "none":
            out.setdefault(float(cpus), []).append(csv)
    return dict(sorted(out.items()))


def replay_kept(work: Path) -> int:
    """``--replay-kept``: each shape's kept window and run replayed at every limit its live
    runs measured (see the module's docstring)."""
    from client.analysis.replay import replay_limits
    from client.advise.replay import load_replay

    print(f"### The replay (commit {git_head()}) against the live runs kept in {work}\n")
    print("| shape | limit CPU | predicted p99 ms | measured p99 ms (CPU a request / the "
          "record's) | error |")
    print("|---|---|---|---|---|")
    errors: dict[str, list[float]] = {}
    for shape in SHAPES:
        out = work / shape
        windows = sorted((out / "passive").glob("*.cgroup.csv"))
        run = out / "recorded" / "recorded.csv"
        runs = kept_runs(out)
        if not windows or not run.exists() or not runs:
            continue
        replayed = load_replay(windows[0], run, None)
        rows = replay_limits(replayed.demand, list(runs), replayed.requests, 0,
                             replayed.period_ns, replayed.closed)
        recorded = cpu_of(run)
        for (cpus, csvs), row in zip(runs.items(), rows):
            seen = [(p99_of(csv), cpu_of(csv)) for csv in csvs]
            mean = sum(p99 for p99, _ in seen) / len(seen)
            guess = row.latency_ms(99)
            errors.setdefault(shape, []).append(abs(guess / mean - 1))
            print(f"| {shape} | {cpus:g} | {guess:.1f} | " + ", ".join(
                f"{p99:.1f} ({times(cpu, recorded)})" for p99, cpu in seen)
                + f" | {pct(error(guess, mean))} |")
    print()
    for shape, found in errors.items():
        within = sum(1 for e in found if e <= GOAL)
        print(f"- {shape}: mean |error| {100 * sum(found) / len(found):.0f} %, within "
              f"{100 * GOAL:g} % at {within} of {len(found)} limits")
    return 0


def git_head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--p99", type=float, nargs="+", default=[30.0, 60.0, 60.0],
                        help="the target per shape, ms, in --shapes' order (default 30 60 60)")
    parser.add_argument("--limit", default="100m",
                        help="the Deployment's limits.cpu while the load is recorded (default "
                             "100m, the demo's)")
    parser.add_argument("--iterations", type=int, default=5000,
                        help="burn iterations per request (~1 us of CPU each; default 5000)")
    parser.add_argument("--requests", type=int, default=80, help="requests per run")
    parser.add_argument("--rate", type=float, default=8.0,
                        help="the bursts shape's open-loop rate, requests/s (default 8)")
    parser.add_argument("--burst-every", type=int, default=10,
                        help="the bursts shape: targets in one round (default 10)")
    parser.add_argument("--burst-size", type=int, default=3,
                        help="the bursts shape: heavy targets at the start of each round "
                             "(default 3)")
    parser.add_argument("--burst-iterations", type=int, default=15000,
                        help="a heavy target's iterations (default 15000)")
    parser.add_argument("--profile-seconds", type=float, default=3.0,
                        help="live advise's --profile-seconds (default 3)")
    parser.add_argument("--max-runs", type=int, default=10,
                        help="live advise's --max-runs (default 10)")
    parser.add_argument("--check-runs", type=int, default=3,
                        help="live runs at each checked limit; the prediction is set against "
                             "their median (default 3)")
    parser.add_argument("--flush", type=float, default=3.0,
                        help="seconds to wait after a load for the agent's rows (default 3)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the runs are kept (default: a new temporary folder)")
    parser.add_argument("--replay-kept", type=Path, default=None, metavar="DIR",
                        help="no node: replay the runs an earlier run kept in DIR (its --out) "
                             "against its live runs")
    opts = parser.parse_args(argv)
    if opts.replay_kept is not None:
        if not opts.replay_kept.is_dir():
            parser.error(f"--replay-kept {opts.replay_kept}: not a folder of kept runs")
        return replay_kept(opts.replay_kept)
    if len(opts.p99) == 1:
        opts.p99 = opts.p99 * len(opts.shapes)
    if len(opts.p99) != len(opts.shapes):
        parser.error(f"--p99: one target, or one per shape ({len(opts.shapes)})")
    if os.geteuid() != 0:
        parser.error("the node needs root")
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        raise SystemExit("the node's pods are read in the v1 cpu hierarchy: "
                         "/sys/fs/cgroup/cpu/cpu.cfs_quota_us is missing")
    work = opts.out or Path(tempfile.mkdtemp(prefix="passive-vs-live-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with the_node() as n, recorder_on_every_node(n, work, log), \
            the_deployment(n, work, opts.limit) as base:
        env = dict(os.environ, KUBECONFIG=str(n.lay.kubeconfig),
                   PATH=f"{n.lay.kube_bin}{os.pathsep}{os.environ['PATH']}")
        print(f"### advise --passive against advise on the node: {WORKLOAD} recorded at "
              f"{opts.limit}, {opts.requests} requests a run of ~{opts.iterations / 1000:g} ms "
              f"of CPU (bursts: {opts.burst_size} of {opts.burst_every} at "
              f"~{opts.burst_iterations / 1000:g} ms, {opts.rate:g}/s); runs kept in {work}; "
              f"load average before {loadavg()}, {os.cpu_count()} CPUs\n")
        print("| shape | p99 target ms | recorded window throttled (demand hidden) "
              "| A_passive CPU | A_live CPU | passive / live | checked at | at A: predicted / "
              "measured p99 ms, median [range] of the live runs (error; CPU a request / the "
              "record's) | at 25 % less: predicted / measured p99 ms (error; CPU) | load "
              "average |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for shape, target in zip(opts.shapes, opts.p99):
            row = run_shape(shape, target, base, opts, work, env)
            rows.append(row)
            print(row_line(row), flush=True)
    print("\nThe replay at every limit live advise ran, against its run(s) there "
          "(p99 ms, predicted / measured, and each run's CPU a request / the record's):\n")
    for r in rows:
        print(f"- {r['shape']} (the record: {ms(r['recorded_cpu_ms'])} ms a request): "
              + "; ".join(f"{c['cpus']:g}: {ms(c['predicted_p99_ms'])} / " + ", ".join(
                  f"{m:.1f} ({times(cpu, r['recorded_cpu_ms'])})"
                  for m, cpu in zip(c["measured_p99_ms"], c["cpu_ms"]))
                  for c in r["replay_at_advise_runs"]))
    within = [r["shape"] for r in rows if r["ratio"] is not None
              and abs(r["ratio"] - 1) <= GOAL and r["checks"][0]["error"] is not None
              and abs(r["checks"][0]["error"]) <= GOAL]
    print(f"\n(load average after {loadavg()}; goal: A_passive within {100 * GOAL:g} % of "
          f"A_live and the predicted p99 at A_passive within {100 * GOAL:g} % of the measured: "
          f"{', '.join(within) or 'no shape'} met it)")
    keep_record("passive_vs_live", {"limit": opts.limit, "iterations": opts.iterations,
                                    "requests": opts.requests, "rate": opts.rate,
                                    "rows": rows, "within_goal": within})
    return 0


if __name__ == "__main__":
    run_main(main)
