"""``cluster --prometheus --since 7d`` over 1,000 workloads' backfilled series: the command's
wall time, CPU and peak RSS, Prometheus's CPU and peak RSS against its idle (issue 59).

    .venv/bin/python -m benchmarks.prometheus_week [--workloads 1000] [--throttling 100]
                                                   [--days 7] [--scrape 30] [--repeats 2]
                                                   [--blocks compacted|2h] [--data DIR]
                                                   [--query-stats] [--profile F]

The series are what the node agent exports for a one-pod workload and ``cluster`` reads: 19 a
pod (periods, periods throttled, throttled seconds, usage seconds, coarse periods, the wait
histogram's 13 buckets and the start_time gauge, the agent's watch begun an hour before the
first sample; ``level="pod"``), one sample each ``--scrape`` seconds (60 s: four times the
shipped job's 15 s, k8s/recorder/prometheus.yml) over ``--days`` and 2 h more, of
``--workloads`` Deployments in namespace ``bench``; the first ``--throttling`` of them
throttled in about a third of their periods, the rest idle to busy under their limit. They are
written as OpenMetrics text one 2 h window at a time and made blocks by ``promtool tsdb
create-blocks-from openmetrics`` (Prometheus 2.42's promtool reads its whole input once for
each 2 h block it makes: a file a window is read once; the backfill's time is in the table).
The shipped recording rules (k8s/recorder/rules.yaml) are then evaluated over them by
``promtool tsdb create-blocks-from rules`` against a Prometheus holding them, as a Prometheus
that had the rules loaded all week holds their series (``cluster`` reads the usage rule's over
a long window). Then Debian's Prometheus compacts the blocks itself, at its default block
ranges (2 h, 6 h, 18 h at its default 15 d retention), until a whole compaction cycle (one a
minute) compacts nothing: the blocks a Prometheus that ran the week holds, and no compaction
runs during the queries. ``--blocks 2h`` keeps 2 h blocks instead (a server run with
``--storage.tsdb.max-block-duration=2h``, as Thanos's sidecar asks, which merges only the
rules' blocks with the series' they overlap): a lookup over the week then reads 85 blocks'
index. The workloads are listed by a
fake API server on loopback (benchmarks/fake_kube.py). After Prometheus has been idle 10 s,
``http-timing cluster -n bench --prometheus URL --since 7d --until END --json`` runs
``--repeats`` times: its wall time, its peak RSS (``ru_maxrss`` from ``wait4``), Prometheus's
RSS sampled every 50 ms (``VmRSS`` and ``RssAnon`` of ``/proc/PID/status``) against its idle
RSS, the CPU time each used (the figure a loaded machine moves least), and whether the first throttling workload's periods throttled are what its series say.
Goals: at most 30 s and 200 MiB for the command, Prometheus's peak under twice its idle.
The goal is judged on the whole ``VmRSS``, as the issue says RSS; ``RssAnon`` (the Go heap:
what the queries allocate, what an OOM kill counts first) is shown beside it and against its
own idle too. The rest, ``RssFile``, is the blocks' chunks and index Prometheus ``mmap``s, the
pages the queries have read (the page cache, given back under pressure), and stays mapped: each
run's end shows it from ``/proc/PID/smaps`` (index, chunks, heap). A lookup spanning the week
(the series API, the usage rule's samples) reads every block's index; the chunks are those of
the usage rule's samples and of the instants' lookups; the table says what the idle with
those chunks added comes to.
``--query-stats`` also asks each of the client's queries once more in-process with
``stats=all`` and prints the slowest; ``--profile F`` runs the command once under cProfile.
``--data DIR`` keeps the blocks there and reuses them when they hold these series. Prints the
table and writes the record (``benchmarks/records.py``; ``python -m benchmarks
prometheus_week``). Needs Debian's prometheus and promtool, not root.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.fake_kube import Cluster, fake_kube
from benchmarks.prometheus_server import Missing, binary, prometheus_running
from benchmarks.support import HTTP_TIMING, ROOT, describe_load, keep_record, run_main, timed
from client.run.prometheus import AGENT_METRICS, Prometheus, open_prometheus
from client.run.prometheus_query import pod_totals, pods_seen

__all__ = ["main", "series_values"]

NAMESPACE = "bench"
WINDOW_S = 7200            # promtool's block: a file each
PERIOD_S = 0.1             # the CFS period the series count
BOUNDS = ("0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.25",
          "0.5", "1.0", "+Inf")   # the agent's wait histogram (agent/internal/metrics/waits.go)
SHARE = (0.02, 0.06, 0.12, 0.2, 0.3, 0.42, 0.5, 0.58, 0.68, 0.8, 0.9, 0.97, 1.0)  # <= each le
LIMIT_CPUS = 0.5
COUNTERS = ("periods", "throttled_periods", "throttled_seconds", "usage_seconds",
            "coarse_periods")
SERIES_PER_POD = len(COUNTERS) + len(BOUNDS) + 1   # and the agent's start_time gauge
GOALS = {"wall_s": 30.0, "rss_mib": 200.0, "prometheus_ratio": 2.0}
RULES = ROOT / "k8s" / "recorder" / "rules.yaml"
# Prometheus's flags a layout of blocks asks: its defaults compact them; 2 h blocks as written
BLOCKS = {"compacted": [], "2h": ["--storage.tsdb.retention.time=60d",
                                  "--storage.tsdb.max-block-duration=2h"]}
CONFIG = {"global": {"scrape_interval": "15s"}}


def log(msg: str) -> None:
    print(f"[prometheus_week] {msg}", file=sys.stderr, flush=True)


class Series:
    """Each pod's counters at sample ``i`` (``t = first + i * scrape``): a pod's counter is its
    scale times a shared nondecreasing shape from the pod's own offset (so no two pods' are the
    same), the shape's steps drawn once (seeded)."""

    def __init__(self, pods: int, throttling: int, samples: int, scrape_s: int,
                 since: int = 0) -> None:
        rng = np.random.default_rng(59)
        n = samples + pods * 7 + 1
        self.scrape_s, self.pods, self.throttling = scrape_s, pods, throttling
        day = np.sin(2 * np.pi * np.arange(n) * scrape_s / 86400) * 0.3 + 0.7
        busy = np.clip(rng.uniform(0.2, 1.0, n) * day, 0.0, 1.0)   # of the limit, each scrape
        self.usage = np.concatenate([[0.0], np.cumsum(busy)])      # limits x scrape seconds
        self.periods = np.concatenate([[0], np.cumsum(
            np.round(busy * scrape_s / PERIOD_S + 1).astype(np.int64))])
        throttled = rng.binomial((scrape_s / PERIOD_S * busy).astype(np.int64), busy / 2.5)
        self.throttled = np.concatenate([[0], np.cumsum(throttled)])
        self.coarse = np.concatenate([[0], np.cumsum(rng.random(n) < 0.02)])
        self.scale = rng.uniform(0.05, 0.9, pods)   # idle to busy, of the limit
        self.since = since   # the agent's start_time gauge: before the first sample

    def values(self, pod: int, first: int, last: int) -> dict[str, list[Any]]:
        """Metric key (le for a bucket) -> pod ``pod``'s values at samples first..last-1."""
        k = pod * 7
        a, b = first + k, last + k
        usage = (self.usage[a:b] - self.usage[k]) * self.scrape_s * LIMIT_CPUS * (
            1.0 if pod < self.throttling else self.scale[pod])
        periods = self.periods[a:b] - self.periods[k]
        out: dict[str, list[Any]] = {
            "start_time": [self.since] * (last - first),
            "periods": periods.tolist(),
            "usage_seconds": [f"{u:.3f}" for u in usage.tolist()],
            "coarse_periods": (self.coarse[a:b] - self.coarse[k]).tolist()}
        if pod < self.throttling:
            throttled = self.throttled[a:b] - self.throttled[k]
            out["throttled_periods"] = throttled.tolist()
            out["throttled_seconds"] = [f"{x * 0.021:.3f}" for x in throttled.tolist()]
            for le, share in zip(BOUNDS, SHARE):
                out[le] = np.floor(throttled * share).astype(np.int64).tolist()
        else:
            zeros = [0] * (last - first)
            out["throttled_periods"] = out["throttled_seconds"] = zeros
            for le in BOUNDS:
                out[le] = zeros
        return out


