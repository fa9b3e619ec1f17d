"""Passive against live ``advise --cgroup`` on the host (issue 57's matrix).

    sudo .venv/bin/python -m benchmarks.advise_matrix [--shapes burn-service threaded go]
        [--loads sequential c4 open bursts] [--recorded 1 0.3] [--p99 40 100 50 90]
        [--out DIR]
    .venv/bin/python -m benchmarks.advise_matrix --replay-kept DIR

Each shape is a server in a cgroup of its own made for it (``service.cgroup``: removed at the
end, also on failure): ``burn-service`` (FastAPI on uvicorn, ``/cpuBurnFlow``, Server-Timing),
``threaded`` (``benchmarks/burner_server.py``: Python's ``ThreadingHTTPServer``, a thread a
connection) and ``go`` (``benchmarks/go_burner``: Go's net/http, built here). Each request
burns ~5 ms of CPU. Per shape and load (``sequential``: one after another; ``c4``: a closed
loop of 4; ``open``: an open loop at ``--rate``; ``bursts``: an open loop at ``--burst-rate``
whose targets are 3 heavy requests (~15 ms) in every 10):

1. the load recorded at each ``--recorded`` quota (``http-timing <load> --cgroup pid:PID``:
   the run's CSV and its ``.cgroup.csv`` timeline);
2. live ``advise --cgroup pid:PID`` with the same load and p99 goal, on the same running
   service (it changes the quota in place and puts it back), ``--live-runs`` times (default
   2): A_live, the answers' span. Live advise judges a p99 of a few seconds of requests, so
   its own answer moves from run to run (0.31 to 0.48 CPU over six runs of one open load):
   the span is the reference's own range;
3. per recording, ``advise --passive --timeline <its .cgroup.csv> --requests-from <its CSV>``:
   A_passive and its range (``recommended.range``, ``recommended.sure``).

A cell is a shape, a load and a recording. It is *within* when A_passive is within 25 % of
A_live (of a live answer: between 0.75 times the lowest and 1.25 times the highest);
otherwise the range *says so* when it holds a live answer, when ``sure`` is false, or
when there is no answer and one line says why (exit 3; "cannot be met" where live met it is
a claim, and misleads). A cell whose two halves ran on a machine loaded differently (the
group's CPU per request, or the latency of the requests no throttle delayed, more than 1.15
times apart between the recording and live advise: :func:`load_differs`) is marked; if it is
neither within nor says so, it is *not comparable* (measure it again on a quiet machine),
not misleading, and never within. The goal: within in at least 90 % of the cells, and every
other cell says so (none not comparable). Prints a row a shape and load (a column a recording; each cell's detail on stderr
and in the record) and keeps the record (``benchmarks/records.py``). Needs root; ~10 min,
so ``make bench`` runs it by name only. ``--replay-kept DIR`` (no root, no server): the
passive half recomputed from the runs an earlier run kept in ``DIR`` (its ``--out``), against
the live answers kept there: how a change to the replay does against the same live runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.support import (BURNER, HERE, HTTP_TIMING, get, keep_record, loadavg,
                                run_main, serve_in)
from cpuquota.cgroupfs import locate_cpu_controller
from cpuquota.limit import Limit

__all__ = ["GOAL", "LOADS", "SHAPES", "Pace", "Verdict", "live_answers", "live_pace",
           "live_span", "load_differs", "main", "pace_of", "summary", "verdict"]

SHAPES = ("burn-service", "threaded", "go")
LOADS = ("sequential", "c4", "open", "bursts")
GOAL = 0.25          # issue 57: within 25 %
ENOUGH = 0.90        # ... in at least 90 % of the cells
GO_BURNER = HERE / "go_burner" / "main.go"
UNMEETABLE = "cannot be met by a CPU limit"   # advise's reason when even no limit misses


def log(msg: str) -> None:
    print(f"[advise_matrix] {msg}", file=sys.stderr, flush=True)


# -- the verdict of a cell (pure) -----------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """One cell judged: ``ratio`` A_passive / A_live (the nearest live answer of their span:
    1 inside it); ``within`` 25 %; ``in_range``: a live answer inside the passive range (None:
    no range); ``says_so``: the passive answer is within, or
    its range holds the live answer, or it says it is not sure, or it gave no answer and said
    why; ``word``: what the table shows for the range."""

    ratio: float | None
    within: bool
    in_range: bool | None
    says_so: bool
    word: str
    # the machine's load differed between the recording and live advise (:func:`load_differs`):
    # a cell that is neither within nor says so is then not comparable, not misleading
    differed: str | None = None

    @property
    def misleads(self) -> bool:
        return not self.says_so and not self.differed

    @property
    def not_comparable(self) -> bool:
        return not self.says_so and bool(self.differed)


def verdict(passive: float | None, low: float | None, high: float | None,
            sure: bool | None, live: float | None, *, has_range: bool = True,
            unmeetable: bool = False, goal: float = GOAL,
            live_high: float | None = None) -> Verdict:
    """The cell's verdict. ``passive``: A_passive (None: no answer, exit 3); ``low``/``high``:
    its range (``high`` None: no limit up to the ceiling met the goal under one assumption, the
    range open above; ``has_range`` False: the answer came without a range); ``sure``:
    ``recommended.sure``; ``live``: A_live (None: live advise found no limit that meets the
    goal: then only no passive answer agrees); ``unmeetable``: the passive half gave no answer
    because it found the goal cannot be met (a claim, where live met it a wrong one), not
    because the record cannot tell. ``live_high``: the highest of several live answers on the
    same load (``live`` the lowest; None: one answer), their span the reference's range."""
    if live is None:
        agree = passive is None
        return Verdict(None, agree, None, agree or sure is False,
                       "both: none" if agree else "live: none")
    if passive is None:
        if unmeetable:
            return Verdict(None, False, None, False, "says unmeetable")
        return Verdict(None, False, None, True, "no answer (says why)")
    top = live if live_high is None else max(live, live_high)
    ratio = passive / live if passive < live else passive / top if passive > top else 1.0
    within = abs(ratio - 1) <= goal + 1e-9
    in_range = None
    if has_range and low is not None:
        in_range = low <= top and (high is None or live <= high)
    not_sure = sure is False
    says_so = within or bool(in_range) or not_sure
    word = ("holds live" if in_range else "misses live" if in_range is False else "no range")
    if not_sure:
        word += ", not sure"
    return Verdict(ratio, within, in_range, says_so, word)


