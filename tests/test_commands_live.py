"""``http-timing ... --live [PORT]`` (client.render.live) against a real throttled service,
read by a plain HTTP client as the page reads it: requests arrive while the run goes, the
throttled ones marked, then the end with the files' names; the server stops with the run and
its CPU is in the run's metadata. Bad ``--live`` input is one line. The real groups' quotas
(0.1 CPU) are far below the share even a busy machine leaves a service."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from cpuquota.account import CpuStat
from cpuquota.cgroupfs import locate_cpu_controller, read_cpu_stat
from tests.support import BIN, free_port, service_process, stop_by_pid, usage_error
from tests.test_render_live import frames


def wait_serving(url: str, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"{url} never served")


def test_a_run_watched_live_from_start_to_end(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with service_process(["--cpu-limit", "5"]) as (base, _service):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.Popen(
            [str(BIN / "http-timing"), "--url", base + "/cpuBurnFlow", "--requests", "150",
             "--name", "l", "--quiet", "--live", str(port)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_serving(url, proc)
            mid, last = None, None
            for frame in frames(url, timeout=60):
                counts = frame["counts"]
                if mid is None and 0 < counts["requests"] < 150 and counts["throttled"]:
                    mid = frame
                last = frame
            out, err = proc.communicate(timeout=60)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the run's, reaped
        finally:
            stop_by_pid(proc)
    assert proc.returncode == 0, err
    run_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert f"live page of the run: {url}" in err
    assert mid is not None, "no frame while the run went"
    assert last is not None and "end" in last
    assert last["counts"]["requests"] == 150 and last["counts"]["throttled"] > 0
    assert last["end"]["files"] == ["raw-data/l.csv", "raw-data/l.json", "pictures/l.png"]
    assert last["end"]["picture"].startswith("data:image/png;base64,")
    assert "raw data: raw-data/l.csv" in out
    with pytest.raises(httpx.ConnectError):   # nothing left serving
        httpx.get(url, timeout=5)
    live = json.loads((tmp_path / "raw-data" / "l.json").read_text())["live"]
    assert live["url"] == url and live["viewers"] == 1 and live["frames_sent"] >= 2
    # the page's server is one thread of the run's process: its CPU is part of the process's
    assert 0 < live["server_cpu_s"] <= run_cpu_s + 0.01 and live["frames_dropped"] == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["--live-host", "0.0.0.0"], "--live-host goes with --live"),
    (["--live", "70000"], "argument --live: must be an integer in [0, 65535]"),
    (["--live", "0", "--live-host", "203.0.113.9"], "--live cannot serve on 203.0.113.9:0"),
])
def test_bad_live_options_are_one_line(tmp_path: Path, argv: list[str], message: str,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    line = usage_error(["--url", "http://127.0.0.1:9/", "--requests", "1", *argv], tmp_path,
                       monkeypatch, capsys)
    assert message in line, line
    assert not (tmp_path / "raw-data").exists()


@pytest.mark.root
def watched_live(argv: list[str], cwd: Path) -> tuple[str, list[dict], tuple[int, str, str]]:
    """``http-timing ARGV --live PORT`` read from its start to its end as the page reads it:
    (the page's URL, every frame, (exit code, stdout, stderr))."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen([str(BIN / "http-timing"), *argv, "--live", str(port)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_serving(url, proc)
        got = list(frames(url, timeout=30))
        out, err = proc.communicate(timeout=30)
    finally:
        stop_by_pid(proc)
    return url, got, (proc.returncode, out, err)


def group_stat(group: Path) -> CpuStat | None:
    """The real group's ``cpu.stat`` now, read as the kernel's hierarchy on this host says."""
    return read_cpu_stat(group, locate_cpu_controller().version)


def test_watch_live_shows_the_groups_throttles_then_ends(tmp_path: Path) -> None:
    from tests.test_commands_watch import QUOTA_MS, busy_burner

    with busy_burner() as burner:
        before = group_stat(burner.group)
        url, got, (code, out, err) = watched_live(
            ["watch", str(burner.group), "--json", "--interval", "0.5", "--count", "6"], tmp_path)
        after = group_stat(burner.group)
    assert code == 0, err
    assert len(out.splitlines()) == 6            # the JSON lines go on as before
    assert f"live page of the watch: {url}" in err
    panels = [f["cgroup"] for f in got if "cgroup" in f]
    assert panels and panels[-1]["quota_ms"] == pytest.approx(QUOTA_MS)
    assert panels[-1]["stretches"] and panels[-1]["periods"]   # the throttles, CPU per period
    assert before is not None and after is not None
    kernel = after - before      # what the page counted is what the kernel counted meanwhile
    assert 0 < panels[-1]["nr_throttled"] <= kernel.nr_throttled, (panels[-1], kernel)
    assert panels[-1]["nr_periods"] <= kernel.nr_periods, (panels[-1], kernel)
    assert got[-1]["end"] == {"files": [], "interrupted": False, "picture": None,
                              "source": "none"}
    assert got[-1]["counts"]["requests"] == 0 and not got[-1]["points"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=5)


def test_record_live_shows_the_group_then_the_timeline_files(tmp_path: Path) -> None:
    from tests.test_commands_watch import QUOTA_MS, busy_burner

    with busy_burner() as burner:
        before = group_stat(burner.group)
        url, got, (code, _out, err) = watched_live(
            ["record", str(burner.group), "--duration", "3", "--name", "rec", "--data-dir",
             str(tmp_path)], tmp_path)
        after = group_stat(burner.group)
    assert code == 0, err
    assert f"live page of the recording: {url}" in err
    panels = [f["cgroup"] for f in got if "cgroup" in f]
    assert panels and panels[-1]["quota_ms"] == pytest.approx(QUOTA_MS)
    assert before is not None and after is not None
    kernel = after - before
    assert 0 < panels[-1]["nr_throttled"] <= kernel.nr_throttled, (panels[-1], kernel)
    files = got[-1]["end"]["files"]
    assert [Path(f).name for f in files] == ["rec.cgroup.csv", "rec.json"]
    assert (tmp_path / "rec.cgroup.csv").stat().st_size > 0   # the recording itself went on
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=5)


