"""CPU usage that is true for any service: ``http-timing --cgroup pid:PID`` against real
servers of each shape (a thread per request, a process per request, a thread pool) in a cgroup
with a real 0.1 CPU quota, the tool's figures compared with what the kernel counted for the
same process in the same run (its ``utime + stime``, and ``cutime + cstime`` of its reaped
children). On this host (v1, ``cpu`` and ``cpuacct`` mounted apart) the group has no usage
counter of its own, so the figures come from the processes (``client.run.process_usage``).
On cgroup v2 (the guest, ``cgroup2``) the group's own ``cpu.stat usage_usec`` is the source:
the forking shape, fewer requests (TCG is ~10x slower), the tool's figure against the
``usage_usec`` the test reads itself around the run.

Then, 3 connections for 6 s against a Go ``net/http`` service burning 5 ms per request under
0.1 CPU (built with the Go toolchain in a temporary folder): the requests counted as delayed
by throttling are those the group's throttling held, and the run says it is saturated.

The machine may be busy: 0.1 CPU is far below the share even a busy machine leaves a service,
so the quota, not the other processes on the machine, is what limits it; every bound is
relative to what the kernel counted in the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.support import BurningGroup, get, serve_in_group
from client.analysis.cgroup import AT_QUOTA
from client.analysis.report import build_report
from client.data.files import read_run
from client.render.cgroup_plot import draw_usage_panel
from client.render.figures import pyplot
from tests.cgroup_fixtures import burner_in_group
from tests.support import http_timing, require, require_kernel_quota

GO = Path(os.environ.get("GO", "/usr/local/go/bin/go"))
GO_BURNER = Path(__file__).resolve().parent.parent / "benchmarks" / "go_burner" / "main.go"
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
QUOTA_CPUS = 0.1


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
    with burner_in_group(QUOTA_CPUS, shape) as service:
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
    print(f"{shape}: tool {tool_s:.3f} s, kernel (utime+stime+cutime+cstime) {kernel_s:.3f} s, "
          f"{c['periods_at_quota']} of {c['nr_throttled']} throttled periods at the quota, "
          f"{c['nr_throttled']} of {c['nr_periods']} throttled")   # shown by pytest -rA
    assert kernel_s > 0.3, kernel_s   # the service did work
    assert abs(tool_s - kernel_s) <= 0.1 * kernel_s + 2 * TICK_S, (tool_s, kernel_s, shape)
    assert usage["source"] == "proc"   # no cpuacct group of its own on this host
    assert c["nr_throttled"] >= 5, c   # the quota bit
    if shape == "fork":
        # the children's CPU comes in clock ticks: too coarse to say which period hit 10 ms
        assert c["periods_at_quota"] is None and "too coarse" in c["per_period_unknown"]
    else:
        assert c["periods_at_quota"] >= 0.5 * c["nr_throttled"], c
    # the caption's conclusion follows the kernel's count: a group that used (nearly) all
    # of its quota is not said to run "at only" some share of it
    kernel_share = kernel_s / c["duration_s"] / QUOTA_CPUS
    title = usage_panel_title(run.timeline or [], run.metadata)
    if c["per_period_unknown"] is None:
        assert f"periods hit the {QUOTA_CPUS:g} CPU quota" in title
        if kernel_share >= 0.9:
            assert "and the run's average is" in title, (title, kernel_share)
        elif kernel_share <= 0.7:
            assert "yet the run's average is only" in title, (title, kernel_share)
    else:
        assert "too coarse" in title and "yet" not in title


def usage_usec(group: Path) -> int:
    """The group's own v2 count of its CPU (``cpu.stat usage_usec``), µs."""
    for line in (group / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1])
    raise AssertionError(f"no usage_usec in {group}/cpu.stat")