def series_values(series: Series, pod: int, key: str, i: int) -> float:
    """One pod's counter ``key`` at sample ``i`` (for checking the command's row)."""
    got = series.values(pod, i, i + 1)[key][0]
    return float(got)


def pod_name(i: int) -> str:
    """Workload ``i``'s pod, named as its ReplicaSet names one (5 of its 27 letters)."""
    letters, n, suffix = "bcdfghjklmnpqrstvwxz2456789", i * 7919, ""
    for _ in range(5):
        n, k = divmod(n, 27)
        suffix += letters[k]
    return f"w-{i:04d}-5d8f9c7b6-{suffix}"


def write_window(path: Path, series: Series, first_t: int, first: int, last: int) -> int:
    """OpenMetrics text of every pod's samples first..last-1 (one 2 h window); lines written."""
    ts = [str(first_t + i * series.scrape_s) for i in range(first, last)]
    per_pod = [series.values(p, first, last) for p in range(series.pods)]
    lines = 0
    with open(path, "w") as out:
        families = [(AGENT_METRICS[key], [(key, "")]) for key in (*COUNTERS, "start_time")]
        families.append((AGENT_METRICS["wait_bucket"], [(le, f',le="{le}"') for le in BOUNDS]))
        for name, keys in families:
            out.write(f"# TYPE {name} unknown\n")
            for p in range(series.pods):
                for key, le in keys:
                    prefix = (f'{name}{{namespace="{NAMESPACE}",pod="{pod_name(p)}",'
                              f'container="",level="pod"{le}}} ')
                    out.write("".join([f"{prefix}{v} {t}\n"
                                       for v, t in zip(per_pod[p][key], ts)]))
                    lines += len(ts)
        out.write("# EOF\n")
    return lines