@pytest.mark.root
def test_the_cpu_panel_of_a_fork_per_request_service_counts_no_period_at_the_quota(
        tmp_path: Path) -> None:
    """A process per request in a v1 group with no usage counter of its own: the children's
    CPU reaches the group's figure in clock ticks (10 ms), too coarse for a 10 ms quota. The
    live page learns it while the run goes (the sampler keeps the run's usage note up to
    date), so from then on no panel counts periods at the quota, and the last one says what
    the report says."""
    from tests.cgroup_fixtures import burner_in_group
    from tests.support import http_timing, require_kernel_quota

    require_kernel_quota(1)
    with burner_in_group(0.1, "fork") as service:
        url, got, (code, _out, err) = watched_live(
            ["--url", service.base_url + "/burn?ms=5", "--requests", "80", "--new-connection",
             "--cgroup", f"pid:{service.pid}", "--name", "f", "--quiet", "--no-plot"], tmp_path)
    assert code == 0, err
    panels = [(f["cgroup"], "end" in f) for f in got if "cgroup" in f]
    assert panels and panels[-1][1], "no panel at the end"
    coarse = [i for i, (p, _end) in enumerate(panels) if p["per_period_unknown"]]
    assert coarse, [p for p, _ in panels]
    assert not panels[coarse[0]][1], "the coarse usage was only known at the end"
    for panel, _end in panels[coarse[0]:]:   # once known, it stays so
        assert "too coarse" in panel["per_period_unknown"] and panel["periods_at_quota"] is None
    report = json.loads(http_timing("report", "raw-data/f.csv", "--json", cwd=tmp_path).stdout)
    assert report["cgroup"]["per_period_unknown"] == panels[-1][0]["per_period_unknown"]
    assert report["cgroup"]["periods_at_quota"] is None