@pytest.mark.root
@pytest.mark.cgroup2
@pytest.mark.timeout(900)   # TCG: the CLI alone takes ~30 s to start in the guest
@pytest.mark.parametrize("shape", ["fork"])
def test_v2_usage_of_any_shape_is_usage_usec(tmp_path: Path, shape: str) -> None:
    """On v2 the figure is the group's own counter, whatever the service does with threads
    and processes: shown with the shape the processes' own counters would get wrong, a process
    per request that comes and goes (the thread and pool shapes run on v1 above, where the
    figure does come from the processes; in the guest each shape was ~20 s under TCG idle and
    ~60 s beside the host's tests, for the same counter read by the same code). The test reads ``usage_usec`` before the CLI starts and after it ends: the
    tool's first and last readings of it lie in between, the report's figure is their
    difference, and it is within 5 % of the test's own, less what the group used outside the
    tool's window (under TCG the CLI takes over a minute to start and end): at most twice its
    idle rate, measured here, over that time, and two requests' share (the reachability
    check's connection before, the last request's end after)."""
    require_kernel_quota(2)
    requests = 12
    with burner_in_group(QUOTA_CPUS, shape) as service:
        for _ in range(2):   # the server's code paths run once before: TCG translates code
            assert get(service.base_url, "/burn?ms=1", timeout=120)[0] == 200   # on first use
        time.sleep(0.5)
        idle_from, idle_start = usage_usec(service.group), time.monotonic()
        time.sleep(2.0)
        idle_rate = (usage_usec(service.group) - idle_from) / 1e6 / (time.monotonic()
                                                                    - idle_start)
        before, start = usage_usec(service.group), time.monotonic()
        result = http_timing("--url", service.base_url + "/burn?ms=10", "--requests",
                             str(requests), "--new-connection", "--cgroup",
                             f"pid:{service.pid}", "--name", "s", "--quiet", "--no-plot",
                             cwd=tmp_path, timeout=600)
        after, elapsed = usage_usec(service.group), time.monotonic() - start
    assert result.returncode == 0, result.stderr
    csv = tmp_path / "raw-data" / "s.csv"
    run = read_run(csv)
    c = build_report(run).to_dict()["cgroup"]   # in this process: each CLI start costs ~30 s
    usage = (run.metadata.cgroup or {})["usage"]
    assert usage["source"] == "cpu.stat" and usage["unknown"] is None, usage
    assert c["usage_unknown"] is None and c["per_period_unknown"] is None, c
    tool_s = c["usage_cpus_mean"] * c["duration_s"]
    kernel_s = (after - before) / 1e6
    timeline = run.timeline or []
    first_us, last_us = timeline[0].usage_ns // 1000, timeline[-1].usage_ns // 1000
    # the tool read this very counter: its first and last readings lie within the test's
    assert before <= first_us <= last_us <= after, (before, first_us, last_us, after)
    assert tool_s == pytest.approx((last_us - first_us) / 1e6, rel=1e-6, abs=2e-6)
    # what the group used outside the tool's window, before (the CLI starting, its
    # reachability check's connection) and after (the last request's end, the CLI ending)
    before_s, after_s = (first_us - before) / 1e6, (after - last_us) / 1e6
    outside_s = max(0.0, elapsed - c["duration_s"])
    one_request_s = tool_s / requests
    allowance_s = 2 * idle_rate * outside_s + 2 * one_request_s
    figures = dict(tool_s=round(tool_s, 4), kernel_s=round(kernel_s, 4),
                   before_s=round(before_s, 4), after_s=round(after_s, 4),
                   idle_cpus=round(idle_rate, 5), outside_s=round(outside_s, 1),
                   one_request_s=round(one_request_s, 4), allowance_s=round(allowance_s, 4))
    print(f"v2 {shape}: {figures}; {c['periods_at_quota']} of {c['nr_throttled']} throttled "
          f"periods at the quota, {c['nr_throttled']} of {c['nr_periods']} throttled")
    assert kernel_s > 0.2, figures   # the service did work
    assert tool_s >= 0.95 * (kernel_s - allowance_s), figures
    assert c["nr_throttled"] >= 3, c   # the quota bit
    # usage_usec is exact: the periods at the quota are known for every shape, and they hold
    # no more CPU than the group used. How many of the throttled periods reached 90 % of the
    # quota is the kernel's doing, not asserted here: under TCG with two vCPUs it throttles
    # periods whose quota is partly stranded on the other vCPU's runqueue
    at_quota = c["periods_at_quota"]
    assert at_quota is not None and at_quota >= 1, c
    assert at_quota * AT_QUOTA * QUOTA_CPUS / 10 <= tool_s * 1.001, (at_quota, figures)


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
    """benchmarks/go_burner/main.go built in a temporary folder, with the toolchain's own build
    cache (as the agent's tests use it): a cache of its own here compiled the standard library
    again in every run."""
    require(GO.exists() or shutil.which("go") is not None,
            f"needs the Go toolchain ({GO}: scripts/install-load-tools.sh)")
    go = str(GO) if GO.exists() else str(shutil.which("go"))
    folder = tmp_path_factory.mktemp("go")
    env = {**os.environ, "GOPATH": str(folder / "gopath"), "GOFLAGS": "", "CGO_ENABLED": "0"}
    binary = folder / "go-burner"
    subprocess.run([go, "build", "-o", str(binary), str(GO_BURNER)],
                   cwd=folder, env=env, check=True, capture_output=True, timeout=900)
    return binary


@pytest.mark.root
@pytest.mark.timeout(1200)
def test_a_saturated_go_service_counts_the_requests_its_quota_held(go_burner: Path,
                                                                  tmp_path: Path) -> None:
    require_kernel_quota(1)
    service: BurningGroup
    with serve_in_group([str(go_burner), "0"], QUOTA_CPUS) as service:
        result = http_timing("--url", service.base_url + "/burn?ms=5", "--concurrency", "3",
                             "--duration", "6", "--cgroup", f"pid:{service.pid}",
                             "--name", "g", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = read_run(tmp_path / "raw-data" / "g.csv")
    ok = [r for r in run.records if r.ok]
    report = json.loads(http_timing("report", "raw-data/g.csv", "--json", cwd=tmp_path).stdout)
    c = report["cgroup"]
    assert c["nr_throttled"] >= 0.8 * c["nr_periods"], c   # every period asks for more
    delayed = report["throttled_count"]
    assert report["throttled_source"] == "cgroup counters"
    print(f"go: {delayed} of {len(ok)} delayed by throttling; "
          f"{c['nr_throttled']} of {c['nr_periods']} throttled; saturated: {report['saturated']}")
    assert c["throttled_requests"] == delayed              # one count in one report
    # the requests the group's throttling held, as the kernel's counters read in the run say
    assert 0 < delayed == sum(1 for r in ok if r.cgroup_held_ns), (delayed, len(ok))
    assert report["saturated"] and "quota" in report["saturated"]
    assert report["stall_ms"] is None and report["period_source"] == "limit"
    text = http_timing("report", "raw-data/g.csv", cwd=tmp_path).stdout
    assert "saturated: " in text and "inferred from stalls" not in text
    assert text.count(f"{delayed} of {len(ok)} requests") == 1