def summary(verdicts: Sequence[Verdict], enough: float = ENOUGH) -> dict[str, Any]:
    """The matrix's figures: cells, within, the share within (of every cell), those that
    neither are within nor say so (misleading; where the machine's load differed between the
    two halves, not comparable instead: measure them again on a quiet machine), and whether
    the goal is met (a cell not comparable is not within, and the goal waits for it to be
    measured again: it never helps)."""
    cells = len(verdicts)
    within = sum(1 for v in verdicts if v.within)
    silent = sum(1 for v in verdicts if v.misleads)
    share = within / cells if cells else 0.0
    return {"cells": cells, "within": within, "share_within": share, "misleading": silent,
            "not_comparable": sum(1 for v in verdicts if v.not_comparable),
            "load_differed": sum(1 for v in verdicts if v.differed),
            "met": bool(cells) and share >= enough - 1e-9 and silent == 0
            and not any(v.not_comparable for v in verdicts)}


# -- the same load in both halves (pure) ----------------------------------------------------

SAME_LOAD = 1.15    # a figure of the two halves more than this far apart: the load differed
# (on a quiet machine the matrix's halves agree within 8 % in every figure of every cell)
FREE_ENOUGH = 0.75  # the recording's undelayed requests compared when they are this share


@dataclass(frozen=True)
class Pace:
    """What one half shows of the machine it ran on, for the same load: the group's CPU per
    request (the kernel's usage over the requests), and the median latency of the requests
    no throttle delayed (and their p90) and their share (None: none)."""

    cpu_ms: float
    free_ms: float | None
    free_share: float
    free_p90_ms: float | None = None