def backfilled(data: Path, series: Series, first_t: int, samples: int) -> dict[str, Any]:
    """Every 2 h window written and made blocks in ``data``, writing the next while promtool
    reads one; the time it took and the samples."""
    t0 = time.monotonic()
    per = WINDOW_S // series.scrape_s
    windows = [(i, min(i + per, samples)) for i in range(0, samples, per)]
    # the text in memory (tmpfs) where there is one: written and read once, ~600 MB a window
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="prometheus-week-", dir=shm if shm.is_dir() else None))
    try:
        return _backfilled(data, series, first_t, windows, work, t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _backfilled(data: Path, series: Series, first_t: int, windows: list[tuple[int, int]],
                work: Path, t0: float) -> dict[str, Any]:
    lines = 0
    running: subprocess.Popen[bytes] | None = None
    pending: Path | None = None
    try:
        for k, (first, last) in enumerate(windows):
            path = work / f"w{k % 2}.om"
            lines += write_window(path, series, first_t, first, last)
            if running is not None:
                _finish(running, pending)
            running = subprocess.Popen([binary("promtool"), "tsdb", "create-blocks-from",
                                        "openmetrics", "--quiet", str(path), str(data)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            pending = path
            if k % 12 == 11:
                log(f"{k + 1} of {len(windows)} windows ({time.monotonic() - t0:.0f} s)")
        if running is not None:
            _finish(running, pending)
    finally:
        if running is not None and running.poll() is None:   # interrupted: stopped by its pid
            running.kill()
            running.wait()
    return {"backfill_s": time.monotonic() - t0, "samples": lines, "windows": len(windows),
            "blocks_mib": sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20}


def _finish(proc: subprocess.Popen[bytes], path: Path | None) -> None:
    _, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"promtool failed on {path}: {err.decode()[-500:]}")


def rules_backfilled(work: Path, first_t: int, end_t: int) -> dict[str, Any]:
    """The shipped recording rules evaluated over the series in ``work/data`` by ``promtool
    tsdb create-blocks-from rules`` against a Prometheus holding them (its 2 h blocks as
    written), their blocks added to the data; the time it took and the blocks."""
    t0 = time.monotonic()
    out = work / "rules-blocks"
    shutil.rmtree(out, ignore_errors=True)
    with prometheus_running(work / "prometheus-rules", CONFIG, BLOCKS["2h"],
                            data=work / "data") as base:
        done = subprocess.run([binary("promtool"), "tsdb", "create-blocks-from", "rules",
                               "--quiet", f"--url={base}", f"--start={first_t}",
                               f"--end={end_t}", f"--output-dir={out}", str(RULES)],
                              capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"promtool could not backfill {RULES}: {done.stderr[-500:]}")
    blocks = [d for d in out.iterdir() if (d / "meta.json").is_file()]
    for block in blocks:
        block.rename(work / "data" / block.name)
    shutil.rmtree(out, ignore_errors=True)
    return {"rules_s": time.monotonic() - t0, "rules_blocks": len(blocks)}


def tsdb_metrics(base: str, names: Sequence[str]) -> dict[str, float]:
    """Prometheus's own unlabelled metrics ``names`` from its /metrics."""
    out = {}
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            out[name] = float(value)
    return out


def compacted(work: Path, blocks: str, timeout_s: float = 3600.0) -> dict[str, Any]:
    """The blocks in ``work/data`` compacted by Prometheus run with the flags of ``blocks``
    (:data:`BLOCKS`: at its default ranges; or at 2 h, where it only merges the blocks that
    overlap, the rules' with the series'), until a whole compaction cycle (one a minute, each
    compacting until it plans nothing) compacts nothing; the time it took and the
    compactions."""
    names = ("prometheus_tsdb_compactions_total", "prometheus_tsdb_compactions_triggered_total",
             "prometheus_tsdb_compactions_failed_total")
    t0 = time.monotonic()
    with prometheus_running(work / "prometheus-compact", CONFIG, BLOCKS[blocks],
                            data=work / "data") as base:
        seen = tsdb_metrics(base, names)
        while True:
            now = tsdb_metrics(base, names)
            if now.get(names[2], 0.0) > 0:
                raise SystemExit(f"Prometheus failed to compact the blocks: see "
                                 f"{work / 'prometheus-compact' / 'log'}")
            if now.get(names[1], 0.0) >= seen.get(names[1], 0.0) + 2:
                if now.get(names[0]) == seen.get(names[0]):
                    break
                seen = now
            if time.monotonic() - t0 > timeout_s:
                raise SystemExit(f"Prometheus still compacting after {timeout_s:.0f} s")
            time.sleep(2)
    return {"compact_s": time.monotonic() - t0, "compactions": now.get(names[0], 0.0)}


def block_hours(data: Path) -> list[float]:
    """Each block's time range in ``data`` (hours), oldest first."""
    metas = [json.loads(m.read_text()) for m in data.glob("*/meta.json")]
    return [(m["maxTime"] - m["minTime"]) / 3.6e6 for m in sorted(metas,
                                                                 key=lambda m: m["minTime"])]


def layout(hours: Sequence[float]) -> str:
    """``hours`` in words: how many blocks of each range."""
    counts: dict[float, int] = {}
    for h in hours:
        counts[round(h)] = counts.get(round(h), 0) + 1
    return f"{len(hours)} blocks (" + ", ".join(
        f"{n} of {h:g} h" for h, n in sorted(counts.items(), reverse=True)) + ")"


def workload_lists(pods: int) -> dict[str, list[Any]]:
    """What the fake API server lists in namespace ``bench``: a Deployment, its ReplicaSet and
    its one recorded pod a workload."""
    template = {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {
        "limits": {"cpu": f"{LIMIT_CPUS * 1000:g}m"},
        "requests": {"cpu": f"{LIMIT_CPUS * 1000:g}m"}}}]}}}
    base = f"/apis/apps/v1/namespaces/{NAMESPACE}"
    names = [(f"w-{i:04d}", f"w-{i:04d}-5d8f9c7b6", pod_name(i)) for i in range(pods)]
    return {
        f"{base}/deployments": [{"metadata": {"name": d, "namespace": NAMESPACE},
                                 "spec": template, "status": {}} for d, _, _ in names],
        f"{base}/statefulsets": [], f"{base}/daemonsets": [],
        f"{base}/replicasets": [{"metadata": {"name": rs, "namespace": NAMESPACE,
                                              "ownerReferences": [{"kind": "Deployment",
                                                                   "name": d}]}}
                                for d, rs, _ in names],
        f"/api/v1/namespaces/{NAMESPACE}/pods": [
            {"metadata": {"name": p, "namespace": NAMESPACE,
                          "labels": {"throttle-lab/record": "true"},
                          "ownerReferences": [{"kind": "ReplicaSet", "name": rs}]},
             "spec": {"nodeName": f"node-{i % 2 + 1}"}, "status": {"phase": "Running"}}
            for i, (_, rs, p) in enumerate(names)]}


