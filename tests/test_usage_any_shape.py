"""CPU usage that is true for any service: ``http-timing --cgroup pid:PID`` against real
servers of each shape (a thread per request, a process per request, a thread pool) in a cgroup
with a real 0.3 CPU quota, the tool's figures compared with what the kernel counted for the
same process in the same run (its ``utime + stime``, and ``cutime + cstime`` of its reaped
children). On this host (v1, ``cpu`` and ``cpuacct`` mounted apart) the group has no usage
counter of its own, so the figures come from the processes (``client.run.process_usage``).
(The v2 half, against ``usage_usec`` in the guest, is not wired in yet.)

Then, 3 connections for 6 s against a Go ``net/http`` service burning 5 ms per request under
0.3 CPU (built with the Go toolchain in a temporary folder): the requests counted as delayed
by throttling are the slow band's (latency above 3x the run's p10), within x0.7-1.3, and the
run says it is saturated.

The machine may be busy: the group is given a large CPU weight (``cpu.shares``/``cpu.weight``),
so that the quota, not the other processes on the machine, is what limits it; every bound is
relative to what the kernel counted in the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.support import BurningGroup, serve_in_group
from client.data.files import read_run
from client.render.cgroup_plot import draw_usage_panel
from client.render.figures import pyplot
from tests.cgroup_fixtures import burner_in_group
from tests.support import http_timing, require, require_kernel_quota, shield_from_neighbours

GO = Path(os.environ.get("GO", "/usr/local/go/bin/go"))
GO_BURNER = Path(__file__).resolve().parent.parent / "benchmarks" / "go_burner" / "main.go"
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """The kernel's count of the process's CPU: its threads', ended ones included, and its
    reaped children's (``/proc/PID/stat`` utime + stime + cutime + cstime), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) * TICK_S


@pytest.mark.root
@pytest.mark.parametrize("shape", ["request", "fork", "pool"])
def test_usage_of_any_shape_is_what_the_kernel_counted(tmp_path: Path, shape: str) -> None:
    # cgroup v1 only for now: in the v2 guest (~15x slower) these runs took over 5 min each
    # and failed for a reason not yet known; the v2 usage is cpu.stat's own usage_usec
    require_kernel_quota(1)
    requests = "150"
    with burner_in_group(0.3, shape) as service:
        time.sleep(0.3)
        before = process_cpu_s(service.pid)
        result = http_timing("--url", service.base_url + "/burn?ms=5", "--requests", requests,
                             "--new-connection", "--cgroup", f"pid:{service.pid}",
                             "--name", "s", "--quiet", cwd=tmp_path)
        time.sleep(1.0)   # the forking server reaps its last children (it polls every 0.5 s)
        after = process_cpu_s(service.pid)
    assert result.returncode == 0, result.stderr
    report = json.loads(http_timing("report", "raw-data/s.csv", "--json", cwd=tmp_path).stdout)
    c = report["cgroup"]
    run = read_run(tmp_path / "raw-data" / "s.csv")
    usage = (run.metadata.cgroup or {})["usage"]
    assert usage["unknown"] is None and c["usage_unknown"] is None
    tool_s = c["usage_cpus_mean"] * c["duration_s"]
    kernel_s = after - before
    assert kernel_s > 0.3, kernel_s   # the service did work
    assert abs(tool_s - kernel_s) <= 0.1 * kernel_s + 2 * TICK_S, (tool_s, kernel_s, shape)
    assert usage["source"] == "proc"   # no cpuacct group of its own on this host
    assert c["nr_throttled"] >= 5, c   # the quota bit
    if shape == "fork":
        # the children's CPU comes in clock ticks: too coarse to say which period hit 30 ms
        assert c["periods_at_quota"] is None and "too coarse" in c["per_period_unknown"]
    else:
        assert c["periods_at_quota"] >= 0.5 * c["nr_throttled"], c
    # the caption's conclusion follows the kernel's count: a group that used (nearly) all
    # of its quota is not said to run "at only" some share of it
    kernel_share = kernel_s / c["duration_s"] / 0.3
    title = usage_panel_title(run.timeline or [], run.metadata)
    if c["per_period_unknown"] is None:
        assert "periods hit the 0.3 CPU quota" in title
        if kernel_share >= 0.9:
            assert "and the run's average is" in title, (title, kernel_share)
        elif kernel_share <= 0.7:
            assert "yet the run's average is only" in title, (title, kernel_share)
    else:
        assert "too coarse" in title and "yet" not in title


def usage_panel_title(timeline: list, metadata: object) -> str:   # type: ignore[type-arg]
    plt = pyplot()
    fig, ax = plt.subplots()
    try:
        draw_usage_panel(ax, timeline, metadata.limit,   # type: ignore[attr-defined]
                         metadata.cgroup)                # type: ignore[attr-defined]
        return str(ax.get_title())
    finally:
        plt.close(fig)


@pytest.fixture(scope="module")
def go_burner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """benchmarks/go_burner/main.go built in a temporary folder (the toolchain's caches too)."""
    require(GO.exists() or shutil.which("go") is not None,
            f"needs the Go toolchain ({GO}: scripts/install-load-tools.sh)")
    go = str(GO) if GO.exists() else str(shutil.which("go"))
    folder = tmp_path_factory.mktemp("go")
    env = {**os.environ, "HOME": str(folder), "GOCACHE": str(folder / "cache"),
           "GOPATH": str(folder / "gopath"), "GOFLAGS": "", "CGO_ENABLED": "0"}
    binary = folder / "go-burner"
    subprocess.run(["nice", "-n", "5", go, "build", "-o", str(binary), str(GO_BURNER)],
                   cwd=folder, env=env, check=True, capture_output=True, timeout=900)
    return binary


@pytest.mark.root
@pytest.mark.timeout(1200)
def test_a_saturated_go_service_counts_its_slow_band_as_delayed(go_burner: Path,
                                                               tmp_path: Path) -> None:
    require_kernel_quota(1)
    service: BurningGroup
    with serve_in_group([str(go_burner), "0"], 0.3) as service:
        shield_from_neighbours(service.group)
        result = http_timing("--url", service.base_url + "/burn?ms=5", "--concurrency", "3",
                             "--duration", "6", "--cgroup", f"pid:{service.pid}",
                             "--name", "g", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = read_run(tmp_path / "raw-data" / "g.csv")
    ok = [r for r in run.records if r.ok]
    latency = np.asarray([r.latency_ns for r in ok], dtype=float)
    slow = latency > 3 * np.percentile(latency, 10)
    report = json.loads(http_timing("report", "raw-data/g.csv", "--json", cwd=tmp_path).stdout)
    c = report["cgroup"]
    assert c["nr_throttled"] >= 0.8 * c["nr_periods"], c   # every period asks for more
    delayed = report["throttled_count"]
    assert report["throttled_source"] == "cgroup counters"
    assert c["throttled_requests"] == delayed              # one count in one report
    assert 0.7 * slow.sum() <= delayed <= 1.3 * slow.sum(), (delayed, int(slow.sum()), len(ok))
    assert report["saturated"] and "quota" in report["saturated"]
    assert report["stall_ms"] is None and report["period_source"] == "limit"
    text = http_timing("report", "raw-data/g.csv", cwd=tmp_path).stdout
    assert "saturated: " in text and "inferred from stalls" not in text
    assert text.count(f"{delayed} of {len(ok)} requests") == 1