def load_differs(recorded: Pace, live: Pace, limit: float = SAME_LOAD,
                 free_enough: float = FREE_ENOUGH) -> str | None:
    """Why the machine's load differed between a recording and live advise on the same load,
    in a phrase (None: nothing shows it did): the group's CPU per request, or the median or
    p90 latency of the requests no throttle delayed (the recording's, where most were
    undelayed, against live's run without a limit), more than ``limit`` times apart. A
    busier machine runs the same request slower (its wall, shared: the median, or the tail
    where it was busy only at times) and often on more CPU (caches)."""
    said = []
    if min(recorded.cpu_ms, live.cpu_ms) > 0:
        ratio = recorded.cpu_ms / live.cpu_ms
        if max(ratio, 1 / ratio) > limit:
            said.append(f"CPU per request {recorded.cpu_ms:.2f} ms recorded, {live.cpu_ms:.2f} "
                        f"live (×{ratio:.2f})")
    if (recorded.free_ms and live.free_ms and recorded.free_share >= free_enough
            and live.free_share >= free_enough):
        for what, mine, theirs in (("median", recorded.free_ms, live.free_ms),
                                   ("p90", recorded.free_p90_ms, live.free_p90_ms)):
            if not mine or not theirs:
                continue
            ratio = mine / theirs
            if max(ratio, 1 / ratio) > limit:
                said.append(f"undelayed requests' {what} {mine:.1f} ms recorded, "
                            f"{theirs:.1f} live unlimited (×{ratio:.2f})")
    return "; ".join(said) or None