def cpu_s(pid: int) -> float:
    """The CPU time ``pid`` has used (user and system, seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of ``pid`` (KiB)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0])
    return out


def mapped_mib(pid: int) -> dict[str, float]:
    """What ``pid`` has resident (MiB, ``/proc/PID/smaps``): the blocks' ``index`` files,
    their ``chunks``, its ``heap`` (anonymous mappings) and the rest (its binary, libraries)."""
    out = dict.fromkeys(("index", "chunks", "heap", "rest"), 0.0)
    kind = "rest"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):   # a mapping's first line
            path = head[5] if len(head) > 5 else ""
            kind = ("index" if path.endswith("/index") else "chunks" if "/chunks/" in path
                    else "heap" if not path or path.startswith("[") else "rest")
        elif head and head[0] == "Rss:":
            out[kind] += int(head[1]) / 1024
    return out


@contextmanager
def sampled(pid: int, every_s: float = 0.05) -> Iterator[list[dict[str, int]]]:
    """``pid``'s RSS every ``every_s`` while the block runs."""
    got: list[dict[str, int]] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            got.append(rss_kib(pid))
            stop.wait(every_s)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.set()
        thread.join()
        got.append(rss_kib(pid))


def query_stats(base: str, at: float, since_s: float, top: int = 5) -> list[dict[str, Any]]:
    """Each of the client's queries asked again with ``stats=all``: the ``top`` slowest's
    timings and samples (Prometheus's own), and all queries' totals."""
    real = open_prometheus(base)
    asked: list[dict[str, Any]] = []
    lock = threading.Lock()

    def get(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        t0 = time.monotonic()
        status, body = real._get(path, dict(params, stats="all"))
        wall = time.monotonic() - t0
        try:
            stats = json.loads(body)["data"].get("stats", {})
        except (ValueError, KeyError, AttributeError):
            stats = {}
        with lock:
            asked.append({"path": path, "query": params.get("query", params.get("match[]", "")),
                          "wall_s": wall, "timings": stats.get("timings", {}),
                          "samples": {k: v for k, v in stats.get("samples", {}).items()
                                      if k in ("totalQueryableSamples", "peakSamples")}})
        return status, body
    prometheus = Prometheus(base, get)
    t0 = time.monotonic()
    pod_totals(prometheus, pods_seen(prometheus, NAMESPACE, since_s, at), since_s, at)
    total = time.monotonic() - t0
    queries = [a for a in asked if a["path"].endswith("/query")]
    print(f"\n{len(queries)} queries in {total:.1f} s (4 at a time); each query's own: "
          f"eval {sum(a['timings'].get('evalTotalTime', 0) for a in queries):.1f} s in all, "
          f"{sum(a['samples'].get('totalQueryableSamples', 0) for a in queries) / 1e6:.0f} M "
          "samples read, peak "
          f"{max((a['samples'].get('peakSamples', 0) for a in queries), default=0) / 1e6:.1f}"
          " M samples held", file=sys.stderr)
    for a in sorted(queries, key=lambda a: -a["wall_s"])[:top]:
        print(f"  {a['wall_s']:.2f} s {a['timings']} {a['samples']}: {a['query'][:160]}",
              file=sys.stderr)
    return [{"queries": len(queries), "wall_s": total,
             "eval_s": sum(a["timings"].get("evalTotalTime", 0) for a in queries),
             "samples": sum(a["samples"].get("totalQueryableSamples", 0) for a in queries),
             "peak_samples": max((a["samples"].get("peakSamples", 0) for a in queries),
                                 default=0)}]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=1000, help="one-pod Deployments")
    parser.add_argument("--throttling", type=int, default=100, help="of them, throttled")
    parser.add_argument("--days", type=float, default=7.0, help="cluster's --since, in days")
    parser.add_argument("--scrape", type=int, default=60, help="seconds between samples")
    parser.add_argument("--repeats", type=int, default=2, help="runs of the command")
    parser.add_argument("--blocks", choices=sorted(BLOCKS), default="compacted",
                        help="the blocks as Prometheus compacts them (default), or promtool's "
                        "2 h blocks as written")
    parser.add_argument("--data", type=Path, metavar="DIR",
                        help="keep the blocks in DIR and reuse them (default: a temporary "
                        "folder, removed)")
    parser.add_argument("--query-stats", action="store_true",
                        help="also ask each query with stats=all and print the slowest")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="also run the command once under cProfile into FILE")
    opts = parser.parse_args(argv)
    try:
        binary("prometheus"), binary("promtool")
    except Missing as exc:
        parser.error(str(exc))
    since_s = opts.days * 86400
    samples = math.ceil((since_s + WINDOW_S) / opts.scrape)
    samples += -samples % (WINDOW_S // opts.scrape)
    with tempfile.TemporaryDirectory(prefix="prometheus-week-") as scratch:
        work = opts.data if opts.data is not None else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        manifest = {"workloads": opts.workloads, "throttling": opts.throttling,
                    "samples": samples, "scrape_s": opts.scrape, "blocks": opts.blocks,
                    "series_per_pod": SERIES_PER_POD}
        kept = work / "series.json"
        old = json.loads(kept.read_text()) if kept.exists() else {}
        if {k: old.get(k) for k in manifest} == manifest and (work / "data").is_dir():
            first_t = int(old["first_t"])
            filled = old["filled"]
            log(f"reusing the blocks in {work / 'data'}")
        else:
            shutil.rmtree(work / "data", ignore_errors=True)
            # the last window ends at an hour or two ago, on promtool's 2 h boundary
            end_t = (int(time.time()) // WINDOW_S - 1) * WINDOW_S
            first_t = end_t - samples * opts.scrape
            log(f"writing {opts.workloads} x {SERIES_PER_POD} series x {samples} samples")
            filled = backfilled(work / "data", Series(opts.workloads, opts.throttling, samples,
                                                      opts.scrape, first_t - 3600),
                                first_t, samples)
            filled.update(rules_backfilled(work, first_t, first_t + samples * opts.scrape))
            log(f"rules backfilled in {filled['rules_s']:.0f} s")
            filled.update(compacted(work, opts.blocks))
            log(f"compacted in {filled['compact_s']:.0f} s")
            filled["blocks_mib"] = sum(f.stat().st_size for f in (work / "data").rglob("*")
                                       if f.is_file()) / 2**20
            kept.write_text(json.dumps({**manifest, "first_t": first_t, "filled": filled}))
        series = Series(opts.workloads, opts.throttling, samples, opts.scrape)
        last_i = samples - 1
        at = first_t + last_i * opts.scrape + 7.25        # off the scrapes and the steps
        start_i = math.floor((at - since_s - first_t) / opts.scrape)
        expected = (series_values(series, 0, "throttled_periods", last_i)
                    - series_values(series, 0, "throttled_periods", start_i))
        log(f"backfill: {filled['samples'] / 1e6:.0f} M samples in {filled['backfill_s']:.0f} "
            f"s, {filled['blocks_mib']:.0f} MiB of blocks")
        procs: list[subprocess.Popen[bytes]] = []
        blocks = layout(block_hours(work / "data"))
        with prometheus_running(work / "prometheus", CONFIG, BLOCKS[opts.blocks], procs=procs,
                                data=work / "data") as base, \
                fake_kube(Cluster(workload_lists(opts.workloads)), work) as kubeconfig:
            pid = procs[0].pid
            time.sleep(10)
            idle_mapped = mapped_mib(pid)
            with sampled(pid) as idle_rss:
                time.sleep(5)
            idle = statistics.median(s["VmRSS"] for s in idle_rss) / 1024
            idle_anon = statistics.median(s["RssAnon"] for s in idle_rss) / 1024
            # the command of this checkout (the venv's console script, this checkout's client)
            env = dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONPATH=os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
            args = ["cluster", "-n", NAMESPACE, "--prometheus", base, "--since",
                    f"{opts.days:g}d", "--until", f"{at:.3f}", "--json"]
            print(f"### cluster --prometheus --since {opts.days:g}d over {opts.workloads} "
                  "workloads' series\n")
            print(f"({describe_load('before')}; {opts.workloads} one-pod Deployments, "
                  f"{opts.throttling} throttling, {SERIES_PER_POD} series a pod at a "
                  f"{opts.scrape} s scrape "
                  f"over {samples * opts.scrape / 86400:.2f} days: "
                  f"{filled['samples'] / 1e6:.0f} M samples backfilled in "
                  f"{filled['backfill_s']:.0f} s, the shipped recording rules' in "
                  f"{filled['rules_s']:.0f} s"
                  + (f", compacted by Prometheus in {filled['compact_s']:.0f} s"
                     if "compact_s" in filled else "")
                  + f": {blocks}, {filled['blocks_mib']:.0f} MiB; Prometheus idle {idle:.0f} MiB "
                  f"(anonymous {idle_anon:.0f}; resident: index {idle_mapped['index']:.0f}, "
                  f"chunks {idle_mapped['chunks']:.0f}, heap {idle_mapped['heap']:.0f}); "
                  f"{time.strftime('%Y-%m-%d %H:%M %Z')}, "
                  f"{os.uname().nodename})\n")
            runs = []
            for i in range(opts.repeats):
                before = cpu_s(pid)
                with sampled(pid) as during:
                    got = timed(args, env)
                got["prometheus_cpu_s"] = cpu_s(pid) - before
                got["prometheus_mib"] = max(s["VmRSS"] for s in during) / 1024
                got["prometheus_anon_mib"] = max(s["RssAnon"] for s in during) / 1024
                got["prometheus_mapped_mib"] = mapped_mib(pid)   # its file pages stay mapped
                answer = got.pop("answer", None) or {}
                rows = answer.get("workloads", [])
                got["rows"] = len(rows)
                got["queries"] = (answer.get("resolution") or {}).get("queries")
                first = next((r for r in rows if r["workload"] == f"{NAMESPACE}/deployment/"
                              "w-0000"), None)
                got["throttled_periods"] = None if first is None else first["periods_throttled"]
                got["expected_throttled_periods"] = expected
                got["throttling_first"] = sorted(r["workload"] for r in rows[:opts.throttling]
                                                 ) == [f"{NAMESPACE}/deployment/w-{k:04d}"
                                                       for k in range(opts.throttling)]
                runs.append(got)
                log(f"run {i + 1}: {got['wall_s']:.1f} s, {got['rss_mib']:.0f} MiB, "
                    f"Prometheus {got['prometheus_mib']:.0f} MiB; {got.get('error', '')}")
            stats = query_stats(base, at, since_s) if opts.query_stats else None
            if opts.profile is not None:
                path = opts.profile.resolve()
                subprocess.run([sys.executable, "-m", "cProfile", "-o", str(path),
                                str(HTTP_TIMING), *args], env=env, cwd=path.parent,
                               stdout=subprocess.DEVNULL, check=False)
                pstats.Stats(str(path), stream=sys.stderr).sort_stats("cumulative"
                                                                     ).print_stats(25)
    print("| run | wall s | CPU s: command, Prometheus | peak RSS MiB | Prometheus peak MiB "
          "(anonymous) | of its idle (anonymous) | resident after: index, chunks, heap MiB | queries | rows | throttling first | periods throttled, "
          "w-0000 (its series) | exit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, got in enumerate(runs, 1):
        print(f"| {i} | {got['wall_s']:.1f} | {got['cpu_s']:.1f}, {got['prometheus_cpu_s']:.1f} "
              f"| {got['rss_mib']:.0f} | "
              f"{got['prometheus_mib']:.0f} ({got['prometheus_anon_mib']:.0f}) | "
              f"{got['prometheus_mib'] / idle:.2f}x "
              f"({got['prometheus_anon_mib'] / idle_anon:.2f}x) | "
              + ", ".join(f"{got['prometheus_mapped_mib'][k]:.0f}" for k in ("index", "chunks", "heap"))
              + f" | {got['queries']} | {got['rows']} | "
              f"{'yes' if got['throttling_first'] else 'no'} | {got['throttled_periods']} "
              f"({got['expected_throttled_periods']:.0f}) | {got['exit']} |")
    worst = {"wall_s": max(g["wall_s"] for g in runs), "rss_mib": max(g["rss_mib"] for g in runs),
             "prometheus_ratio": max(g["prometheus_mib"] for g in runs) / idle}
    anon_ratio = max(g["prometheus_anon_mib"] for g in runs) / idle_anon
    # the chunks' pages the queries read stay mapped: Prometheus's floor at its peak
    chunks_read = max(g["prometheus_mapped_mib"]["chunks"] for g in runs) - idle_mapped["chunks"]
    floor_ratio = (idle + chunks_read) / idle
    met = {k: worst[k] <= GOALS[k] if k != "prometheus_ratio" else worst[k] < GOALS[k]
           for k in GOALS}
    print(f"\n| goal (the worst run) | measured | met |\n|---|---|---|\n"
          f"| wall time at most {GOALS['wall_s']:g} s | {worst['wall_s']:.1f} s | "
          f"{'yes' if met['wall_s'] else 'no'} |\n"
          f"| the command's peak RSS at most {GOALS['rss_mib']:g} MiB | "
          f"{worst['rss_mib']:.0f} MiB | {'yes' if met['rss_mib'] else 'no'} |\n"
          f"| Prometheus's peak RSS under {GOALS['prometheus_ratio']:g}x its idle "
          f"{idle:.0f} MiB | {worst['prometheus_ratio']:.2f}x | "
          f"{'yes' if met['prometheus_ratio'] else 'no'} |\n"
          f"| (beside it: its anonymous peak against its anonymous idle {idle_anon:.0f} MiB) | "
          f"{anon_ratio:.2f}x | {'under 2x' if anon_ratio < GOALS['prometheus_ratio'] else 'not under 2x'} |\n"
          f"| (beside it: its idle with only the chunks the queries read added, "
          f"{chunks_read:.0f} MiB) | "
          f"{floor_ratio:.2f}x | {'under 2x' if floor_ratio < GOALS['prometheus_ratio'] else 'not under 2x'} |")
    print(f"\n({describe_load('after')})")
    for got in runs:
        if "error" in got:
            print(f"\nerror: {got['error']}")
    keep_record("prometheus_week", {**manifest, "days": opts.days, "backfill": filled,
                                    "block_layout": blocks,
                                    "prometheus_idle_mib": idle,
                                    "prometheus_idle_anon_mib": idle_anon, "runs": runs,
                                    "prometheus_anon_ratio": anon_ratio,
                                    "prometheus_idle_mapped_mib": idle_mapped,
                                    "chunks_read_mib": chunks_read,
                                    "prometheus_floor_ratio": floor_ratio,
                                    "worst": worst, "goals": GOALS, "met": met,
                                    "query_stats": stats})
    return 0


if __name__ == "__main__":
    run_main(main)