def pace_of(stem: Path) -> Pace:
    """:class:`Pace` of a run kept as ``STEM.csv`` and its timeline ``STEM.cgroup.csv``."""
    with Path(f"{stem}.cgroup.csv").open() as f:
        rows = list(csv.DictReader(f))
    with Path(f"{stem}.csv").open() as f:
        requests = list(csv.DictReader(f))
    used = int(rows[-1]["usage_ns"]) - int(rows[0]["usage_ns"]) if len(rows) > 1 else 0
    free = sorted(int(r["latency_ns"]) for r in requests
                  if not int(r.get("cgroup_held_ns") or 0)
                  and not int(r.get("cgroup_nr_throttled") or 0))
    n = len(requests)
    return Pace(used / n / 1e6 if n else 0.0,
                free[len(free) // 2] / 1e6 if free else None, len(free) / n if n else 0.0,
                free[int(0.9 * (len(free) - 1))] / 1e6 if free else None)


def live_pace(runs: Path) -> Pace | None:
    """:class:`Pace` of live advise's runs kept in ``runs``: the median CPU per request over
    them, the latency of its run without a limit (``*-none``); None: no runs kept."""
    stems = sorted(Path(str(p)[:-len(".cgroup.csv")]) for p in runs.glob("*.cgroup.csv"))
    paces = [pace_of(stem) for stem in stems if Path(f"{stem}.csv").exists()]
    if not paces:
        return None
    cpu = sorted(p.cpu_ms for p in paces)[len(paces) // 2]
    free = [pace_of(stem) for stem in stems if stem.name.endswith("-none")]
    return Pace(cpu, free[0].free_ms if free else None, 1.0 if free else 0.0,
                free[0].free_p90_ms if free else None)


# -- the servers ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Server:
    shape: str
    base_url: str
    pid: int
    group: Path

    def url(self, heavy: bool = False) -> str:
        if self.shape == "burn-service":
            return f"{self.base_url}/cpuBurnFlow?iterations={15000 if heavy else 5000}"
        return f"{self.base_url}/burn?ms={15 if heavy else 5}"


def build_go(work: Path) -> Path:
    """``benchmarks/go_burner`` built into ``work`` (the toolchain's own build cache)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists()
                                else None)
    if go is None:
        raise SystemExit("go is not installed: the go shape needs it "
                         "(scripts/install-load-tools.sh), or leave it out with --shapes")
    binary = work / "go-burner"
    done = subprocess.run([go, "build", "-o", str(binary), str(GO_BURNER)], cwd=work,
                          env={**os.environ, "GOFLAGS": "", "CGO_ENABLED": "0"},
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"go build {GO_BURNER}: {done.stderr.strip()[-300:]}")
    return binary


@contextmanager
def server_in_group(shape: str, cpus: float, go_binary: Path | None) -> Iterator[Server]:
    """The shape's server in a new cgroup of ``cpus`` (set once it answers: its start-up is not
    measured); stopped by its pid and the group removed by its path at the end."""
    from client.run.targets.service import ProcessService, burn_service_path, free_port
    from service.cgroup import create_group, empty_group, move_pid, remove_group, set_quota

    controller = locate_cpu_controller()
    group = create_group(None, controller)
    try:
        if shape == "burn-service":
            port = free_port()
            service = ProcessService([burn_service_path(), "--port", str(port),
                                      "--log-level", "warning"], port, health_timeout=60)
            try:
                service.start()
                assert service.pid is not None
                move_pid(group, service.pid)
                set_quota(group, controller.version, Limit(cpus))
                yield Server(shape, f"http://127.0.0.1:{port}", service.pid, group)
            finally:
                service.stop()
        else:
            command = ([sys.executable, str(BURNER), "--port", "0", "--shape", "connection"]
                       if shape == "threaded" else [str(go_binary), "0"])
            with serve_in(group, command) as served:
                set_quota(group, controller.version, Limit(cpus))
                yield Server(shape, served.base_url, served.pid, group)
    finally:
        empty_group(group)
        remove_group(group)


def set_cpus(server: Server, cpus: float) -> None:
    from service.cgroup import set_quota

    set_quota(server.group, locate_cpu_controller().version, Limit(cpus))


# -- the loads ------------------------------------------------------------------------------

def load_args(load: str, server: Server, opts: argparse.Namespace, cell: Path) -> list[str]:
    """The client's load options for ``load`` (the same for the recording and live advise)."""
    common = ["--warmup", "2"]
    if load == "sequential":
        return ["--url", server.url(), "--requests", str(opts.requests), *common]
    if load == "c4":
        return ["--url", server.url(), "--concurrency", "4", "--duration",
                f"{opts.duration:g}", *common]
    if load == "open":
        return ["--url", server.url(), "--rate", f"{opts.rate:g}", "--duration",
                f"{opts.duration:g}", *common]
    targets = cell / "bursts.targets"   # 3 heavy requests at the start of every 10
    targets.write_text("".join(f"GET {server.url(heavy=i < 3)}\n\n" for i in range(10)))
    return ["--targets", str(targets), "--rate", f"{opts.burst_rate:g}", "--duration",
            f"{opts.duration:g}", *common]


def http_timing(args: Sequence[str], ok: tuple[int, ...] = (0,),
                timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``http-timing ARGS`` as a user runs it."""
    done = subprocess.run([str(HTTP_TIMING), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode not in ok:
        raise RuntimeError(f"http-timing {' '.join(args[:2])} exit {done.returncode}: "
                           f"{done.stderr.strip()[-400:]}")
    return done


def periods_throttled(timeline: Path) -> tuple[int, int]:
    """(periods throttled, periods) the kernel counted across a ``.cgroup.csv``."""
    with timeline.open() as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        return 0, 0
    first, last = rows[0], rows[-1]
    return (int(last["nr_throttled"]) - int(first["nr_throttled"]),
            int(last["nr_periods"]) - int(first["nr_periods"]))


def tag(cpus: float) -> str:
    return f"{cpus:g}"


# -- one cell -------------------------------------------------------------------------------

def live_half(server: Server, load: str, goal: float, opts: argparse.Namespace,
              cell: Path) -> None:
    """Steps 1-2 for one shape and load: each recording, then live advise; kept in ``cell``."""
    args = load_args(load, server, opts, cell)
    recordings = []
    for cpus in opts.recorded:
        set_cpus(server, cpus)
        time.sleep(0.2)   # a period at the new quota before the load
        name = f"rec-{tag(cpus)}"
        http_timing([*args, "--cgroup", f"pid:{server.pid}", "--name", name, "--data-dir",
                     str(cell), "--no-plot", "--quiet"])
        throttled, periods = periods_throttled(cell / f"{name}.cgroup.csv")
        recordings.append({"cpus": cpus, "name": name, "periods_throttled": throttled,
                           "periods": periods})
        log(f"{server.shape} {load} recorded at {cpus:g} CPU: {throttled} of {periods} "
            "periods throttled")
    started = time.monotonic()
    for run in range(1, opts.live_runs + 1):
        name = live_name(run)
        live = http_timing(["advise", "--cgroup", f"pid:{server.pid}", *args, "--p99",
                            f"{goal:g}", "--profile-seconds", f"{opts.profile_seconds:g}",
                            "--max-runs", str(opts.max_runs), "--no-alternatives", "--name",
                            name, "--data-dir", str(cell / name), "--pictures-dir",
                            str(cell / "pictures"), "--json"], ok=(0, 2, 3), timeout=1800)
        if live.returncode == 2:   # e.g. the goal missed even without a limit: no live answer
            said = (live.stderr.strip().splitlines() or ["exit 2"])[-1]
            (cell / f"{name}.json").write_text(json.dumps({"recommended": None, "reason": said}))
        else:
            (cell / f"{name}.json").write_text(live.stdout)
        answer = (json.loads((cell / f"{name}.json").read_text()).get("recommended")
                  or {}).get("cpus")
        log(f"{server.shape} {load}: live run {run}: {answer} CPU, "
            f"{time.monotonic() - started:.0f} s so far")
    (cell / "cell.json").write_text(json.dumps(
        {"shape": server.shape, "load": load, "p99_ms": goal, "load_args": args,
         "recordings": recordings, "live_seconds": time.monotonic() - started,
         "load_average": loadavg()}, indent=1))


def live_name(run: int) -> str:
    """Live advise's run ``run`` (1-based) in a cell: ``live``, ``live-2``, ..."""
    return "live" if run == 1 else f"live-{run}"


def live_answers(cell: Path) -> tuple[list[float | None], dict[str, Any]]:
    """Every live answer kept in ``cell`` (``live.json``, ``live-2.json``, ...), in run order,
    and the first run's whole answer."""
    runs = []
    run = 1
    while (cell / f"{live_name(run)}.json").exists():
        runs.append(json.loads((cell / f"{live_name(run)}.json").read_text()))
        run += 1
    return [(r.get("recommended") or {}).get("cpus") for r in runs], (runs[0] if runs else {})


def live_span(answers: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(lowest, highest) of the live answers that found a limit; (None, None) if none did."""
    found = [a for a in answers if a is not None]
    return (min(found), max(found)) if found else (None, None)


def passive_half(cell: Path, out: Path) -> list[dict[str, Any]]:
    """Step 3 for one kept cell (``cell``, written by :func:`live_half`), the passive runs
    written under ``out``: one row per recording."""
    meta = json.loads((cell / "cell.json").read_text())
    answers, live = live_answers(cell)
    a_live, a_live_high = live_span(answers)
    live_seen = live_pace(cell / "live")
    rows = []
    for rec in meta["recordings"]:
        name = rec["name"]
        differed = (None if live_seen is None
                    else load_differs(pace_of(cell / name), live_seen))
        done = http_timing(["advise", "--passive", "--timeline", str(cell / f"{name}.cgroup.csv"),
                            "--requests-from", str(cell / f"{name}.csv"), "--p99",
                            f"{meta['p99_ms']:g}", "--name", f"passive-{name}", "--data-dir",
                            str(out / f"passive-{name}"), "--pictures-dir",
                            str(out / "pictures"), "--json"], ok=(0, 2, 3))
        said: dict[str, Any] = {}
        if done.stdout.strip():
            said = json.loads(done.stdout)
        (out / f"passive-{name}.json").write_text(done.stdout or "{}")
        rec_ = said.get("recommended") or {}
        span = rec_.get("range") or {}
        low = (span.get("low") or {}).get("cpus")
        high = (span.get("high") or {}).get("cpus")
        reason = said.get("reason") or (done.stderr.strip().splitlines() or [""])[-1]
        v = replace(verdict(rec_.get("cpus"), low, high, rec_.get("sure"), a_live,
                            has_range=bool(span), unmeetable=UNMEETABLE in str(reason),
                            live_high=a_live_high),
                    differed=differed)
        demand = said.get("demand") or {}
        rows.append({"shape": meta["shape"], "load": meta["load"], "p99_ms": meta["p99_ms"],
                     "recorded_cpus": rec["cpus"], "periods_throttled": rec["periods_throttled"],
                     "periods": rec["periods"], "a_passive": rec_.get("cpus"),
                     "range_low": low, "range_high": high, "range_open": bool(span)
                     and high is None, "sure": rec_.get("sure"),
                     "widened_by": rec_.get("range_says"), "passive_exit": done.returncode,
                     "passive_reason": None if rec_.get("cpus") else reason,
                     "loop": (said.get("requests") or {}).get("loop"),
                     "throttled_fraction": demand.get("throttled_fraction"),
                     "demand_says": demand.get("says"), "a_live": a_live,
                     "a_live_high": a_live_high, "live_runs": answers,
                     "live_reason": live.get("reason"), "verdict": asdict(v),
                     "load_average": meta.get("load_average"), "kept": str(cell)})
    return rows


# -- the table ------------------------------------------------------------------------------

def cpus_text(value: float | None) -> str:
    return "none" if value is None else f"{value:.3g}"


def live_text(r: dict[str, Any]) -> str:
    """A_live: one answer, or the span of several (``0.31–0.48``)."""
    low, high = r["a_live"], r.get("a_live_high")
    if low is None or high is None or abs(high - low) < 1e-9:
        return cpus_text(low)
    return f"{cpus_text(low)}–{cpus_text(high)}"


def short_reason(reason: str | None, code: int) -> str:
    """Why the passive half gave no answer, in a few words."""
    said = reason or ""
    if "no unthrottled stretch" in said:
        return "no unthrottled stretch"
    if UNMEETABLE in said:
        found = re.search(r"\(p99 ([\d.]+) >", said)
        return f"unmeetable (p99 {found.group(1) if found else '?'} ms unlimited)"
    return f"exit {code}"


def row_line(r: dict[str, Any]) -> str:
    v = r["verdict"]
    share = f"{100 * r['periods_throttled'] / r['periods']:.0f} %" if r["periods"] else "–"
    if r["a_passive"] is None:
        answer = f"none: {short_reason(r['passive_reason'], r['passive_exit'])}"
    elif r["range_low"] is None:
        answer = cpus_text(r["a_passive"])
    else:
        answer = (f"{cpus_text(r['a_passive'])} [{cpus_text(r['range_low'])}–"
                  f"{'∞' if r['range_open'] else cpus_text(r['range_high'])}]")
    ratio = "–" if v["ratio"] is None else f"{v['ratio']:.2f}"
    return (f"| {r['shape']} | {r['load']} | {r['p99_ms']:g} | {r['recorded_cpus']:g} | "
            f"{share} | {answer} | {live_text(r)} | {ratio} | "
            f"{'yes' if v['within'] else 'no'} | {v['word']} |")


def cell_text(r: dict[str, Any]) -> str:
    """One recording's cell of the table: the periods it throttled, A_passive [range] and
    passive / live, then the verdict: ``within``, else what the range says (``misleads``:
    nothing says the answer is off)."""
    v = r["verdict"]
    share = f"{100 * r['periods_throttled'] / r['periods']:.0f} %" if r["periods"] else "–"
    differed = v.get("differed")
    word = ("within" if v["within"] else
            ("load differed" if differed else "misleads") if not v["says_so"]
            else "range holds" if v["in_range"] else "not sure")
    if differed and v["says_so"]:
        word += " (load differed)"
    if r["a_passive"] is None:
        why = short_reason(r["passive_reason"], r["passive_exit"]).split(" (")[0]
        return f"{share}: none, {why}" + ("" if v["says_so"] and not differed else f": {word}")
    span = ""
    if r["range_low"] is not None:
        high = "∞" if r["range_open"] else cpus_text(r["range_high"])
        span = f" [{cpus_text(r['range_low'])}–{high}]"
    ratio = "" if v["ratio"] is None else f" ×{v['ratio']:.2f}"
    return f"{share}: {cpus_text(r['a_passive'])}{span}{ratio} {word}"


def print_table(rows: list[dict[str, Any]], head: str) -> dict[str, Any]:
    """The table, a row a shape and load, a column a recording; then ``head`` and the summary
    (after it: docs/benchmarks.md shows a record's tables and what comes before them)."""
    verdicts = [Verdict(**r["verdict"]) for r in rows]
    s = summary(verdicts)
    recorded = sorted({r["recorded_cpus"] for r in rows}, reverse=True)
    print("| shape | load | A_live CPU | " + " | ".join(
        f"at {c:g} CPU: periods throttled: A_passive [range] ×live" for c in recorded) + " |")
    print("|---|---|---|" + "---|" * len(recorded))
    cells: dict[tuple[str, str], dict[float, dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["shape"], r["load"]), {})[r["recorded_cpus"]] = r
    for (shape, load), by in cells.items():
        first = next(iter(by.values()))
        print(f"| {shape} | {load} | {live_text(first)} | "
              + " | ".join(cell_text(by[c]) if c in by else "–" for c in recorded) + " |")
    runs = max((len(r.get("live_runs") or [None]) for r in rows), default=1)
    print(f"\n{head}\nWithin 25 % of "
          + ("live" if runs == 1 else f"a live answer ({runs} live runs a shape and load)")
          + f": {s['within']} of {s['cells']} cells "
          f"({100 * s['share_within']:.0f} %; goal 90 %); misleading: {s['misleading']}"
          + (f"; not comparable (the machine's load differed between record and live): "
             f"{s['not_comparable']}" if s.get("not_comparable") else "")
          + f". Goal {'met' if s['met'] else 'not met'}"
          + (": measure the cells not comparable again on a quiet machine."
             if s.get("not_comparable") else "."))
    for r in rows:
        if r["verdict"].get("differed"):
            print(f"load differed: {r['shape']} {r['load']} recorded at "
                  f"{r['recorded_cpus']:g} CPU: {r['verdict']['differed']}")
    return s


# -- the modes ------------------------------------------------------------------------------

def replay_kept(work: Path) -> int:
    """``--replay-kept``: the passive half of every kept cell again, against its live answer."""
    order = {f"{shape}-{load}": (i, j) for i, shape in enumerate(SHAPES)
             for j, load in enumerate(LOADS)}
    cells = sorted((p.parent for p in work.glob("*/cell.json")),
                   key=lambda c: (order.get(c.name, (len(SHAPES), 0)), c.name))
    if not cells:
        raise SystemExit(f"--replay-kept {work}: no kept cells (*/cell.json) there")
    out = Path(tempfile.mkdtemp(prefix="advise-matrix-replay-"))
    rows = []
    for cell in cells:
        mine = out / cell.name
        mine.mkdir()
        rows += passive_half(cell, mine)
    s = print_table(rows, f"advise --passive (commit {git_head()}) against the live answers "
                          f"kept in {work}; passive runs in {out}")
    # a record of its own: the replay as it is now, judged by live answers measured before
    keep_record("advise_matrix", {"summary": s, "rows": rows, "work": str(work),
                                  "replayed_kept": True})
    return 0


def git_head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--loads", nargs="+", choices=LOADS, default=list(LOADS))
    parser.add_argument("--recorded", type=float, nargs="+", default=[1.0, 0.3],
                        metavar="CPUS", help="the quotas each load is recorded at "
                                             "(default 1 0.3)")
    parser.add_argument("--p99", type=float, nargs="+", default=None, metavar="MS",
                        help="the p99 goal per load, in --loads' order (default: sequential "
                             "40, c4 100, open 50, bursts 90)")
    parser.add_argument("--requests", type=int, default=240,
                        help="requests of a sequential run (default 240: a window of > 1 s "
                             "at 1 CPU)")
    parser.add_argument("--duration", type=float, default=3.0,
                        help="seconds of the c4, open and bursts loads (default 3)")
    parser.add_argument("--rate", type=float, default=55.0,
                        help="the open load's requests/s (default 55: near 0.3 CPU)")
    parser.add_argument("--burst-rate", type=float, default=30.0,
                        help="the bursts load's requests/s (default 30)")
    parser.add_argument("--profile-seconds", type=float, default=3.0,
                        help="live advise's --profile-seconds (default 3)")
    parser.add_argument("--live-runs", type=int, default=2,
                        help="live advise's runs per shape and load: A_live is their span "
                             "(default 2)")
    parser.add_argument("--max-runs", type=int, default=10,
                        help="live advise's --max-runs (default 10)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the runs are kept (default: a new temporary folder)")
    parser.add_argument("--replay-kept", type=Path, default=None, metavar="DIR",
                        help="no server: the passive half again on the runs an earlier run "
                             "kept in DIR (its --out), against its live answers")
    opts = parser.parse_args(argv)
    if opts.replay_kept is not None:
        if not opts.replay_kept.is_dir():
            parser.error(f"--replay-kept {opts.replay_kept}: not a folder of kept runs")
        return replay_kept(opts.replay_kept)
    defaults = {"sequential": 40.0, "c4": 100.0, "open": 50.0, "bursts": 90.0}
    goals = opts.p99 or [defaults[load] for load in opts.loads]
    if len(goals) == 1:
        goals = goals * len(opts.loads)
    if len(goals) != len(opts.loads):
        parser.error(f"--p99: one goal, or one per load ({len(opts.loads)})")
    if opts.live_runs < 1:
        parser.error(f"--live-runs {opts.live_runs}: at least 1")
    if os.geteuid() != 0:
        parser.error("needs root (each server runs in a cgroup made for it)")
    work = opts.out or Path(tempfile.mkdtemp(prefix="advise-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    before = loadavg()
    rows: list[dict[str, Any]] = []
    go_binary = build_go(work) if "go" in opts.shapes else None
    for shape in opts.shapes:
        with server_in_group(shape, max(opts.recorded), go_binary) as server:
            get(server.base_url, server.url()[len(server.base_url):])   # warm up (Go's, Python's first request)
            for load, goal in zip(opts.loads, goals):
                cell = work / f"{shape}-{load}"
                cell.mkdir(exist_ok=True)
                try:
                    live_half(server, load, goal, opts, cell)
                except RuntimeError as exc:
                    log(f"{shape} {load}: {exc}")
                    continue
                found = passive_half(cell, cell)
                for r in found:
                    log(row_line(r))
                rows += found
    after = loadavg()
    said = ", ".join(f"{load} {goal:g}" for load, goal in zip(opts.loads, goals))
    s = print_table(rows, f"advise --passive against live advise --cgroup: ~5 ms of CPU a "
                          f"request; p99 goals (ms): {said}; load average {before} before, "
                          f"{after} after; runs in {work}")
    keep_record("advise_matrix", {"summary": s, "rows": rows, "work": str(work),
                                  "options": {k: (str(v) if isinstance(v, Path) else v)
                                              for k, v in vars(opts).items()}})
    return 0


if __name__ == "__main__":
    run_main(main)
